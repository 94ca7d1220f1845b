"""The baseline of bench_tables: the best plain SQL, over N connections, for rows spread over many
tables. Each connection is a process of its own (benchmarks/shares.py) that owns every N-th table
and writes its tables' final rows: a transaction per :data:`TABLES_A_TRANSACTION` tables (the
sink's ``TICDC_SINK_BATCH_TABLES``), one multi-row upsert a table. What it leaves out of the sink's
work: decoding, staging, ordering and the checkpoint."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from benchmarks.shares import timed_shares
from config.settings import Settings
from core.model import Value
from core.sql import quote
from spark_sink.db.connection import connect
from ticdc_sink.scenario import Transaction

# Tables one transaction writes: the sink's default TICDC_SINK_BATCH_TABLES.
TABLES_A_TRANSACTION = 500

# (table, its final rows as (id, v, n)) for each table that has any.
TableRows = list[tuple[str, list[tuple[Value, ...]]]]


def final_rows(changes: Sequence[Transaction]) -> TableRows:
    """Each table's rows as the changes leave them, keyed by id."""
    tables: dict[str, dict[Value, tuple[Value, ...]]] = {}
    for transaction in changes:
        for row in transaction.rows:
            image = row.new or {}
            tables.setdefault(row.table, {})[image["id"]] = (image["id"], image["v"], image["n"])
    return [(table, list(rows.values())) for table, rows in sorted(tables.items())]


def raw_tables_rate(
    settings: Settings, table_ddl: str, tables: TableRows, changes: int, connections: int
) -> float:
    """Row changes a second (``changes`` over the time to write ``tables``' final rows) over
    ``connections`` processes at once, into tables made anew (``table_ddl``) in a database of
    this run, dropped after."""
    database = f"raw_tables_{uuid.uuid4().hex[:8]}"
    try:
        _make_tables(settings, database, table_ddl, [name for name, _ in tables])
        shares = [(settings, database, tables[i::connections]) for i in range(connections)]
        return changes / timed_shares(_write_share, shares)
    finally:
        with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {quote(database)}")


def _make_tables(settings: Settings, database: str, table_ddl: str, names: list[str]) -> None:
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {quote(database)}")
        for name in names:
            cursor.execute(table_ddl.format(table=f"{quote(database)}.{quote(name)}"))


def _write_share(settings: Settings, database: str, share: TableRows, start: Any) -> None:
    with connect(settings) as conn, conn.cursor() as cursor:
        start.wait()
        for first in range(0, len(share), TABLES_A_TRANSACTION):
            for name, rows in share[first : first + TABLES_A_TRANSACTION]:
                marks = ", ".join(["(%s, %s, %s)"] * len(rows))
                cursor.execute(
                    f"INSERT INTO {quote(database)}.{quote(name)} (id, v, n) VALUES {marks} "
                    "ON DUPLICATE KEY UPDATE v = VALUES(v), n = VALUES(n)",
                    [value for row in rows for value in row],
                )
            conn.commit()
