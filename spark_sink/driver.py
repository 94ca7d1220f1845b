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
from collections.abc import Iterator

import redis

from config.errors import StagingLostError
from config.settings import Settings
from config.signals import stop_on_signals
from spark_sink.batches import PlannedBatch, planned_batches
from spark_sink.downstream import execute_ddl, with_retries
from spark_sink.leader import LeaderLock
from spark_sink.merge import Applier
from spark_sink.metrics import record_batch, record_checkpoint
from spark_sink.read_ahead import read_ahead
from streams.metrics import serve_metrics
from streams.model import DDLEvent
from streams.redis_client import redis_client
from streams.staging import Staging
from streams.tso import describe_tso, tso_age

log = logging.getLogger("ticdc_sink.sink")

# How long the loop waits after Redis could not be reached.
REDIS_RETRY_S = 1.0
# How long the loop sleeps when there is nothing new to apply.
IDLE_SLEEP_S = 0.05


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

    def checkpoint_ts(self) -> tuple[int, int]:
        """(applied resolved ts, last applied DDL ts) from the downstream."""
        conn = self.applier.connection()
        with conn.cursor() as cursor:
            found = self.applier.checkpoint.read(cursor)
        conn.commit()
        return (found.resolved_ts, found.ddl_ts) if found else (0, 0)

    def run_once(self) -> int:
        """Apply every change up to the global resolved ts; returns the new checkpoint ts."""
        checkpoint, ddl_ts = self.checkpoint_ts()
        self._check_lineage(checkpoint)
        resolved = self.staging.global_resolved_ts()
        if resolved is None or resolved <= checkpoint:
            return checkpoint
        released = self.staging.release(checkpoint, resolved)
        steps = planned_batches(released, self.settings.batch_rows, resolved)
        # A thread reads and plans the next batch while this one is applied (the apply mostly
        # waits on the downstream): one batch applied, one planned, one being read.
        for step in read_ahead(steps, limit=1, chunk=1):
            if isinstance(step, DDLEvent):
                self._ddl(step, ddl_ts)
            else:
                self._flush(step)
        self.staging.trim(resolved)
        return resolved

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
        merged = self.applier.apply(batch.plans, batch.upto, self.epoch, offsets)
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

    def _ddl(self, ddl: DDLEvent, applied_ddl_ts: int) -> None:
        if ddl.commit_ts <= applied_ddl_ts:
            log.info("DDL at %d already applied: %s", ddl.commit_ts, ddl.query)
            return
        route = self.applier.router.route(ddl.schema or "", ddl.table or "")
        if ddl.table and route is None:
            return

        def run() -> None:
            conn = self.applier.connection()
            with conn.cursor() as cursor:
                execute_ddl(cursor, route[0] if route and ddl.schema else ddl.schema, ddl.query)
                self.applier.checkpoint.advance(
                    cursor,
                    ddl.commit_ts,
                    self.epoch,
                    self.staging.replay_offsets(ddl.commit_ts),
                    ddl.commit_ts,
                )
            conn.commit()

        with_retries(run, f"DDL at {ddl.commit_ts}")
        self.applier.forget_layouts()


def _acquire(lock: LeaderLock) -> bool:
    try:
        return lock.acquire()
    except (redis.ConnectionError, redis.TimeoutError) as error:
        log.warning("Redis unavailable (%s) while taking the lead; retrying", error)
        return False


def run_sink(settings: Settings, once: bool = False) -> int:
    """Lead the pipeline (or wait as standby until it can) and apply until stopped.

    SIGTERM or SIGINT lets the batch in progress finish, releases the lease (a standby takes
    over at once rather than after the lease's term) and returns 0."""
    from spark_sink.routing import Router

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
    while not stop.is_set() and not _acquire(lock):
        log.info("another sink leads pipeline %s; standing by", settings.group)
        stop.wait(lock.lease_ms / 3000)
    if stop.is_set():
        log.info("stopped before leading pipeline %s", settings.group)
        return 0
    lost = lock.keep_alive()
    sink = Sink(settings, staging, applier, epoch=lock.epoch)
    log.info("leading pipeline %s with epoch %d", settings.group, lock.epoch)
    try:
        last = None
        while not stop.is_set():
            try:
                with _unless_stopping(stop, "applying a batch (it is applied again)"):
                    applied = sink.run_once()
            except (redis.ConnectionError, redis.TimeoutError) as error:
                # Nothing is trimmed before its commit, so the next round redoes what is left.
                log.warning("Redis unavailable (%s); retrying", error)
                stop.wait(REDIS_RETRY_S)
                continue
            if lost.is_set():
                # A newer leader exists; the epoch check already refused any late commit.
                log.error("lost the leader lease; stopping")
                return 1
            if applied != last:
                record_checkpoint(settings.group, applied)
            if once:
                return 0
            if applied == last:
                stop.wait(IDLE_SLEEP_S)
            last = applied
    finally:
        lock.release()
    log.info("stopped; released the lease of pipeline %s", settings.group)
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
