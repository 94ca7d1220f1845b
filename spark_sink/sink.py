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
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

import pymysql
import redis

from config.errors import BatchTooLargeError, RowRefusedError, StagingLostError, TransientApplyError
from config.settings import OnRowError, Settings
from config.signals import stop_on_signals
from core.metrics import DEAD_LETTERS_TRIMMED, serve_metrics
from core.model import DDLEvent
from core.outage import RETRY_FIRST_S, Outage, next_delay
from core.redis_client import redis_client
from core.staging import Staging
from core.startup import wait_for, wait_for_redis
from core.tso import describe_tso, tso_age
from spark_sink.batches import FIRST_BATCH_ROWS, PlannedBatch, planned_batches
from spark_sink.db.downstream import DOWNSTREAM_OUTAGE, Checkpoint, connect
from spark_sink.leader import LeaderLock
from spark_sink.metrics import record_batch, record_checkpoint
from spark_sink.read_ahead import read_ahead
from spark_sink.refused import RefusedRow, without_refused
from spark_sink.target import Target

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


@dataclass(frozen=True, slots=True)
class RoundEnd:
    """Every change of a round, up to ``resolved``, has been handed over before this."""

    resolved: int


class _RoundGate:
    """Between the loop and the read-ahead thread at a round's end: the loop says the round is
    applied (its checkpoint committed); the thread decides whether to read on, at once when a
    new resolved ts is there as the round's last step is handed over, else once the round is
    applied (a resolved ts that moved meanwhile is read too); the loop can stop it instead."""

    def __init__(self) -> None:
        self._applied = threading.Event()
        self._decided = threading.Event()
        self._stopped = False
        # An applied round's resolved ts the thread has not trimmed yet (it reads on first).
        self.untrimmed: int | None = None

    def applied(self) -> None:
        """The round is applied: wait for the thread's decision (it has trimmed the round
        when it reads no further, and trims it itself while the next round applies)."""
        self._applied.set()
        self._decided.wait()
        self._decided.clear()
        # Set for a thread that decided before the round was applied, and so never waited.
        self._applied.clear()

    def decided(self) -> None:
        self._decided.set()

    def stop(self) -> None:
        self._stopped = True
        self._applied.set()

    def wait(self) -> bool:
        """Whether to read on: blocks until the round is applied or the reading stopped."""
        self._applied.wait()
        self._applied.clear()
        return not self._stopped


# The steps as the read-ahead thread hands them over: a round's, its end, the next round's.
Steps = Generator[PlannedBatch | DDLEvent | RoundEnd, None, None]


@dataclass(frozen=True, slots=True)
class _Rounds:
    """Rounds read ahead by a thread, and the gate it waits at between them."""

    steps: Steps
    gate: _RoundGate

    def close(self) -> None:
        self.gate.stop()
        self.steps.close()


