"""The downstream of one pipeline as the sink's loop sees it: its checkpoint, a batch applied
atomically with the checkpoint (:mod:`spark_sink.apply_batch`; a transaction it splits, chunk by
chunk with its position), a DDL run once and recorded (:mod:`spark_sink.ddl.apply`), all over
the sink's one connection, whose server's dialect writes every statement and classifies every
error."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from config.errors import TransactionTooLargeError
from config.settings import Settings
from core.model import DDLEvent
from spark_sink.apply_batch import BatchApplier
from spark_sink.apply_chunk import ChunkApplier
from spark_sink.db.checkpoint import Checkpoint, CheckpointTable, read_checkpoint
from spark_sink.db.connection import SinkConnection
from spark_sink.db.dialect import Dialect
from spark_sink.db.split_position import SplitPosition, SplitPositionTable
from spark_sink.ddl.apply import DDLApplier
from spark_sink.ddl.rewrite import named_tables
from spark_sink.ddl.text import may_change_foreign_keys
from spark_sink.in_order import Turn
from spark_sink.load.spark_start import SparkStart, sink_spark
from spark_sink.load.staging_tables import StagingTables
from spark_sink.plan import TablePlan
from spark_sink.routing import Router


class Target:
    """The downstream of one pipeline: checkpoint, batches, DDL. ``spark`` gives the Spark
    session when a load needs it (by default one built on first use)."""

    def __init__(
        self,
        settings: Settings,
        spark: Callable[[], Any] | None = None,
        router: Router | None = None,
    ) -> None:
        self.settings = settings
        self.router = router or Router()
        self.checkpoints = CheckpointTable(settings.downstream.meta_db, settings.group)
        self.positions = SplitPositionTable(settings.downstream.meta_db, settings.group)
        self.downstream = SinkConnection(settings, self._prepare)
        self.tables = StagingTables(settings, self.router)
        spark = spark or SparkStart(sink_spark(settings))
        self.batches = BatchApplier(settings, self.downstream, self.checkpoints, self.tables, spark)
        # The appliers that apply a round's batches beside each other, each over a connection
        # and staging tables of its own (``TICDC_SINK_APPLY_CONNECTIONS``); the first is the
        # sink's own, which alone applies DDL, parts and chunks, with no batch in flight.
        self.lanes = [self.batches] + [
            BatchApplier(
                settings,
                SinkConnection(settings, self._prepare),
                self.checkpoints,
                StagingTables(settings, self.router, lane),
                spark,
            )
            for lane in range(1, settings.sink.apply_connections)
        ]
        self.chunks = ChunkApplier(self.batches, self.positions)
        self.ddl = DDLApplier(settings, self.downstream, self.checkpoints, self.router)

    @property
    def dialect(self) -> Dialect:
        """The server's dialect (read on connecting)."""
        return self.downstream.dialect

    def connection(self) -> Any:
        """The open connection, made (and the server's dialect read) when there is none."""
        return self.downstream.open()

    def drop_connection(self) -> None:
        for lane in self.lanes:
            lane.connection.drop()

    def is_transient(self, error: BaseException) -> bool:
        """Whether the server (as its dialect says) may accept what failed with ``error`` later."""
        return self.dialect.is_transient(error)

    def checkpoint(self) -> Checkpoint:
        """How far the downstream is (all zero before the first checkpoint); the parts of a
        transaction applied so far without their last are rolled back first."""
        self.batches.abandon()
        return read_checkpoint(self.downstream, self.checkpoints)

    def abandon(self) -> None:
        """Roll back the parts of a transaction applied without their last part."""
        self.batches.abandon()

    def apply_batch(
        self,
        plans: Sequence[TablePlan],
        resolved_ts: int,
        epoch: int,
        offsets: dict[str, int],
        lane: int = 0,
        turn: Turn | None = None,
    ) -> int:
        """Apply a batch on the connection of ``lane`` and advance the checkpoint to
        ``resolved_ts`` once its ``turn`` comes (:mod:`spark_sink.in_order`); returns rows
        merged."""
        return self.lanes[lane].apply(plans, resolved_ts, epoch, offsets, turn)

    def apply_part(
        self,
        plans: Sequence[TablePlan],
        resolved_ts: int,
        epoch: int,
        offsets: dict[str, int],
        joins: bool,
        continued: bool,
    ) -> int:
        """Apply a part of a transaction larger than a chunk in the downstream transaction the
        first part opened; the last part advances the checkpoint and commits."""
        return self.batches.apply_part(plans, resolved_ts, epoch, offsets, joins, continued)

    def split_position(self) -> SplitPosition | None:
        """Where a transaction committed in chunks is, while one is under way."""
        return self.chunks.position()

    def apply_chunk(self, plans: Sequence[TablePlan], position: SplitPosition, epoch: int) -> int:
        """Apply a chunk of a split transaction with its ``position``; returns rows merged."""
        return self.chunks.apply_chunk(plans, position, epoch)

    def finish_split(self, commit_ts: int, epoch: int, offsets: dict[str, int]) -> None:
        """Advance the checkpoint past the split transaction at ``commit_ts``."""
        self.chunks.finish(commit_ts, epoch, offsets)

    def too_large(self, resolved_ts: int, error: BaseException) -> Exception:
        """The error that says which downstream limit to raise for the transaction."""
        limit = self.dialect.transaction_limit()
        return TransactionTooLargeError.of(resolved_ts, error, limit)

    def apply_ddl(
        self, ddl: DDLEvent, checkpoint: Checkpoint, epoch: int, offsets: dict[str, int]
    ) -> None:
        """Run ``ddl`` once in its routed database and record it in the checkpoint with
        ``offsets``; what the checkpoint says was applied or skipped does not run."""
        action = self.ddl.apply(ddl, checkpoint, epoch, offsets)
        if action is None:
            return
        # Only the tables the statement names may have changed, unless a foreign key may have
        # been made or dropped: that changes what its parent may do, whichever table it names.
        # A DDL that could not be routed and was skipped has no statement: every table is read
        # again. With no table known yet (a changefeed's first DDLs, thousands of CREATE
        # TABLEs), there is nothing to spare: the statement is not parsed for its names.
        query = action.query
        keys = query is None or may_change_foreign_keys(query)
        named = None
        if query is not None and not keys and self.tables.knows_tables():
            named = named_tables(query, action.home)
        for lane in self.lanes:
            lane.tables.forget_layouts(foreign_keys=keys, tables=named)

    def _prepare(self, cursor: Any, dialect: Dialect) -> None:
        """On connecting: the checkpoint table, written in the server's dialect."""
        self.checkpoints.dialect = dialect
        self.checkpoints.create(cursor)
        self.positions.dialect = dialect
        self.positions.create(cursor)
