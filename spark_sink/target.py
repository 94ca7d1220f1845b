"""The downstream of one pipeline as the sink's loop sees it: its checkpoint, a batch applied
atomically with the checkpoint, a DDL run once and recorded.

A batch: each table's rows go into a staging table in the meta database (typed like the target,
every column NULL-able, plus a delete flag), loaded the way
:func:`~spark_sink.load.loaders.load_path` picks; then ONE transaction deletes, upserts every table
from its staging table and advances the checkpoint, so the downstream moves from one upstream TSO
to the next atomically. A table whose upserts may load in place
(:func:`~spark_sink.load.loaders.in_place`) skips its staging table for them: they load straight
into it, in that same transaction. The server's dialect, read once per
connection, writes every statement and classifies every error.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import pymysql

from config.errors import (
    ApplyError,
    BatchTooLargeError,
    DDLError,
    LostLeadershipError,
    TransientApplyError,
)
from config.settings import OnDDLError, Settings
from core.model import DDLEvent
from core.sql import quote
from spark_sink.db.dialect import ANY_SERVER, Dialect, server_dialect
from spark_sink.db.downstream import (
    Checkpoint,
    CheckpointTable,
    Column,
    TableFacts,
    connect,
    execute_ddl,
    table_columns,
    table_facts,
    table_name,
    with_retries,
)
from spark_sink.ddl.action import DDLStep, ddl_action
from spark_sink.drift import missing_columns, missing_table
from spark_sink.load.loaders import (
    InsertLoader,
    LoadDataLoader,
    Loader,
    LoadPath,
    SparkLoader,
    in_place,
    load_path,
)
from spark_sink.load.merge import merge_staged
from spark_sink.load.staged import DELETE_FLAG, StagedTable
from spark_sink.metrics import DDL_SKIPPED
from spark_sink.plan import TablePlan
from spark_sink.refused import RefusedRow, find_refused, refused_error
from spark_sink.routing import Router

log = logging.getLogger("ticdc_sink.sink")

# Before the first checkpoint is recorded.
NO_CHECKPOINT = Checkpoint(0, 0, 0, {})
# Part of a staging table's name: a new layout of staging tables gets new tables.
STAGING_LAYOUT = "2"
# Columns of a key-less table's staging index (a selective prefix of its columns).
PROBE_PARTS = 8


class Target:
    """The downstream of one pipeline: checkpoint, batches, DDL."""

    def __init__(
        self,
        settings: Settings,
        spark_factory: Callable[[], Any] | None = None,
        router: Router | None = None,
    ) -> None:
        self.settings = settings
        self.router = router or Router()
        self._checkpoints = CheckpointTable(settings.downstream.meta_db, settings.group)
        self._spark_factory = spark_factory
        self._spark: Any = None
        self._conn: Any = None
        # The server's dialect, read on connecting (ANY_SERVER until then).
        self.dialect: Dialect = ANY_SERVER
        # Whether LOAD DATA LOCAL may be used: the sink's choice (tests pick a path with it)
        # and, read on connecting, the server's local_infile.
        self.load_data_local = True
        self._server_local_infile = True
        self._layouts: dict[tuple[str, str], list[Column]] = {}
        # Every downstream column's name, generated ones too (they are no drift).
        self._names: dict[tuple[str, str], frozenset[str]] = {}
        # What decides whether a table's rows may replace in place (keys, foreign keys, triggers).
        self._facts: dict[tuple[str, str], TableFacts] = {}
        # Staging tables created by this process (CREATE is a DDL: TiDB runs it as a job).
        self._created: set[str] = set()
        # Staging tables known empty on this connection (emptied after their last batch).
        self._empty: set[str] = set()
        # Test hook: called between the staging load and the merge transaction's commit.
        self.before_commit: Callable[[], None] | None = None

    # --- connections ---------------------------------------------------------------------------

    def connection(self) -> Any:
        """The open connection, made (and the server's dialect read) when there is none."""
        if self._conn is None or not self._conn.open:
            self._empty.clear()
            self._conn = connect(self.settings, local_infile=True)
            with self._conn.cursor() as cursor:
                self.dialect = server_dialect(cursor)
                self._checkpoints.dialect = self.dialect
                self._server_local_infile = _local_infile_on(cursor, self.dialect)
                self._checkpoints.create(cursor)
                # Multi-table DELETE resolves its alias list in the current database.
                cursor.execute(self.dialect.use_database(self.settings.downstream.meta_db))
            self._conn.commit()
        return self._conn

    def drop_connection(self) -> None:
        if self._conn is not None:
            # The connection is already broken or mid-transaction: nothing to save.
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None
        self._empty.clear()

    def is_transient(self, error: BaseException) -> bool:
        """Whether the server (as its dialect says) may accept what failed with ``error`` later."""
        return self.dialect.is_transient(error)

    def spark(self) -> Any:
        """The Spark session, started on first use."""
        if self._spark is None:
            from spark_sink.load.spark_session import build_spark

            settings = self.settings
            # The group in the name tells pipelines apart on a shared cluster's pages.
            factory = self._spark_factory or (
                lambda: build_spark(
                    settings.spark.master,
                    f"ticdc-sink-{settings.group}",
                    settings.spark.jdbc_jar,
                    pipeline=settings.group,
                )
            )
            self._spark = factory()
        return self._spark

    # --- the checkpoint ------------------------------------------------------------------------

    def checkpoint(self) -> Checkpoint:
        """How far the downstream is (all zero before the first checkpoint)."""
        conn = self.connection()
        with conn.cursor() as cursor:
            found = self._checkpoints.read(cursor)
        conn.commit()
        return found or NO_CHECKPOINT

    def committed_upto(self, resolved_ts: int) -> bool:
        """Whether the downstream checkpoint has reached ``resolved_ts``."""
        return self.checkpoint().resolved_ts >= resolved_ts

    # --- batches -------------------------------------------------------------------------------

    def apply_batch(
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
                if retried and self.committed_upto(resolved_ts):
                    return 0
                retried = True
                return self._apply_once(plans, resolved_ts, epoch, offsets)
            except Exception:
                self.drop_connection()
                raise

        try:
            return with_retries(attempt, f"batch up to {resolved_ts}", self.dialect)
        except Exception as error:
            if isinstance(error, LostLeadershipError | TransientApplyError):
                raise
            if self.is_transient(error):
                raise
            if self.dialect.transaction_too_large(error):
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
        conn = self.connection()
        refused = []
        with conn.cursor() as cursor:
            for plan in plans:
                try:
                    item = self._prepare(cursor, plan)
                except ApplyError:
                    continue  # a missing table fails the batch for another reason
                if item is not None:
                    refused += find_refused(
                        cursor, plan, item.stage, item.columns, item.target, {DELETE_FLAG: 0}
                    )
        self._empty.clear()
        return refused

    def _apply_once(
        self, plans: Sequence[TablePlan], resolved_ts: int, epoch: int, offsets: dict[str, int]
    ) -> int:
        conn = self.connection()
        dialect = self.dialect
        cursor = conn.cursor()
        staged = [s for plan in plans if (s := self._prepare(cursor, plan)) is not None]
        paths = [self._load_path(cursor, item) for item in staged]
        for item in staged:
            if item.stage not in self._empty:
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
            self._empty.discard(item.stage)
            loader = self._loader(LoadPath.LOAD_DATA if path is LoadPath.IN_PLACE else path)
            loader.load(cursor, part)
            committed = path is LoadPath.SPARK
            cleanups.append(dialect.empty_staging(item.stage, len(part.images), committed))
        merged = sum(
            merge_staged(cursor, dialect, item, path is LoadPath.IN_PLACE)
            for item, path in zip(staged, paths, strict=True)
        )
        for cleanup in cleanups:
            if cleanup.in_batch:
                cursor.execute(cleanup.statement)
        self._checkpoints.advance(cursor, resolved_ts, epoch, offsets)
        if self.before_commit is not None:
            self.before_commit()
        conn.commit()
        after = [cleanup.statement for cleanup in cleanups if not cleanup.in_batch]
        for statement in after:
            cursor.execute(statement)
        if after:
            conn.commit()
        self._empty.update(item.stage for item in staged)
        return merged

    def _load_path(self, cursor: Any, item: StagedTable) -> LoadPath:
        """How ``item``'s rows are loaded, as :func:`load_path` decides."""
        allowed = self.load_data_local and self._server_local_infile
        direct = (
            allowed
            and self.settings.sink.load_in_place
            and self.dialect.loads_in_place()
            and self._in_place(cursor, item)
        )
        return load_path(len(item.images), self.settings.spark.min_rows, allowed, direct)

    def _in_place(self, cursor: Any, item: StagedTable) -> bool:
        """Whether ``item``'s upserts may load straight into its target (its facts are read
        once per table, again after a DDL)."""
        routed = self.router.route(item.plan.schema, item.plan.table)
        assert routed is not None  # a batch item is a routed table
        facts = self._facts.get(routed)
        if facts is None:
            facts = self._facts[routed] = table_facts(cursor, *routed)
        return in_place(item.plan, item.keyed, item.columns, facts)

    def _loader(self, path: LoadPath) -> Loader:
        """The loader that loads by ``path``."""
        if path is LoadPath.SPARK:
            return SparkLoader(
                self.spark,
                self.settings.downstream.url,
                self.settings.downstream.meta_db,
                self.dialect,
            )
        if path is LoadPath.LOAD_DATA:
            return LoadDataLoader(self.dialect)
        return InsertLoader()

    def _prepare(self, cursor: Any, plan: TablePlan) -> StagedTable | None:
        routed = self.router.route(plan.schema, plan.table)
        if routed is None:
            return None
        schema, table = routed
        columns = self._layouts.get(routed)
        if columns is None:
            every = table_columns(cursor, schema, table)
            if not every:
                missing_table(self.settings, plan, f"{schema}.{table}")
                return None
            self._names[routed] = frozenset(c.name for c in every)
            columns = self._layouts[routed] = [c for c in every if not c.generated]
        missing_columns(self.settings, plan, f"{schema}.{table}", self._names[routed])
        present = {c.name for c in columns}
        keyed = plan.has_key and all(k in present for k in plan.key_columns)
        indexed = None if plan.has_key else _probe_columns(plan, columns)
        stage_name = self._stage_table(cursor, schema, table, columns, indexed)
        staged_deletes = [] if keyed else list(plan.deletes.values())
        upserts = list(plan.upserts.values())
        if plan.keyless:
            copies = plan.copies
            upserts = [image for key, image in plan.upserts.items() for _ in range(copies[key])]
        return StagedTable(
            plan,
            table_name(schema, table),
            table_name(self.settings.downstream.meta_db, stage_name),
            stage_name,
            columns,
            keyed,
            [*staged_deletes, *upserts],
            len(staged_deletes),
        )

    def _stage_table(
        self,
        cursor: Any,
        schema: str,
        table: str,
        columns: list[Column],
        indexed: list[Column] | None = None,
    ) -> str:
        """The staging table's name, made the first time this process needs it."""
        layout = "\x00".join(f"{c.name}\x01{c.staging_type}" for c in columns)
        probe = ",".join(c.name for c in indexed) if indexed else ""
        identity = f"{schema}\x00{table}\x00{layout}\x00{probe}\x00{STAGING_LAYOUT}"
        digest = hashlib.sha1(identity.encode()).hexdigest()[:16]
        name = f"stage_{self.settings.group}_{digest}"[:64]
        if name not in self._created:
            cursor.execute(
                self.dialect.create_staging(
                    table_name(self.settings.downstream.meta_db, name),
                    [f"{quote(c.name)} {c.staging_type} NULL" for c in columns],
                    DELETE_FLAG,
                    [c.index_part() for c in indexed or []],
                )
            )
            self._created.add(name)
        return name

    # --- DDL -----------------------------------------------------------------------------------

    def apply_ddl(
        self, ddl: DDLEvent, checkpoint: Checkpoint, epoch: int, offsets: dict[str, int]
    ) -> None:
        """Run ``ddl`` once in its routed database and record it in the checkpoint with
        ``offsets``; what the checkpoint says was applied or skipped does not run."""
        self.connection()  # reads the server's dialect
        action = ddl_action(
            ddl,
            checkpoint.ddl_ts,
            checkpoint.skip_ddl_ts,
            self.router,
            self.dialect.runs_tidb_ddl(),
        )
        ddl = action.ddl
        step = action.step
        if step is DDLStep.APPLIED:
            log.info("DDL at %d already applied: %s", ddl.commit_ts, ddl.query)
            return
        if step is DDLStep.FILTERED:
            return
        if step is DDLStep.SKIP_ASKED:
            log.warning(
                "DDL at %d skipped, as `ticdc-sink skip-ddl` asked: %s", ddl.commit_ts, ddl.query
            )
            DDL_SKIPPED.labels(self.settings.group, "skip-ddl").inc()
            self._record_ddl(ddl, epoch, offsets)
            return
        if step is DDLStep.NOTHING_TO_RUN:
            log.info(
                "DDL at %d is TiDB's own, nothing to run downstream: %s", ddl.commit_ts, ddl.query
            )
            self._record_ddl(ddl, epoch, offsets)
            return
        try:
            if step is DDLStep.CANNOT_RUN:
                raise DDLError(action.error or "it cannot run downstream")
            query, home = action.query, action.home
            with_retries(
                lambda: self._record_ddl(ddl, epoch, offsets, query, home),
                f"DDL at {ddl.commit_ts}",
                self.dialect,
            )
        except DDLError as error:
            message = (
                f"pipeline {self.settings.group}: the DDL at commit ts {ddl.commit_ts} in database "
                f"{action.database!r} failed: {error}. Query: {ddl.query!r}. To go on: fix the "
                f"downstream and start the sink again, or run `ticdc-sink skip-ddl --ts "
                f"{ddl.commit_ts}` (or set TICDC_SINK_ON_DDL_ERROR=skip) and apply it by hand"
            )
            if self.settings.sink.on_ddl_error is OnDDLError.STOP:
                raise DDLError(message) from None
            log.error("%s; skipped (TICDC_SINK_ON_DDL_ERROR=skip)", message)
            DDL_SKIPPED.labels(self.settings.group, "on-ddl-error").inc()
            self._record_ddl(ddl, epoch, offsets)
        # The DDL may have changed any table's layout.
        self._layouts.clear()
        self._names.clear()
        self._facts.clear()

    def _record_ddl(
        self,
        ddl: DDLEvent,
        epoch: int,
        offsets: dict[str, int],
        query: str | None = None,
        home: str | None = None,
    ) -> None:
        """Run ``query`` (if any) in ``home``, then record the DDL as applied."""
        conn = self.connection()
        try:
            with conn.cursor() as cursor:
                if query is not None:
                    execute_ddl(cursor, home, query, self.settings.downstream.meta_db, self.dialect)
                self._checkpoints.advance(cursor, ddl.commit_ts, epoch, offsets, ddl.commit_ts)
            conn.commit()
        except Exception as error:
            if self.is_transient(error):
                self.drop_connection()
            raise


def _probe_columns(plan: TablePlan, columns: list[Column]) -> list[Column] | None:
    """For a table without a key: the staging columns to index, so that the DELETE JOIN
    scans the target once and probes the staged rows instead of comparing all pairs."""
    by_name = {c.name: c for c in columns}
    candidates = [by_name[k] for k in plan.key_columns if k in by_name]
    return candidates[:PROBE_PARTS] or None


def _local_infile_on(cursor: Any, dialect: Dialect) -> bool:
    """Whether the server takes LOAD DATA LOCAL (its local_infile; MySQL 8 turns it off by
    default; a server without the variable takes it)."""
    try:
        cursor.execute(dialect.local_infile_query())
    except pymysql.MySQLError:
        return True
    row = cursor.fetchone()
    return row is None or str(row[0]).upper() not in {"0", "OFF"}
