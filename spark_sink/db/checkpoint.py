"""The checkpoint table ``<meta_db>.checkpoint``: per pipeline, how far the downstream is (the
applied resolved ts, the last applied DDL's ts, the Kafka offsets that go with them), the leader's
epoch that fences a stale leader's commits, and a DDL an operator asked to skip."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import orjson
import pymysql

from config.errors import LostLeadershipError
from config.settings import Settings
from spark_sink.db.connection import SinkConnection, connect
from spark_sink.db.dialect import ANY_SERVER, Dialect, quote
from spark_sink.db.tables import table_name

CHECKPOINT_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
  pipeline VARCHAR(64) NOT NULL PRIMARY KEY,
  resolved_ts BIGINT UNSIGNED NOT NULL,
  ddl_ts BIGINT UNSIGNED NOT NULL DEFAULT 0,
  epoch BIGINT UNSIGNED NOT NULL DEFAULT 0,
  offsets JSON NULL,
  skip_ddl_ts BIGINT UNSIGNED NOT NULL DEFAULT 0,
  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
)
"""


@dataclass(frozen=True)
class Checkpoint:
    resolved_ts: int
    ddl_ts: int
    epoch: int
    offsets: dict[str, int]
    # The commit ts of a DDL the operator told the sink to skip (`ticdc-sink skip-ddl`).
    skip_ddl_ts: int = 0


# Before the first checkpoint is recorded.
NO_CHECKPOINT = Checkpoint(0, 0, 0, {})


class CheckpointTable:
    """``<meta_db>.checkpoint``: per pipeline, how far the downstream is (monotonic)."""

    def __init__(self, meta_db: str, pipeline: str, dialect: Dialect = ANY_SERVER) -> None:
        self.table = table_name(meta_db, "checkpoint")
        self.meta_db = meta_db
        self.pipeline = pipeline
        # Writes the upserts below (VALUES() or MySQL 8's row alias).
        self.dialect = dialect

    def create(self, cursor: Any) -> None:
        cursor.execute(f"CREATE DATABASE IF NOT EXISTS {quote(self.meta_db)}")
        cursor.execute(CHECKPOINT_DDL.format(table=self.table))
        # A checkpoint table without `skip-ddl`'s column gets it.
        cursor.execute(
            "SELECT 1 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = 'checkpoint' AND COLUMN_NAME = 'skip_ddl_ts'",
            (self.meta_db,),
        )
        if cursor.fetchone() is None:
            cursor.execute(
                f"ALTER TABLE {self.table} ADD COLUMN skip_ddl_ts BIGINT UNSIGNED NOT NULL "
                "DEFAULT 0 AFTER offsets"
            )

    def read(self, cursor: Any) -> Checkpoint | None:
        cursor.execute(
            f"SELECT resolved_ts, ddl_ts, epoch, offsets, skip_ddl_ts FROM {self.table} "
            "WHERE pipeline = %s",
            (self.pipeline,),
        )
        row = cursor.fetchone()
        if row is None:
            return None
        return Checkpoint(
            int(row[0]), int(row[1]), int(row[2]), orjson.loads(row[3] or "{}"), int(row[4])
        )

    def request_skip(self, cursor: Any, ddl_ts: int) -> None:
        """Tell the sink to skip the DDL at ``ddl_ts`` instead of running it (inside the
        caller's transaction)."""
        new = self.dialect.inserted
        cursor.execute(
            self.dialect.upsert_values(
                self.table,
                ["pipeline", "resolved_ts", "skip_ddl_ts"],
                f"skip_ddl_ts = {new('skip_ddl_ts')}",
            ),
            (self.pipeline, 0, ddl_ts),
        )

    def advance(
        self,
        cursor: Any,
        resolved_ts: int,
        epoch: int,
        offsets: dict[str, int],
        ddl_ts: int | None = None,
    ) -> None:
        """Record progress inside the caller's transaction; a stale leader is refused."""
        self._check_epoch(cursor, epoch)
        new = self.dialect.inserted
        updates = (
            f"offsets = IF({new('resolved_ts')} >= resolved_ts, {new('offsets')}, offsets), "
            f"resolved_ts = GREATEST(resolved_ts, {new('resolved_ts')}), "
            f"ddl_ts = GREATEST(ddl_ts, {new('ddl_ts')}), epoch = {new('epoch')}"
        )
        cursor.execute(
            self.dialect.upsert_values(
                self.table, ["pipeline", "resolved_ts", "ddl_ts", "epoch", "offsets"], updates
            ),
            (self.pipeline, resolved_ts, ddl_ts or 0, epoch, orjson.dumps(offsets).decode()),
        )

    def fence(self, cursor: Any, epoch: int) -> None:
        """Record ``epoch`` as the pipeline's leader inside the caller's transaction, progress
        unchanged, so a stale leader's later commits are refused; a stale ``epoch`` is refused
        itself. For commits that apply changes without advancing the checkpoint (the chunks of
        a split transaction, :mod:`spark_sink.split`)."""
        self._check_epoch(cursor, epoch)
        cursor.execute(
            self.dialect.upsert_values(
                self.table,
                ["pipeline", "resolved_ts", "epoch"],
                f"epoch = GREATEST(epoch, {self.dialect.inserted('epoch')})",
            ),
            (self.pipeline, 0, epoch),
        )

    def _check_epoch(self, cursor: Any, epoch: int) -> None:
        """Lock the pipeline's row; refuse ``epoch`` when a newer leader is recorded."""
        cursor.execute(
            f"SELECT epoch FROM {self.table} WHERE pipeline = %s FOR UPDATE", (self.pipeline,)
        )
        row = cursor.fetchone()
        if row is not None and int(row[0]) > epoch:
            raise LostLeadershipError(f"pipeline {self.pipeline} is led by epoch {row[0]} now")


def read_checkpoint(connection: SinkConnection, table: CheckpointTable) -> Checkpoint:
    """How far the downstream is, over the sink's connection (all zero before the first
    checkpoint)."""
    conn = connection.open()
    with conn.cursor() as cursor:
        found = table.read(cursor)
    conn.commit()
    return found or NO_CHECKPOINT


class CheckpointWatch:
    """Reads a pipeline's applied resolved ts again and again over one connection.

    For pollers (progress lines, benchmarks): PyMySQL builds a TLS context for every new
    connection, CPU that a poller connecting each time steals from the pipeline.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.table = CheckpointTable(settings.downstream.meta_db, settings.group)
        self._conn: pymysql.connections.Connection | None = None

    def applied_resolved_ts(self) -> int:
        """The applied resolved ts now; 0 before the sink has recorded any."""
        try:
            if self._conn is None:
                self._conn = connect(self.settings, autocommit=True)
            with self._conn.cursor() as cursor:
                found = self.table.read(cursor)
        except pymysql.MySQLError:  # no checkpoint table yet, or the connection dropped
            self.close()
            return 0
        return found.resolved_ts if found else 0

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(pymysql.MySQLError):
                self._conn.close()
            self._conn = None

    def __enter__(self) -> CheckpointWatch:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
