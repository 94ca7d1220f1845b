"""A batch applied atomically with the checkpoint.

Each table's rows go into a staging table in the meta database (typed like the target, every
column NULL-able, plus a delete flag), loaded the way :func:`~spark_sink.load.loaders.load_path`
picks; then ONE transaction deletes, upserts every table from its staging table and advances the
checkpoint, so the downstream moves from one upstream TSO to the next atomically. A table whose
upserts may load in place (:func:`~spark_sink.load.loaders.in_place`) skips its staging table for
them: they load straight into it, in that same transaction. A batch that fails on something the
downstream refuses is tried row by row to name the refused rows (:mod:`spark_sink.refused`).

An upstream transaction larger than a chunk comes in parts (:mod:`spark_sink.batches`), applied by
:meth:`BatchApplier.apply_part` into ONE downstream transaction the first part opens: each part
runs its deletes at once and loads its images into the staging tables over the driver (never in
place, never through Spark, whose loads commit on their own connections); after the last part's
deletes every staged image is upserted and the checkpoint commits. So within the transaction
every removal still comes before every new image, as :func:`~spark_sink.plan.plan_batch` orders
them within one commit ts, and the sink holds one part, never the transaction. A failure rolls
every part back; the loop then reads the transaction again from the checkpoint.

A chunk of a transaction split with ``TICDC_SINK_SPLIT_LARGE_TXN`` is applied as a batch too,
its position recorded instead of the checkpoint (:mod:`spark_sink.apply_chunk`,
:meth:`BatchApplier.apply_recorded`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from config.errors import (
    ApplyError,
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
from spark_sink.load.loaders import (
    InsertLoader,
    LoadDataLoader,
    Loader,
    LoadPath,
    SparkLoader,
    load_in_place,
    load_path,
)
from spark_sink.load.merge import merge_deletes, merge_staged, staged_columns, upsert_from_staging
from spark_sink.load.staged import DELETE_FLAG, StagedTable
from spark_sink.load.staging_tables import StagingTables
from spark_sink.open_parts import OpenParts, PartStage
from spark_sink.plan import TablePlan
from spark_sink.refused import RefusedRow, refused_error, refused_rows


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
        self, plans: Sequence[TablePlan], resolved_ts: int, epoch: int, offsets: dict[str, int]
    ) -> int:
        """Apply a batch and advance the checkpoint to ``resolved_ts``; returns rows merged."""

        def record(cursor: Any) -> None:
            self.checkpoints.advance(cursor, resolved_ts, epoch, offsets)

        return self.apply_recorded(
            plans,
            record,
            lambda: self.committed_upto(resolved_ts),
            f"batch up to {resolved_ts}",
            resolved_ts,
        )

    def apply_recorded(
        self,
        plans: Sequence[TablePlan],
        record: Callable[[Any], None],
        committed: Callable[[], bool],
        what: str,
        resolved_ts: int,
    ) -> int:
        """Apply ``plans`` with ``record`` (the checkpoint's, or a chunk's position) in one
        transaction, retried over outages; ``committed`` says whether a commit in doubt was."""
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
                return self._apply_once(plans, record)
            except Exception:
                self.connection.drop()
                raise

        dialect = self.connection.dialect
        try:
            return with_retries(attempt, what, dialect)
        except Exception as error:
            # A Spark that did not start, say: no row of the batch is to blame.
            if isinstance(error, LostLeadershipError | TransientApplyError | ConfigError):
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
            refused = self.refused_rows(plans)
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
                raise self.too_large(resolved_ts, error) from error
            if dialect.is_transient(error):
                raise
            refused = self.refused_rows(plans)
            if not refused:
                raise
            raise refused_error(refused) from error

    def too_large(self, resolved_ts: int, error: BaseException) -> TransactionTooLargeError:
        """The one line that says the transaction at ``resolved_ts`` outgrew the downstream."""
        return TransactionTooLargeError(
            f"the upstream transaction at ts {resolved_ts} is larger than the downstream takes "
            f"in one transaction ({error}): raise {self.connection.dialect.transaction_limit()}; "
            "nothing of it was applied, the sink tries again"
        )

    def refused_rows(self, plans: Sequence[TablePlan]) -> list[RefusedRow]:
        """Every row of ``plans`` the downstream refuses, tried one by one (nothing stays)."""
        conn = self.connection.open()
        dialect = self.connection.dialect
        with conn.cursor() as cursor:
            staged = []
            for plan in plans:
                try:
                    item = self.tables.staged(cursor, dialect, plan)
                except ApplyError:
                    continue  # a missing table fails the batch for another reason
                if item is not None:
                    staged.append(item)
            refused = refused_rows(cursor, dialect, staged)
        # The tries wrote into the staging tables (rolled back, but known empty no more).
        self.tables.known_empty(conn).clear()
        return refused

    def loader(self, path: LoadPath) -> Loader:
        """The loader that loads by ``path``."""
        dialect = self.connection.dialect
        if path is LoadPath.SPARK:
            downstream = self.settings.downstream
            return SparkLoader(self.spark, downstream.url, downstream.meta_db, dialect)
        if path is LoadPath.LOAD_DATA:
            return LoadDataLoader(dialect)
        return InsertLoader()

    def committed_upto(self, resolved_ts: int) -> bool:
        """Whether the downstream checkpoint has reached ``resolved_ts``."""
        return read_checkpoint(self.connection, self.checkpoints).resolved_ts >= resolved_ts

    def _apply_once(self, plans: Sequence[TablePlan], record: Callable[[Any], None]) -> int:
        conn = self.connection.open()
        dialect = self.connection.dialect
        empty = self.tables.known_empty(conn)
        cursor = conn.cursor()
        staged = [
            s for plan in plans if (s := self.tables.staged(cursor, dialect, plan)) is not None
        ]
        paths = [self._load_path(cursor, item) for item in staged]
        for item in staged:
            if item.stage not in empty:
                # What a failed batch or a crash left behind (DELETE: no DDL, nothing to commit).
                cursor.execute(dialect.clear_staging(item.stage))
        # Commit the clean-up: Spark's own connections load next and must not wait on its locks.
        conn.commit()
        cleanups = []
        for item, path in zip(staged, paths, strict=True):
            # Loaded in place, a table stages only the images it deletes (key-less tables).
            part = item.only_deletes() if path is LoadPath.IN_PLACE else item
            if not part.images:
                continue
            empty.discard(item.stage)
            self.loader(LoadPath.LOAD_DATA if path is LoadPath.IN_PLACE else path).load(
                cursor, part
            )
            committed = path is LoadPath.SPARK
            cleanups.append(dialect.empty_staging(item.stage, len(part.images), committed))
        merged = sum(
            merge_staged(cursor, dialect, item, path is LoadPath.IN_PLACE)
            for item, path in zip(staged, paths, strict=True)
        )
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
        empty.update(item.stage for item in staged)
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
        # A staging table a later part needs first is made outside the transaction: a DDL would
        # commit the parts before, and TiDB's transaction cannot see a table made after it began.
        deferred: list[str] = []
        staged = [
            s
            for plan in plans
            if (s := self.tables.staged(cursor, dialect, plan, deferred.append if joins else None))
            is not None
        ]
        if deferred:
            self._restart_with(deferred, resolved_ts)
        for item in staged:
            stage = parts.stages.get(item.stage)
            if stage is None:
                if item.stage not in empty:
                    # What a failed batch or a crash left behind, in this transaction.
                    cursor.execute(dialect.clear_staging(item.stage))
                empty.discard(item.stage)
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
            place = (
                resolved_ts != self._staged_ts
                and self._load_path(cursor, item) is LoadPath.IN_PLACE
            )
            part = item.only_deletes() if place else item
            if part.images:
                self._driver_loader().load(cursor, part)
                stage.rows += len(part.images)
                stage.images += len(part.images) - part.deletes
            parts.merged += merge_deletes(cursor, dialect, item)
            if place and item.plan.upserts:
                # After this part's deletes, as a whole batch loads in place after its own.
                parts.merged += load_in_place(cursor, dialect, item)
                stage.in_place = True
            if item.deletes and continued:
                # This part's delete images are done; the next part numbers its own from 1.
                cursor.execute(dialect.clear_staged_deletes(item.stage, DELETE_FLAG))
        if continued:
            return 0
        for stage_name, stage in parts.stages.items():
            if stage.images:
                parts.merged += upsert_from_staging(
                    cursor, dialect, stage.target, stage_name, stage.columns
                )
        cleanups = [
            dialect.empty_staging(name, stage.rows, committed=False)
            for name, stage in parts.stages.items()
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
        empty.update(parts.stages)
        return parts.merged

    def _restart_with(self, creates: list[str], resolved_ts: int) -> None:
        """Roll the parts back, make the staging tables of ``creates`` and have the transaction
        applied again (its parts then find every one of them made)."""
        self.abandon()
        try:
            with connect(self.settings, autocommit=True) as conn, conn.cursor() as cursor:
                for statement in creates:
                    cursor.execute(statement)
        except Exception:
            self.tables.forget_created()
            raise
        raise PartsRestartError(
            f"the transaction at ts {resolved_ts} has a table new to this sink in a part after "
            "its first; it is applied again, the table's staging table made first"
        )

    def _driver_loader(self) -> Loader:
        """A part's loader: over the sink's connection, inside its transaction."""
        if self.connection.local_infile:
            return self.loader(LoadPath.LOAD_DATA)
        return InsertLoader()

    def _load_path(self, cursor: Any, item: StagedTable) -> LoadPath:
        """How ``item``'s rows are loaded, as :func:`load_path` decides."""
        allowed = self.connection.local_infile
        direct = (
            allowed
            and self.settings.sink.load_in_place
            and self.connection.dialect.loads_in_place()
            and self.tables.in_place(cursor, item)
        )
        return load_path(len(item.images), self.settings.spark.min_rows, allowed, direct)