@dataclass(frozen=True, slots=True)
class _Ahead:
    """Rounds read ahead past a round's end: the next one is released after ``after``."""

    after: int
    rounds: _Rounds


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
        # The steps read ahead past the last round's end, and where their next round starts.
        self._ahead: _Ahead | None = None

    def run_once(self) -> int:
        """Apply every change up to the global resolved ts; returns the new checkpoint ts.

        The read-ahead thread trims the round once it is applied. When a new resolved ts is
        there once the round's last batch is handed over (or else once it is applied), it
        reads and plans the next round from this one's resolved ts (the next call takes it
        when the checkpoint is still there) and trims while the loop applies the next round's
        first batch; else it trims before this returns."""
        try:
            checkpoint = self.target.checkpoint()
            self._check_lineage(checkpoint.resolved_ts)
            after = self._release_after(checkpoint)
        except BaseException:
            self._drop_ahead()
            raise
        rounds = self._ahead_from(after)
        try:
            # Read ahead past the last round: None when no resolved ts was new by its end.
            resolved = None if rounds is None else self._apply_round(rounds, checkpoint)
            if resolved is None:
                upto = self.staging.global_resolved_ts()
                if upto is None or upto <= after:
                    return checkpoint.resolved_ts
                # A thread reads and plans the next batch while this one is applied (the apply
                # mostly waits on the downstream): one batch applied, one planned, one being read.
                gate = _RoundGate()
                planned = self._rounds(after, upto, self.batch_rows, gate)
                steps = read_ahead(planned, limit=1, chunk=1, pipeline=self.settings.group)
                rounds = _Rounds(steps, gate)
                resolved = self._apply_round(rounds, checkpoint)
                if resolved is None:
                    raise RuntimeError("the sink's round ended before its first step")
        except BatchTooLargeError as error:
            if rounds is not None:
                rounds.close()
            if self.batch_rows == 1:
                raise
            self.batch_rows = next_batch_rows(self.batch_rows, self.settings.sink.batch_rows, True)
            log.warning("%s; batches of %d changes from now on", error, self.batch_rows)
            return self.target.checkpoint().resolved_ts
        except BaseException:
            if rounds is not None:
                rounds.close()
            raise
        # The next round (read ahead) was planned with this size: the one a fitted round gets.
        self.batch_rows = next_batch_rows(self.batch_rows, self.settings.sink.batch_rows, False)
        return resolved

    def close(self) -> None:
        """Stop reading ahead (the thread ends after the step it is making) and trim the last
        applied round if the thread had not yet."""
        ahead = self._drop_ahead()
        untrimmed = None if ahead is None else ahead.rounds.gate.untrimmed
        if untrimmed is not None:
            try:
                self.staging.trim(untrimmed)
            except REDIS_TRANSIENT as error:
                log.warning("the trim up to %s is left to the next round: %s", untrimmed, error)

    def _drop_ahead(self) -> _Ahead | None:
        """Stop reading ahead, trimming nothing more."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.rounds.close()
        return ahead

    def _ahead_from(self, after: int) -> _Rounds | None:
        """The rounds read ahead when their next one starts at ``after`` (the checkpoint is
        where the last round left it), else None (and the reading ahead stops)."""
        ahead = self._ahead
        if ahead is not None and ahead.after == after:
            self._ahead = None
            return ahead.rounds
        # Not where the round left it: nothing read ahead (nor its trim) is sure to fit.
        self._drop_ahead()
        return None

    def _rounds(
        self, after: int, resolved: int, batch_rows: int, gate: _RoundGate
    ) -> Iterator[PlannedBatch | DDLEvent | RoundEnd]:
        """Planned rounds, each up to the global resolved ts when it starts, then its end; the
        rounds go on while a new resolved ts is there once a round's end is handed over, or
        else once the round is applied. A round read on at its predecessor's end starts with
        batches as big as that one's biggest, one read after a wait (the sink caught up) small
        again. Each applied round is trimmed here, off the loop's thread."""
        pipeline = self.settings.group
        configured = self.settings.sink.batch_rows
        # The round before, applied: trimmed here once this round's first step is handed over
        # (while the loop applies it), never before its checkpoint committed.
        applied: int | None = None
        first = FIRST_BATCH_ROWS
        while True:
            released = self.staging.release(after, resolved)
            largest = 0
            for step in planned_batches(released, batch_rows, resolved, first, pipeline):
                yield step
                if applied is not None:
                    self.staging.trim(applied)
                    gate.untrimmed = applied = None
                if isinstance(step, PlannedBatch):
                    largest = max(largest, step.changes)
            yield RoundEnd(resolved)
            first = FIRST_BATCH_ROWS
            # Read on while the loop applies this round's last batch when a new resolved ts
            # is there already: the next round's first batch is then planned by the time the
            # loop wants it, and need not start small (the sink is behind: its batches' fixed
            # costs count, not how soon the first one starts). Trimmed once the next round's
            # first step is handed over, which the queue takes only after the loop took this
            # round's end (all of it applied).
            upto = self.staging.global_resolved_ts()
            if upto is not None and upto > resolved:
                gate.untrimmed = applied = resolved
                gate.decided()
                first = max(FIRST_BATCH_ROWS, largest)
            else:
                if not gate.wait():
                    return
                try:
                    upto = self.staging.global_resolved_ts()
                    if upto is None or upto <= resolved:
                        self.staging.trim(resolved)
                        return
                    gate.untrimmed = applied = resolved
                finally:
                    gate.decided()
            after, resolved = resolved, upto
            # As the loop sizes the round after one that fitted; one that did not drops this.
            batch_rows = next_batch_rows(batch_rows, configured, False)

    def _apply_round(self, rounds: _Rounds, checkpoint: Checkpoint) -> int | None:
        """Apply a round's steps up to its end, keep the rest read ahead; returns the round's
        resolved ts, or None when the steps end before their first (no round)."""
        started = False
        for step in rounds.steps:
            started = True
            if isinstance(step, RoundEnd):
                # Every batch before the end is applied: the thread may trim and read on.
                rounds.gate.applied()
                self._ahead = _Ahead(step.resolved, rounds)
                return step.resolved
            if isinstance(step, DDLEvent):
                offsets = self.staging.replay_offsets(step.commit_ts)
                self.target.apply_ddl(step, checkpoint, self.epoch, offsets)
            else:
                self._apply(step)
        if started:
            raise RuntimeError("the sink's rounds ended before the round did")
        return None

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
    staging.check_layout()
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
    try:
        return _lead(sink, lock, lost, redis_outage, once, stop)
    finally:
        sink.close()


def _lead(
    sink: SinkLoop,
    lock: LeaderLock,
    lost: Callable[[], bool],
    redis_outage: Outage,
    once: bool,
    stop: threading.Event,
) -> int:
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
