"""`ticdc-sink apply`: the sink's loop for one pipeline (the leader's).

Read the global resolved ts; when it passes the checkpoint, release the staged changes in between
in commit-ts order, plan them into batches (cut at transaction boundaries, by size, and at every
DDL barrier), hand each batch and each DDL to the :class:`~spark_sink.target.Target`, then trim
Redis. Nothing here writes SQL.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

import pymysql
import redis

from config.errors import BatchTooLargeError, RowRefusedError, StagingLostError, TransientApplyError
from config.settings import OnRowError, Settings
from config.signals import stop_on_signals
from spark_sink.batches import PlannedBatch, planned_batches
from spark_sink.downstream import DOWNSTREAM_OUTAGE, Checkpoint, connect
from spark_sink.leader import LeaderLock
from spark_sink.metrics import record_batch, record_checkpoint
from spark_sink.read_ahead import read_ahead
from spark_sink.refused import RefusedRow, without_refused
from spark_sink.target import Target
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
# What a Redis restart, a LOADING reply or a cut connection raises: waited out, never fatal.
REDIS_TRANSIENT = (redis.ConnectionError, redis.TimeoutError)


def next_batch_rows(current: int, configured: int, too_large: bool) -> int:
    """The batch size of the next round: half after a batch outgrew the downstream's
    transaction limit, back up by doubling (never past ``configured``) after a round that
    fitted. Batches are cut between upstream transactions only, so each stays atomic with its
    checkpoint however small."""
    if too_large:
        return max(1, current // 2)
    return min(configured, current * 2)


class SinkLoop:
    """The loop of one pipeline: release -> plan -> target.apply -> trim. :meth:`run_once`
    applies everything resolved so far."""

    def __init__(
        self, settings: Settings, staging: Staging, target: Target, epoch: int = 0
    ) -> None:
        self.settings = settings
        self.staging = staging
        self.target = target
        self.epoch = epoch
        self.applied_rows = 0
        # Changes per batch: TICDC_SINK_BATCH_ROWS, less while the downstream's transaction
        # size limit cuts batches smaller.
        self.batch_rows = settings.sink.batch_rows

    def run_once(self) -> int:
        """Apply every change up to the global resolved ts; returns the new checkpoint ts."""
        checkpoint = self.target.checkpoint()
        self._check_lineage(checkpoint.resolved_ts)
        after = self._release_after(checkpoint)
        resolved = self.staging.global_resolved_ts()
        if resolved is None or resolved <= after:
            return checkpoint.resolved_ts
        released = self.staging.release(after, resolved)
        pipeline = self.settings.group
        steps = planned_batches(released, self.batch_rows, resolved, pipeline=pipeline)
        # A thread reads and plans the next batch while this one is applied (the apply mostly
        # waits on the downstream): one batch applied, one planned, one being read.
        try:
            for step in read_ahead(steps, limit=1, chunk=1, pipeline=pipeline):
                if isinstance(step, DDLEvent):
                    offsets = self.staging.replay_offsets(step.commit_ts)
                    self.target.apply_ddl(step, checkpoint, self.epoch, offsets)
                else:
                    self._apply(step)
        except BatchTooLargeError as error:
            if self.batch_rows == 1:
                raise
            self.batch_rows = next_batch_rows(self.batch_rows, self.settings.sink.batch_rows, True)
            log.warning("%s; batches of %d changes from now on", error, self.batch_rows)
            return self.target.checkpoint().resolved_ts
        self.batch_rows = next_batch_rows(self.batch_rows, self.settings.sink.batch_rows, False)
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

    def _apply(self, batch: PlannedBatch) -> None:
        started = time.perf_counter()
        offsets = self.staging.replay_offsets(batch.upto)
        while True:
            try:
                merged = self.target.apply_batch(batch.plans, batch.upto, self.epoch, offsets)
                break
            except RowRefusedError as refused:
                if self.settings.sink.on_row_error is OnRowError.STOP:
                    raise
                # Dead-lettered before the batch commits: a crash in between redoes the batch,
                # which finds (and dead-letters) the same rows again.
                rows: list[RefusedRow] = refused.rows
                trimmed = self.staging.dead_letters.add_entries(
                    [row.dead_letter() for row in rows], self.settings.redis.dead_letter_max_entries
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

    wait_for("the downstream", str(settings.downstream.url), probe, settings.startup_timeout)


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
    lock = LeaderLock(client, staging.keys)
    target = Target(settings, router=Router(settings.sink.routes, settings.sink.skip_tables))
    # Start Spark first, standby or not: its JVM takes seconds, better paid before leading.
    with _unless_stopping(stop, "starting Spark"):
        target.spark()
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
    sink = SinkLoop(settings, staging, target, epoch=lock.epoch)
    log.info("leading pipeline %s with epoch %d", settings.group, lock.epoch)
    try:
        code = lead(sink, lock, lost.is_set, redis_outage, once, stop)
    finally:
        lock.release()
    if stop.is_set():
        log.info("stopped; released the lease of pipeline %s", settings.group)
    return code


def lead(
    sink: SinkLoop,
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
            if not sink.target.is_transient(error):
                raise
            sink.target.drop_connection()
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
