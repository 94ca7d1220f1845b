"""The table ``<meta_db>.split_position``: per pipeline, how far the sink has come through one
upstream transaction it commits in chunks (``TICDC_SINK_SPLIT_LARGE_TXN``, :mod:`spark_sink.split`):
its commit ts, the pass (its removals, then its new images) and the changes of that pass done.

A table of its own rather than columns of the checkpoint table: the checkpoint keeps meaning one
thing, how far the downstream is at a transaction's boundary, for every reader of it (``status``,
``recover``, the pollers); a row here exists only while a split is under way (the commit that
advances the checkpoint past the transaction deletes it), so a row left is itself the sign; and a
new table needs only ``CREATE TABLE IF NOT EXISTS`` on every server, where new columns would need
an upgrade of every existing checkpoint table (MySQL 8 has no ``ADD COLUMN IF NOT EXISTS``).
Each chunk writes its row in the chunk's own downstream transaction, after the checkpoint's epoch
check (:meth:`~spark_sink.db.checkpoint.CheckpointTable.fence`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from spark_sink.db.dialect import ANY_SERVER, Dialect, quote
from spark_sink.db.tables import table_name

SPLIT_POSITION_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
  pipeline VARCHAR(64) NOT NULL PRIMARY KEY,
  commit_ts BIGINT UNSIGNED NOT NULL,
  pass TINYINT UNSIGNED NOT NULL,
  done BIGINT UNSIGNED NOT NULL,
  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
)
"""


class SplitPass(IntEnum):
    """The passes over a split transaction's changes, in the order they run."""

    REMOVALS = 1
    IMAGES = 2


@dataclass(frozen=True)
class SplitPosition:
    """Committed so far of the transaction at ``commit_ts``: every pass before ``pass_``
    whole, and the first ``done`` changes (in release order) of ``pass_``."""

    commit_ts: int
    pass_: SplitPass
    done: int

    def describe(self) -> str:
        return f"ts {self.commit_ts}, {self.pass_.name.lower()} pass, {self.done} changes done"


class SplitPositionTable:
    """``<meta_db>.split_position``: per pipeline, the position in a split transaction."""

    def __init__(self, meta_db: str, pipeline: str, dialect: Dialect = ANY_SERVER) -> None:
        self.table = table_name(meta_db, "split_position")
        self.meta_db = meta_db
        self.pipeline = pipeline
        self.dialect = dialect

    def create(self, cursor: Any) -> None:
        cursor.execute(f"CREATE DATABASE IF NOT EXISTS {quote(self.meta_db)}")
        cursor.execute(SPLIT_POSITION_DDL.format(table=self.table))

    def read(self, cursor: Any) -> SplitPosition | None:
        cursor.execute(
            f"SELECT commit_ts, pass, done FROM {self.table} WHERE pipeline = %s",
            (self.pipeline,),
        )
        row = cursor.fetchone()
        if row is None:
            return None
        return SplitPosition(int(row[0]), SplitPass(int(row[1])), int(row[2]))

    def record(self, cursor: Any, position: SplitPosition) -> None:
        """Record ``position`` inside the caller's transaction (the chunk's)."""
        new = self.dialect.inserted
        cursor.execute(
            self.dialect.upsert_values(
                self.table,
                ["pipeline", "commit_ts", "pass", "done"],
                f"commit_ts = {new('commit_ts')}, pass = {new('pass')}, done = {new('done')}",
            ),
            (self.pipeline, position.commit_ts, int(position.pass_), position.done),
        )

    def clear(self, cursor: Any) -> None:
        """No split under way (inside the caller's transaction: the checkpoint's advance)."""
        cursor.execute(f"DELETE FROM {self.table} WHERE pipeline = %s", (self.pipeline,))
