"""`ticdc-sink apply`: the release loop of one pipeline's active sink.

Read the global resolved ts; when it passes the checkpoint, take the staged changes in between in
commit-ts order, cut them into batches (at transaction boundaries, by size, and at every DDL
barrier), apply each batch with its checkpoint atomically, run each DDL once, then trim Redis.
"""

from __future__ import annotations

import logging
import time

import redis

from config.errors import RowRefusedError, StagingLostError
from config.settings import OnRowError, Settings
from spark_sink.batches import PlannedBatch, planned_batches
from spark_sink.downstream import execute_ddl, with_retries
from spark_sink.leader import LeaderLock
from spark_sink.merge import Applier
from spark_sink.metrics import record_batch
from spark_sink.read_ahead import read_ahead
from spark_sink.refused import RefusedRow, without_refused
from streams.metrics import serve_metrics
from streams.model import DDLEvent
from streams.staging import Staging

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
                self.staging.add_dead_letters([row.dead_letter() for row in rows])
                for row in rows:
                    log.warning("dead letter: %s", row.describe())
                without_refused(batch.plans, rows)
        self.applied_rows += merged
        elapsed = time.perf_counter() - started
        record_batch(self.settings.group, batch.changes, merged, elapsed, batch.upto)
        log.info("applied %d changes up to %d in %.3f s", batch.changes, batch.upto, elapsed)

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
    """Lead the pipeline (or wait as standby until it can) and apply until stopped."""
    from spark_sink.routing import Router

    serve_metrics(settings)
    client = redis.Redis.from_url(settings.redis_url)
    staging = Staging(client, settings.group)
    lock = LeaderLock(client, staging.key("sink-leader"))
    applier = Applier(settings, router=Router.parse(settings.routes, settings.skip_tables))
    # Start Spark first, standby or not: its JVM takes seconds, better paid before leading.
    applier.spark()
    while not _acquire(lock):
        log.info("another sink leads pipeline %s; standing by", settings.group)
        time.sleep(lock.lease_ms / 3000)
    lost = lock.keep_alive()
    sink = Sink(settings, staging, applier, epoch=lock.epoch)
    log.info("leading pipeline %s with epoch %d", settings.group, lock.epoch)
    try:
        last = None
        while True:
            try:
                applied = sink.run_once()
            except (redis.ConnectionError, redis.TimeoutError) as error:
                # Nothing is trimmed before its commit, so the next round redoes what is left.
                log.warning("Redis unavailable (%s); retrying", error)
                time.sleep(REDIS_RETRY_S)
                continue
            if lost.is_set():
                # A newer leader exists; the epoch check already refused any late commit.
                log.error("lost the leader lease; stopping")
                return 1
            if once:
                return 0
            if applied == last:
                time.sleep(IDLE_SLEEP_S)
            last = applied
    finally:
        lock.release()
