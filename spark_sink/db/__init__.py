"""The downstream database: connections (with TLS and LOAD DATA LOCAL), the checkpoint table,
table layouts, and each server's SQL and error classes (the dialects)."""
