"""DDL downstream: what a released DDL event does (pure), its names routed inside the text,
TiDB-only syntax made safe for other servers, and the one DDL an operator asked to skip."""
