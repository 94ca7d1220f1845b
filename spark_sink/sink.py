"""`ticdc-sink apply`: the release loop of one pipeline's active sink.

Read the global resolved ts; when it passes the checkpoint, take the staged changes in between in
commit-ts order, cut them into batches (at transaction boundaries, by size, and at every DDL
barrier), apply each batch with its checkpoint atomically, run each DDL once, then trim Redis.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import pymysql
import redis

from config.errors import DDLError, RowRefusedError, StagingLostError, TransientApplyError
from config.settings import OnDDLError, OnRowError, Settings
from config.signals import stop_on_signals
from spark_sink.batches import PlannedBatch, planned_batches
from spark_sink.ddl_routing import named_database, route_ddl
from spark_sink.ddl_text import is_database_ddl
from spark_sink.dialect import Server
from spark_sink.downstream import (
    DOWNSTREAM_OUTAGE,
    Checkpoint,
    connect,
    execute_ddl,
    is_transient,
    with_retries,
)
from spark_sink.leader import LeaderLock
from spark_sink.merge import Applier
from spark_sink.metrics import DDL_SKIPPED, record_batch, record_checkpoint
from spark_sink.read_ahead import read_ahead
from spark_sink.refused import RefusedRow, without_refused
from spark_sink.tidb_syntax import mysql_safe
from streams.dead_letters import DeadLetters
from streams.metrics import DEAD_LETTERS_TRIMMED, serve_metrics
from streams.model import DDLEvent
from streams.outage import RETRY_FIRST_S, Outage, next_delay
from streams.redis_client import redis_client
from streams.staging import Staging
from streams.startup import wait_for, wait_for_redis
from streams.tso import describe_tso, tso_age

log = logging.getLogger("ticdc_sink.sink")

# How long the loop sleeps when there is nothing new to apply.
IDLE_SLEEP_S = 0.05
# Before the first checkpoint is read.
NO_CHECKPOINT = Checkpoint(0, 0, 0, {})
# What a Redis restart, a LOADING reply or a cut connection raises: waited out, never fatal.
REDIS_TRANSIENT = (redis.ConnectionError, redis.TimeoutError)


class Sink:
    """The apply loop for one pipeline; :meth:`run_once` applies everything resolved so far."""

    def __init__(
        self, settings: Settings, staging: Staging, applier: Applier, epoch: int = 0
    ) -> None:
        self.settings = settings
        self.staging = staging
        self.applier = applier
        self.epoch = epoch
        self.applied_rows = 0

    def checkpoint(self) -> Checkpoint:
        """How far the downstream is (all zero before the first checkpoint)."""
        conn = self.applier.connection()
        with conn.cursor() as cursor:
            found = self.applier.checkpoint.read(cursor)
        conn.commit()
        return found or NO_CHECKPOINT

    def run_once(self) -> int:
        """Apply every change up to the global resolved ts; returns the new checkpoint ts."""
        checkpoint = self.checkpoint()
        self._check_lineage(checkpoint.resolved_ts)
        after = self._release_after(checkpoint)
        resolved = self.staging.global_resolved_ts()
        if resolved is None or resolved <= after:
            return checkpoint.resolved_ts
        released = self.staging.release(after, resolved)
        steps = planned_batches(released, self.settings.batch_rows, resolved)
        # A thread reads and plans the next batch while this one is applied (the apply mostly
        # waits on the downstream): one batch applied, one planned, one being read.
        for step in read_ahead(steps, limit=1, chunk=1):
            if isinstance(step, DDLEvent):
                self._ddl(step, checkpoint)
            else:
                self._flush(step)
        self.staging.trim(resolved)
        return resolved

    def _release_after(self, checkpoint: Checkpoint) -> int:
        """The commit ts after which changes are released: the checkpoint, or just before it
        when the DDL at the checkpoint has not run (the batch before a DDL commits up to the
        DDL's ts; then the DDL failed, or the sink died before it)."""
        at = checkpoint.resolved_ts
        if at and checkpoint.ddl_ts < at and self.staging.has_ddl_at(at):
            return at - 1
        return at

    def _check_lineage(self, checkpoint: int) -> None:
        """Stop if Redis lost its data: the workers' committed Kafka offsets have moved past
        changes that were staged, not applied, and now exist only in Kafka."""
        if self.staging.has_lineage():
            return
        if checkpoint:
            raise StagingLostError(
                f"Redis holds no staging data for pipeline {self.settings.group!r} while the "
                f"downstream checkpoint is at ts {checkpoint}: Redis was flushed or replaced. "
                "Stop the workers, run `ticdc-sink recover`, then start them again."
            )
        self.staging.mark_lineage()

    def _flush(self, batch: PlannedBatch) -> None:
        started = time.perf_counter()
        offsets = self.staging.replay_offsets(batch.upto)
        while True:
            try:
                merged = self.applier.apply(batch.plans, batch.upto, self.epoch, offsets)
                break
            except RowRefusedError as refused:
                if self.settings.on_row_error is OnRowError.STOP:
                    raise
                # Dead-lettered before the batch commits: a crash in between redoes the batch,
                # which finds (and dead-letters) the same rows again.
                rows: list[RefusedRow] = refused.rows
                trimmed = DeadLetters(self.staging).add_entries(
                    [row.dead_letter() for row in rows], self.settings.dead_letter_max_entries
                )
                DEAD_LETTERS_TRIMMED.labels(self.settings.group).inc(trimmed)
                for row in rows:
                    log.warning("dead letter: %s", row.describe())
                without_refused(batch.plans, rows)
        self.applied_rows += merged
        elapsed = time.perf_counter() - started
        record_batch(self.settings.group, batch.changes, elapsed, batch.upto)
        log.info(
            "applied %d changes in %.3f s; resolved ts %s, %.1f s behind",
            batch.changes,
            elapsed,
            describe_tso(batch.upto),
            tso_age(batch.upto),
        )

    def _ddl(self, ddl: DDLEvent, checkpoint: Checkpoint) -> None:
        if ddl.commit_ts <= checkpoint.ddl_ts:
            log.info("DDL at %d already applied: %s", ddl.commit_ts, ddl.query)
            return
        router = self.applier.router
        if not ddl.schema:
            # A DDL event without its database (the project's own Simple encoder writes no table
            # schema for DDL) that qualifies its table runs in the database it names.
            ddl = replace(ddl, schema=named_database(ddl.query))
        route = router.route(ddl.schema or "", ddl.table or "")
        if ddl.table and route is None:
            return
        if ddl.commit_ts == checkpoint.skip_ddl_ts:
            log.warning(
                "DDL at %d skipped, as `ticdc-sink skip-ddl` asked: %s", ddl.commit_ts, ddl.query
            )
            DDL_SKIPPED.labels(self.settings.group, "skip-ddl").inc()
            self._record_ddl(ddl)
            return
        database = None
        if ddl.schema:
            database = route[0] if route and ddl.table else router.route_schema(ddl.schema)
        try:
            query = self._downstream_query(ddl, database)
            if query is None:
                self._record_ddl(ddl)
                return
            home = None if is_database_ddl(query) else database
            if home is None and not is_database_ddl(query):
                raise DDLError("the event names no database to run it in")
            with_retries(lambda: self._record_ddl(ddl, query, home), f"DDL at {ddl.commit_ts}")
        except DDLError as error:
            message = (
                f"pipeline {self.settings.group}: the DDL at commit ts {ddl.commit_ts} in database "
                f"{database!r} failed: {error}. Query: {ddl.query!r}. To go on: fix the "
                f"downstream and start the sink again, or run `ticdc-sink skip-ddl --ts "
                f"{ddl.commit_ts}` (or set TICDC_SINK_ON_DDL_ERROR=skip) and apply it by hand"
            )
            if self.settings.on_ddl_error is OnDDLError.STOP:
                raise DDLError(message) from None
            log.error("%s; skipped (TICDC_SINK_ON_DDL_ERROR=skip)", message)
            DDL_SKIPPED.labels(self.settings.group, "on-ddl-error").inc()
            self._record_ddl(ddl)
        self.applier.forget_layouts()

    def _downstream_query(self, ddl: DDLEvent, home: str | None) -> str | None:
        """The DDL's text as the downstream runs it: TiDB-only syntax out (unless the
        downstream is TiDB), names routed; None when nothing is left to run."""
        query = ddl.query
        if not self._downstream_is_tidb():
            safe = mysql_safe(ddl.query)
            if safe is None:
                log.info(
                    "DDL at %d is TiDB's own, nothing to run downstream: %s",
                    ddl.commit_ts,
                    ddl.query,
                )
                return None
            query = safe
        return route_ddl(query, ddl.schema or "", self.applier.router, home)

    def _downstream_is_tidb(self) -> bool:
        self.applier.connection()  # reads the server's dialect on connecting
        dialect = self.applier.dialect
        return dialect is not None and dialect.server is Server.TIDB

    def _record_ddl(self, ddl: DDLEvent, query: str | None = None, home: str | None = None) -> None:
        """Run ``query`` (if any) in ``home``, then record the DDL as applied."""
        conn = self.applier.connection()
        try:
            with conn.cursor() as cursor:
                if query is not None:
                    execute_ddl(cursor, home, query, self.settings.meta_db)
                self.applier.checkpoint.advance(
                    cursor,
                    ddl.commit_ts,
                    self.epoch,
                    self.staging.replay_offsets(ddl.commit_ts),
                    ddl.commit_ts,
                )
            conn.commit()
        except Exception as error:
            if is_transient(error):
                self.applier.drop_connection()
            raise


def _acquire(lock: LeaderLock, outage: Outage) -> bool:
    try:
        taken = lock.acquire()
    except REDIS_TRANSIENT as error:
        outage.failed(error, "taking the lead")
        return False
    outage.answered()
    return taken


def _wait_for_downstream(settings: Settings) -> None:
    def probe() -> None:
        connect(settings, connect_timeout=3).close()

    wait_for("the downstream", str(settings.downstream), probe, settings.startup_timeout)


def run_sink(settings: Settings, once: bool = False) -> int:
    """Lead the pipeline (or wait as standby until it can) and apply until stopped.

    SIGTERM or SIGINT lets the batch in progress finish, releases the lease (a standby takes
    over at once rather than after the lease's term) and returns 0."""
    from spark_sink.routing import Router

    # Waited for under the command line's own handlers: a signal then ends the start (exit 0).
    wait_for_redis(settings)
    _wait_for_downstream(settings)
    stop = stop_on_signals()
    serve_metrics(settings)
    client = redis_client(settings)
    staging = Staging(client, settings.group)
    lock = LeaderLock(client, staging.key("sink-leader"))
    applier = Applier(settings, router=Router.parse(settings.routes, settings.skip_tables))
    # Start Spark first, standby or not: its JVM takes seconds, better paid before leading.
    with _unless_stopping(stop, "starting Spark"):
        applier.spark()
    # PySpark's context takes SIGINT for itself (it cancels jobs and raises): take it back.
    stop_on_signals(stop)
    redis_outage = Outage("Redis", log)
    while not stop.is_set() and not _acquire(lock, redis_outage):
        if not redis_outage.ongoing:
            log.info("another sink leads pipeline %s; standing by", settings.group)
        stop.wait(lock.lease_ms / 3000)
    if stop.is_set():
        log.info("stopped before leading pipeline %s", settings.group)
        return 0
    lost = lock.keep_alive(redis_outage)
    sink = Sink(settings, staging, applier, epoch=lock.epoch)
    log.info("leading pipeline %s with epoch %d", settings.group, lock.epoch)
    try:
        code = lead(sink, lock, lost.is_set, redis_outage, once, stop)
    finally:
        lock.release()
    if stop.is_set():
        log.info("stopped; released the lease of pipeline %s", settings.group)
    return code


def lead(
    sink: Sink,
    lock: LeaderLock,
    lost: Callable[[], bool],
    redis_outage: Outage,
    once: bool,
    stop: threading.Event | None = None,
) -> int:
    """Apply round after round, riding out Redis and downstream outages, until the lease is
    lost to another sink, ``stop`` is set (0), or after one round with ``once``."""
    stop = stop or threading.Event()
    last = None
    delay = RETRY_FIRST_S
    while not stop.is_set():
        # The lease may have been taken again after it lapsed: later commits carry the new epoch.
        sink.epoch = lock.epoch
        try:
            with _unless_stopping(stop, "applying a batch (it is applied again)"):
                applied = sink.run_once()
        except REDIS_TRANSIENT as error:
            # Nothing is trimmed before its commit, so the next round redoes what is left.
            redis_outage.failed(error, "applying")
            stop.wait(delay)
            delay = next_delay(delay)
            continue
        except (pymysql.MySQLError, TransientApplyError) as error:
            if not is_transient(error):
                raise
            sink.applier.drop_connection()
            DOWNSTREAM_OUTAGE.failed(error, "applying")
            stop.wait(delay)
            delay = next_delay(delay)
            continue
        redis_outage.answered()
        DOWNSTREAM_OUTAGE.answered()
        delay = RETRY_FIRST_S
        if lost():
            # A newer leader exists; the epoch check already refused any late commit.
            log.error("another sink took the leader lease; stopping")
            return 1
        if applied != last:
            record_checkpoint(sink.settings.group, applied)
        if once:
            return 0
        if applied == last:
            stop.wait(IDLE_SLEEP_S)
        last = applied
    return 0


@contextlib.contextmanager
def _unless_stopping(stop: threading.Event, what: str) -> Iterator[None]:
    """Errors while a stop signal is being handled end the process quietly: a supervisor
    stopping the process group stops Spark's JVM too, which fails the step in progress."""
    try:
        yield
    except Exception as error:
        if not stop.is_set():
            raise
        log.warning("stopped while %s: %s", what, error)
        raise SystemExit(0) from None
