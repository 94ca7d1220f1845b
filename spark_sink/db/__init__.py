"""The downstream database as the rest of the sink reaches it: ``connection`` (connections, TLS
from ``tls``, LOAD DATA LOCAL guarded by ``local_infile``, the sink's own connection, what a
failed one says about the settings), ``checkpoint`` (the checkpoint table: progress, the leader's
epoch, a DDL to skip), ``tables`` (a table's columns and the facts that decide loading in place),
``dialect`` (each server's SQL and error classes) and ``retries`` (riding out a downstream that
is away for now)."""
