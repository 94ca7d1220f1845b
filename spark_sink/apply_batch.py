"""A batch applied atomically with the checkpoint.

Each table's rows go into a staging table in the meta database (typed like the target, every
column NULL-able, plus a delete flag; made when rows first load into it), loaded the way
:func:`~spark_sink.load.loaders.load_path` picks; then ONE transaction deletes, upserts every
table from its staging table and advances the checkpoint, so the downstream moves from one
upstream TSO to the next atomically. A table whose upserts may load in place
(:func:`~spark_sink.load.loaders.in_place`) skips its staging table for them: they load straight
into it, in that same transaction. A batch that fails on something the downstream refuses is
tried row by row to name the refused rows (:mod:`spark_sink.refused`).

An upstream transaction larger than a chunk comes in parts (:mod:`spark_sink.batches`), applied by
:meth:`BatchApplier.apply_part` into ONE downstream transaction the first part opens: each part
runs its deletes at once and loads its images over the driver (never through Spark, whose loads
commit on their own connections), in place or into the staging tables; after the last part's
deletes every staged image is upserted and the checkpoint commits. So every removal still comes
before every new image, as :func:`~spark_sink.plan.plan_batch` orders them within one commit ts,
and the sink holds one part, never the transaction. A failure rolls every part back; the loop
then reads the transaction again from the checkpoint.

A chunk of a transaction split with ``TICDC_SINK_SPLIT_LARGE_TXN`` is applied as a batch too,
its position recorded instead of the checkpoint (:mod:`spark_sink.apply_chunk`,
:meth:`BatchApplier.apply_recorded`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from config.errors import (
    ApplyError,
    BatchAbandonedError,
    BatchTooLargeError,
    ConfigError,
    LostLeadershipError,
    PartsRestartError,
    TransactionTooLargeError,
    TransientApplyError,
)
from config.settings import Settings
from spark_sink.db.checkpoint import CheckpointTable, read_checkpoint
from spark_sink.db.connection import SinkConnection, connect
from spark_sink.db.retries import with_retries
from spark_sink.in_order import Turn
from spark_sink.load.loaders import (
    Loader,
    LoadPath,
    load_path,
    loader,
    run_statements,
)
from spark_sink.load.merge import (
    merge_deletes,
    merge_tables,
    staged_columns,
    upsert_from_staging,
    upsert_in_place,
)
from spark_sink.load.staged import DELETE_FLAG, StagedTable
from spark_sink.load.staging_tables import StagingTables
from spark_sink.open_parts import OpenParts, PartStage
from spark_sink.plan import TablePlan
from spark_sink.refused import refused_error, refused_in

# Failures no row of a batch is to blame for (a Spark that did not start, say): raised as they are.
_NO_ROW_TO_BLAME = (LostLeadershipError, TransientApplyError, ConfigError, BatchAbandonedError)


class BatchApplier:
    """Applies batches over the sink's connection; ``spark`` gives the Spark session, asked for
    only by a table that loads through Spark."""

    def __init__(
        self,
        settings: Settings,
        connection: SinkConnection,
        checkpoints: CheckpointTable,
        tables: StagingTables,
        spark: Callable[[], Any],
    ) -> None:
        self.settings = settings
        self.connection = connection
        self.checkpoints = checkpoints
        self.tables = tables
        self.spark = spark
        # The open transaction of a transaction's parts, between the first part and its last.
        self._parts: OpenParts | None = None
        # The commit ts of the last transaction whose parts must stage every image (loaded in
        # place, a part's images met a later part's removals: see _apply_part).
        self._staged_ts = 0

    def apply(
        self,
        plans: Sequence[TablePlan],
        resolved_ts: int,
        epoch: int,
        offsets: dict[str, int],
        turn: Turn | None = None,
    ) -> int:
        """Apply a batch and advance the checkpoint to ``resolved_ts``; returns rows merged.
        With a ``turn`` (batches applied beside others, :mod:`spark_sink.in_order`), the
        checkpoint is recorded and committed once the turn comes, and a failed attempt says
        so before it is retried."""

        def record(cursor: Any) -> None:
            if turn is not None:
                turn.wait()
            self.checkpoints.advance(cursor, resolved_ts, epoch, offsets)

        return self.apply_recorded(
            plans,
            record,
            lambda: self.committed_upto(resolved_ts),
            f"batch up to {resolved_ts}",
            resolved_ts,
            turn,
        )

    def apply_recorded(
        self,
        plans: Sequence[TablePlan],
        record: Callable[[Any], None],
        committed: Callable[[], bool],
        what: str,
        resolved_ts: int,
        turn: Turn | None = None,
    ) -> int:
        """Apply ``plans`` with ``record`` (the checkpoint's, or a chunk's position) in one
        transaction, retried over outages; ``committed`` says whether a commit in doubt was;
        a ``turn`` is told of each failed attempt, before its retry, and says when the batch
        may write where the server locks gaps."""
        self.abandon()
        retried = False

        def attempt() -> int:
            nonlocal retried
            try:
                # A connection lost while committing leaves the commit in doubt (a server
                # killed after writing it): re-running a committed batch would add a key-less
                # table's rows twice, so a retry first asks the checkpoint.
                if retried and committed():
                    return 0
                retried = True
                return self._apply_once(plans, record, turn)
            except Exception as error:
                self.connection.drop()
                if turn is not None and not isinstance(error, BatchAbandonedError):
                    turn.failed()
                raise

        dialect = self.connection.dialect
        try:
            return with_retries(attempt, what, dialect)
        except Exception as error:
            if isinstance(error, _NO_ROW_TO_BLAME):
                raise
            dialect = self.connection.dialect
            if dialect.is_transient(error):
                raise
            if dialect.transaction_too_large(error):
                raise BatchTooLargeError(
                    f"the {what} outgrew the downstream's transaction size limit: {error}",
                    resolved_ts,
                ) from error
            # Perhaps a value the downstream refuses: find the rows, or it was something else.
            refused = refused_in(self.connection, self.tables, plans)
            if not refused:
                raise
            raise refused_error(refused) from error

    def abandon(self) -> None:
        """Roll back the parts of a transaction applied so far (the loop reads it again)."""
        if self._parts is not None:
            self._parts = None
            self.connection.drop()

    def apply_part(
        self,
        plans: Sequence[TablePlan],
        resolved_ts: int,
        epoch: int,
        offsets: dict[str, int],
        joins: bool,
        continued: bool,
    ) -> int:
        """Apply a part of a transaction larger than a chunk (see the module notes): the first
        part (not ``joins``) opens the downstream transaction, the last (not ``continued``)
        upserts every part's images, advances the checkpoint to ``resolved_ts`` and commits;
        returns the rows changed by the last part's commit (0 before). Never retried here:
        the earlier parts are gone from memory, so every failure rolls back the whole
        transaction and is raised for the loop to read it again from the checkpoint."""
        try:
            return self._apply_part(plans, resolved_ts, epoch, offsets, joins, continued)
        except Exception as error:
            self._parts = None
            self.connection.drop()
            if isinstance(error, ApplyError):
                raise
            dialect = self.connection.dialect
            if dialect.transaction_too_large(error):
                limit = dialect.transaction_limit()
                raise TransactionTooLargeError.of(resolved_ts, error, limit) from error
            if dialect.is_transient(error):
                raise
            refused = refused_in(self.connection, self.tables, plans)
            if not refused:
                raise
            raise refused_error(refused) from error

    def committed_upto(self, resolved_ts: int) -> bool:
        """Whether the downstream checkpoint has reached ``resolved_ts``."""
        return read_checkpoint(self.connection, self.checkpoints).resolved_ts >= resolved_ts

    def _apply_once(
        self, plans: Sequence[TablePlan], record: Callable[[Any], None], turn: Turn | None
    ) -> int:
        conn = self.connection.open()
        dialect = self.connection.dialect
        empty = self.tables.known_empty(conn)
        cursor = conn.cursor()
        staged = self._staged(cursor, plans)
        paths = [self._load_path(cursor, item) for item in staged]
        # Loaded in place, a table stages only the images it deletes (key-less tables).
        loads = [
            item.only_deletes() if path is LoadPath.IN_PLACE else item
            for item, path in zip(staged, paths, strict=True)
        ]
        for load in (load for load in loads if load.images):
            self.tables.make(load, cursor.execute)
            if load.stage not in empty:
                # What a failed batch or a crash left behind (DELETE: no DDL, nothing to commit).
                cursor.execute(dialect.clear_staging(load.stage))
        # Commit the clean-up: Spark's own connections load next and must not wait on its locks.
        conn.commit()
        cleanups = []
        for load, path in zip(loads, paths, strict=True):
            if not load.images:
                continue
            empty.discard(load.stage)
            self.loader(LoadPath.LOAD_DATA if path is LoadPath.IN_PLACE else path).load(
                cursor, load
            )
            committed = path is LoadPath.SPARK
            cleanups.append(dialect.empty_staging(load.stage, len(load.images), committed))
        if turn is not None and dialect.locks_gaps():
            turn.wait_to_write()
        merged = merge_tables(cursor, dialect, staged, [p is LoadPath.IN_PLACE for p in paths])
        if turn is not None:
            turn.written()
        for cleanup in cleanups:
            if cleanup.in_batch:
                cursor.execute(cleanup.statement)
        record(cursor)
        conn.commit()
        after = [cleanup.statement for cleanup in cleanups if not cleanup.in_batch]
        for statement in after:
            cursor.execute(statement)
        if after:
            conn.commit()
        empty.update(load.stage for load in loads if load.images)
        return merged

    def _apply_part(
        self,
        plans: Sequence[TablePlan],
        resolved_ts: int,
        epoch: int,
        offsets: dict[str, int],
        joins: bool,
        continued: bool,
    ) -> int:
        conn = self.connection.open()
        dialect = self.connection.dialect
        parts = self._parts
        if not joins:
            if parts is not None:
                self.abandon()
                conn = self.connection.open()
            parts = self._parts = OpenParts(conn, resolved_ts)
        elif parts is None or parts.connection is not conn or parts.resolved_ts != resolved_ts:
            # The transaction of the parts before is gone (a lost connection, a new round).
            raise TransientApplyError(
                f"the downstream transaction of the parts up to {resolved_ts} was lost; the "
                "transaction is read again from the checkpoint"
            )
        empty = self.tables.known_empty(conn)
        cursor = conn.cursor()
        staged = self._staged(cursor, plans)
        # Once a part's images met a later part's removals, every image is staged (below).
        every = resolved_ts == self._staged_ts
        placed = [not every and self._load_path(cursor, i) is LoadPath.IN_PLACE for i in staged]
        loads = [i.only_deletes() if p else i for i, p in zip(staged, placed, strict=True)]
        needed = [load for load in loads if load.images and not self.tables.made(load)]
        if needed and joins:
            # Made outside the transaction: a DDL would commit the parts before, and TiDB's
            # transaction cannot see a table made after it began.
            self._restart_with(needed, resolved_ts)
        for load in needed:
            self.tables.make(load, cursor.execute)
        statements: list[str] = []
        for item, place, load in zip(staged, placed, loads, strict=True):
            stage = parts.stages.get(item.stage)
            if stage is None:
                stage = parts.stages[item.stage] = PartStage(item.target, [])
            if item.plan.deletes and stage.in_place:
                # Images an earlier part loaded in place may be what this part's removals
                # would delete: the transaction goes again, staging every image.
                self._staged_ts = resolved_ts
                raise PartsRestartError(
                    f"the transaction at ts {resolved_ts} removes rows after a part loaded "
                    "rows in place; it is applied again, every image through a staging table"
                )
            stage.columns.extend(c for c in staged_columns(item) if c not in stage.columns)
            if load.images:
                if not stage.rows and item.stage not in empty:
                    # What a failed batch or a crash left behind, in this transaction.
                    cursor.execute(dialect.clear_staging(item.stage))
                empty.discard(item.stage)
                # Over the sink's connection, inside its transaction: never through Spark.
                self.loader(
                    LoadPath.LOAD_DATA if self.connection.local_infile else LoadPath.INSERT
                ).load(cursor, load)
                stage.rows += len(load.images)
                stage.images += len(load.images) - load.deletes
            parts.merged += merge_deletes(cursor, dialect, item)
            if place and item.plan.upserts:
                # After this part's deletes, as a whole batch loads in place after its own.
                parts.merged += upsert_in_place(cursor, dialect, item, statements)
                stage.in_place = True
            if item.deletes and continued:
                # This part's delete images are done; the next part numbers its own from 1.
                cursor.execute(dialect.clear_staged_deletes(item.stage, DELETE_FLAG))
        run_statements(cursor, dialect, statements)
        if continued:
            return 0
        used = {name: stage for name, stage in parts.stages.items() if stage.rows}
        for stage_name, stage in used.items():
            if stage.images:
                parts.merged += upsert_from_staging(
                    cursor, dialect, stage.target, stage_name, stage.columns
                )
        cleanups = [
            dialect.empty_staging(name, stage.rows, committed=False) for name, stage in used.items()
        ]
        for cleanup in cleanups:
            if cleanup.in_batch:
                cursor.execute(cleanup.statement)
        self.checkpoints.advance(cursor, resolved_ts, epoch, offsets)
        conn.commit()
        self._parts = None
        after = [cleanup.statement for cleanup in cleanups if not cleanup.in_batch]
        for statement in after:
            cursor.execute(statement)
        if after:
            conn.commit()
        empty.update(used)
        return parts.merged

    def _restart_with(self, needed: list[StagedTable], resolved_ts: int) -> None:
        """Roll the parts back, make the staging tables of ``needed`` and have the transaction
        applied again (its parts then find every one of them made)."""
        self.abandon()
        try:
            with connect(self.settings, autocommit=True) as conn, conn.cursor() as cursor:
                for item in needed:
                    self.tables.make(item, cursor.execute)
        except Exception:
            self.tables.forget_created()
            raise
        raise PartsRestartError(
            f"the transaction at ts {resolved_ts} has a table new to this sink in a part after "
            "its first; it is applied again, the table's staging table made first"
        )

    def loader(self, path: LoadPath) -> Loader:
        """The loader that loads by ``path``."""
        downstream = self.settings.downstream
        return loader(path, self.connection.dialect, self.spark, downstream.url, downstream.meta_db)

    def _staged(self, cursor: Any, plans: Sequence[TablePlan]) -> list[StagedTable]:
        """The batch's tables as they stage (their layouts and facts read, new ones at once)."""
        dialect = self.connection.dialect
        return self.tables.staged_batch(cursor, dialect, plans, self._may_load_in_place())

    def _may_load_in_place(self) -> bool:
        """Whether the sink and the downstream let any table's rows load in place."""
        return (
            self.connection.local_infile
            and self.settings.sink.load_in_place
            and self.connection.dialect.loads_in_place()
        )

    def _load_path(self, cursor: Any, item: StagedTable) -> LoadPath:
        """How ``item``'s rows are loaded, as :func:`load_path` decides."""
        direct = self._may_load_in_place() and self.tables.in_place(cursor, item)
        allowed = self.connection.local_infile
        return load_path(len(item.images), self.settings.spark.min_rows, allowed, direct)
