"""The last check's result, kept downstream in ``<meta_db>.last_check`` per pipeline so that
``ticdc-sink status`` shows it (when, at which checkpoint ts, match or not)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pymysql

from config.settings import Settings
from core.tso import describe_tso
from spark_sink.db.connection import connect
from spark_sink.db.dialect import Dialect, quote, server_dialect
from spark_sink.db.tables import table_name

LAST_CHECK_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
  pipeline VARCHAR(64) NOT NULL PRIMARY KEY,
  checked_at TIMESTAMP(6) NOT NULL,
  ts BIGINT UNSIGNED NOT NULL,
  matched BOOLEAN NOT NULL,
  checked_tables INT NOT NULL,
  checked_rows BIGINT UNSIGNED NOT NULL,
  differences BIGINT UNSIGNED NOT NULL,
  seconds DOUBLE NOT NULL
)
"""
_COLUMNS = [
    "pipeline",
    "checked_at",
    "ts",
    "matched",
    "checked_tables",
    "checked_rows",
    "differences",
    "seconds",
]
# MySQL errors that mean "no check recorded yet": no meta database, no table.
NOT_YET_CREATED = frozenset({1049, 1146})


@dataclass(frozen=True)
class LastCheck:
    checked_at: datetime
    ts: int
    matched: bool
    tables: int
    rows: int
    differences: int
    seconds: float

    def line(self) -> str:
        verdict = "match" if self.matched else f"DIFFER ({self.differences} differences)"
        when = self.checked_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        return (
            f"last check: {when}, at checkpoint ts {describe_tso(self.ts)}: {verdict}; "
            f"{self.tables} tables, {self.rows} rows in {self.seconds:.1f} s"
        )

    def fields(self) -> dict[str, Any]:
        return {
            "checked_at": self.checked_at.isoformat().replace("+00:00", "Z"),
            "ts": self.ts,
            "match": self.matched,
            "tables": self.tables,
            "rows": self.rows,
            "differences": self.differences,
            "seconds": self.seconds,
        }


def _table(settings: Settings) -> str:
    return table_name(settings.downstream.meta_db, "last_check")


def record(settings: Settings, check: LastCheck) -> None:
    """Keep ``check`` as the pipeline's last (its own autocommit connection: the check's
    snapshot transactions are read-only)."""
    table = _table(settings)
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        dialect: Dialect = server_dialect(cursor)
        cursor.execute(f"CREATE DATABASE IF NOT EXISTS {quote(settings.downstream.meta_db)}")
        cursor.execute(LAST_CHECK_DDL.format(table=table))
        new = dialect.inserted
        updates = ", ".join(f"{c} = {new(c)}" for c in _COLUMNS[1:])
        cursor.execute(
            dialect.upsert_values(table, _COLUMNS, updates),
            (
                settings.group,
                check.checked_at.replace(tzinfo=None),
                check.ts,
                check.matched,
                check.tables,
                check.rows,
                check.differences,
                check.seconds,
            ),
        )


def read_last_check(settings: Settings) -> LastCheck | None:
    """The pipeline's last check; None when none was recorded."""
    try:
        with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
            cursor.execute(
                f"SELECT {', '.join(_COLUMNS[1:])} FROM {_table(settings)} WHERE pipeline = %s",
                (settings.group,),
            )
            row = cursor.fetchone()
    except pymysql.MySQLError as error:
        if error.args and error.args[0] in NOT_YET_CREATED:
            return None
        raise
    if row is None:
        return None
    return LastCheck(
        row[0].replace(tzinfo=UTC),
        int(row[1]),
        bool(row[2]),
        int(row[3]),
        int(row[4]),
        int(row[5]),
        float(row[6]),
    )
