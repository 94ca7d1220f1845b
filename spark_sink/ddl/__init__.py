"""DDL downstream: what a released DDL event does (``action``, pure), running it once and
recording it in the checkpoint (``apply``), its names routed inside the text (``rewrite``),
TiDB-only syntax made safe for other servers (``tidb_syntax``, ``text``), and the one DDL an
operator asked to skip (``skip``)."""
