"""A batch applied atomically with the checkpoint.

Each table's rows go into a staging table in the meta database (typed like the target, every
column NULL-able, plus a delete flag), loaded the way :func:`~spark_sink.load.loaders.load_path`
picks; then ONE transaction deletes, upserts every table from its staging table and advances the
checkpoint, so the downstream moves from one upstream TSO to the next atomically. A table whose
upserts may load in place (:func:`~spark_sink.load.loaders.in_place`) skips its staging table for
them: they load straight into it, in that same transaction. A batch that fails on something the
downstream refuses is tried row by row to name the refused rows (:mod:`spark_sink.refused`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from config.errors import (
    ApplyError,
    BatchTooLargeError,
    ConfigError,
    LostLeadershipError,
    TransientApplyError,
)
from config.settings import Settings
from spark_sink.db.checkpoint import CheckpointTable, read_checkpoint
from spark_sink.db.connection import SinkConnection
from spark_sink.db.retries import with_retries
from spark_sink.load.loaders import (
    InsertLoader,
    LoadDataLoader,
    Loader,
    LoadPath,
    SparkLoader,
    load_path,
)
from spark_sink.load.merge import merge_staged
from spark_sink.load.staged import StagedTable
from spark_sink.load.staging_tables import StagingTables
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

    def apply(
        self, plans: Sequence[TablePlan], resolved_ts: int, epoch: int, offsets: dict[str, int]
    ) -> int:
        """Apply a batch and advance the checkpoint to ``resolved_ts``; returns rows merged."""
        retried = False

        def attempt() -> int:
            nonlocal retried
            try:
                # A connection lost while committing leaves the commit in doubt (a server
                # killed after writing it): re-running a committed batch would add a key-less
                # table's rows twice, so a retry first asks the checkpoint.
                if retried and self._committed_upto(resolved_ts):
                    return 0
                retried = True
                return self._apply_once(plans, resolved_ts, epoch, offsets)
            except Exception:
                self.connection.drop()
                raise

        dialect = self.connection.dialect
        try:
            return with_retries(attempt, f"batch up to {resolved_ts}", dialect)
        except Exception as error:
            # A Spark that did not start, say: no row of the batch is to blame.
            if isinstance(error, LostLeadershipError | TransientApplyError | ConfigError):
                raise
            dialect = self.connection.dialect
            if dialect.is_transient(error):
                raise
            if dialect.transaction_too_large(error):
                raise BatchTooLargeError(
                    f"the batch up to {resolved_ts} outgrew the downstream's transaction "
                    f"size limit: {error}"
                ) from error
            # Perhaps a value the downstream refuses: find the rows, or it was something else.
            refused = self.refused_rows(plans)
            if not refused:
                raise
            raise refused_error(refused) from error

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

    def _committed_upto(self, resolved_ts: int) -> bool:
        """Whether the downstream checkpoint has reached ``resolved_ts``."""
        return read_checkpoint(self.connection, self.checkpoints).resolved_ts >= resolved_ts

    def _apply_once(
        self, plans: Sequence[TablePlan], resolved_ts: int, epoch: int, offsets: dict[str, int]
    ) -> int:
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
        self.checkpoints.advance(cursor, resolved_ts, epoch, offsets)
        conn.commit()
        after = [cleanup.statement for cleanup in cleanups if not cleanup.in_batch]
        for statement in after:
            cursor.execute(statement)
        if after:
            conn.commit()
        empty.update(item.stage for item in staged)
        return merged

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
