"""The sink's loop for one pipeline: release -> plan -> apply -> trim.

Read the global resolved ts; when it passes the checkpoint, release the staged changes in between
in commit-ts order, plan them into batches (cut at transaction boundaries, by size, and at every
DDL barrier; read ahead by a thread, :mod:`spark_sink.rounds`), hand each batch and each DDL to the
:class:`~spark_sink.target.Target`, then trim Redis. Nothing here writes SQL.
"""

from __future__ import annotations

import logging
import threading

from config.errors import (
    BatchAbandonedError,
    BatchTooLargeError,
    PartsRestartError,
    StagingLostError,
    TransactionTooLargeError,
)
from config.settings import Settings
from core.model import DDLEvent, RowChange
from core.redis_client import REDIS_TRANSIENT
from core.staging import Staging
from core.tso import describe_tso
from spark_sink.batch_steps import BatchSteps
from spark_sink.batches import PlannedBatch, next_batch_rows
from spark_sink.db.checkpoint import Checkpoint
from spark_sink.in_order import InOrder, Turn
from spark_sink.rounds import Ahead, RoundEnd, Rounds, read_rounds
from spark_sink.split import apply_split
from spark_sink.target import Target
from spark_sink.topic_gate import ResolvedGate
from spark_sink.write_set import write_set

log = logging.getLogger("ticdc_sink.sink")

# What a Redis restart, a LOADING reply or a cut connection raises: waited out, never fatal.


class SinkLoop:
    """The loop of one pipeline: release -> plan -> target.apply -> trim. :meth:`run_once`
    applies everything resolved so far."""

    def __init__(
        self,
        settings: Settings,
        staging: Staging,
        target: Target,
        epoch: int = 0,
        stop: threading.Event | None = None,
    ) -> None:
        self.settings = settings
        self.staging = staging
        self.target = target
        self.epoch = epoch
        # How far it may apply: the global resolved ts, checked against Kafka's topics when a
        # pattern names them.
        self.gate = ResolvedGate(settings, staging)
        self.steps = BatchSteps(settings, staging, target, epoch)
        # Changes per batch: TICDC_SINK_BATCH_ROWS, less while the downstream's transaction
        # size limit cuts batches smaller.
        self.batch_rows = settings.sink.batch_rows
        # The steps read ahead past the last round's end, and where their next round starts.
        self._ahead: Ahead | None = None
        # Whether the downstream is known to hold no split transaction's position: read at
        # the first call, and again after a split that did not finish.
        self._no_split = False
        # Set by SIGTERM/SIGINT: the round ends after the batch in progress, so a stop waits for
        # one batch, never for the backlog.
        self._stop = stop or threading.Event()
        # With more than one connection: the batches in flight beside each other, committed
        # in order (their lanes are the target's connections by index).
        lanes = list(range(len(target.lanes)))
        self._in_order: InOrder[int] | None = InOrder(lanes) if len(lanes) > 1 else None

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
            if self._resume_split(checkpoint.resolved_ts):
                return self.target.checkpoint().resolved_ts
            after = self._release_after(checkpoint)
        except BaseException:
            self._drop_ahead()
            raise
        rounds = self._ahead_from(after)
        try:
            # Read ahead past the last round: None when no resolved ts was new by its end.
            resolved = None if rounds is None else self._apply_round(rounds, checkpoint)
            if resolved is None:
                upto = self.gate.resolved()
                if upto is None or upto <= after:
                    return checkpoint.resolved_ts
                rounds = read_rounds(
                    self.settings, self.staging, after, upto, self.batch_rows, self.gate.resolved
                )
                resolved = self._apply_round(rounds, checkpoint)
                if resolved is None:
                    raise RuntimeError("the sink's round ended before its first step")
        except (PartsRestartError, BatchAbandonedError) as error:
            if rounds is not None:
                rounds.close()
            log.info("%s", error)
            return self.target.checkpoint().resolved_ts
        except BatchTooLargeError as error:
            if rounds is not None:
                rounds.close()
            if self.batch_rows == 1:
                # One transaction alone: smaller batches cannot help.
                cause = error.__cause__ or error
                if not self.settings.sink.split_large_txn:
                    raise self.target.too_large(error.resolved_ts, cause) from error
                return self._split_refused(cause)
            self.batch_rows = next_batch_rows(self.batch_rows, self.settings.sink.batch_rows, True)
            log.warning("%s; batches of %d changes from now on", error, self.batch_rows)
            return self.target.checkpoint().resolved_ts
        except TransactionTooLargeError as error:
            if rounds is not None:
                rounds.close()
            if not self.settings.sink.split_large_txn:
                raise
            return self._split_refused(error.__cause__ or error)
        except BaseException:
            if rounds is not None:
                rounds.close()
            raise
        # The next round (read ahead) was planned with this size: the one a fitted round gets.
        self.batch_rows = next_batch_rows(self.batch_rows, self.settings.sink.batch_rows, False)
        return resolved

    def _resume_split(self, checkpoint: int) -> bool:
        """Go on with a transaction a sink before began to commit in chunks (whatever
        ``TICDC_SINK_SPLIT_LARGE_TXN`` says now: half of it is applied, and only its position
        tells which half); False when none is under way."""
        if self._no_split:
            return False
        position = self.target.split_position()
        if position is None or position.commit_ts <= checkpoint:
            self._no_split = True
            return False
        self._drop_ahead()
        log.warning("the split transaction is under way (%s): going on", position.describe())
        self._split(position.commit_ts)
        return True

    def _split_refused(self, error: BaseException) -> int:
        """Commit in chunks the transaction the downstream refused (the first after the
        checkpoint: what came before it in its batch or round committed first); returns the
        new checkpoint ts."""
        after = self._release_after(self.target.checkpoint())
        upto = self.gate.resolved()
        first = next(iter(self.staging.release(after, upto or after)), None)
        if not isinstance(first, RowChange):
            raise TransactionTooLargeError(f"nothing to split after ts {after}: {error}")
        log.warning(
            "the upstream transaction at ts %s is larger than the downstream takes in one "
            "transaction (%s); TICDC_SINK_SPLIT_LARGE_TXN is on: it is committed in chunks of "
            "at most %d changes, its removals first, then its new rows, not atomically",
            first.commit_ts,
            error,
            self.settings.sink.chunk_rows,
        )
        self._split(first.commit_ts)
        return self.target.checkpoint().resolved_ts

    def _split(self, commit_ts: int) -> None:
        self._no_split = False
        chunk_rows = self.settings.sink.chunk_rows
        self._no_split = apply_split(
            self.staging, self.target, commit_ts, chunk_rows, self.epoch, self._stop
        )

    def close(self) -> None:
        """Stop reading ahead (the thread ends after the step it is making) and trim the last
        applied round if the thread had not yet."""
        ahead = self._drop_ahead()
        if self._in_order is not None:
            self._in_order.close()
        self.target.abandon()
        untrimmed = None if ahead is None else ahead.rounds.gate.untrimmed
        if untrimmed is not None:
            try:
                self.staging.trim(untrimmed)
            except REDIS_TRANSIENT as error:
                log.warning("the trim up to %s is left to the next round: %s", untrimmed, error)

    def _drop_ahead(self) -> Ahead | None:
        """Stop reading ahead, trimming nothing more."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.rounds.close()
        return ahead

    def _ahead_from(self, after: int) -> Rounds | None:
        """The rounds read ahead when their next one starts at ``after`` (the checkpoint is
        where the last round left it), else None (and the reading ahead stops)."""
        ahead = self._ahead
        if ahead is not None and ahead.after == after:
            self._ahead = None
            return ahead.rounds
        # Not where the round left it: nothing read ahead (nor its trim) is sure to fit.
        self._drop_ahead()
        return None

    def _apply_round(self, rounds: Rounds, checkpoint: Checkpoint) -> int | None:
        """Apply a round's steps up to its end, keep the rest read ahead; returns the round's
        resolved ts, or None when the steps end before their first (no round). Asked to stop,
        it ends the round after the steps in progress and returns how far they took the
        checkpoint (the rest stays staged for the next sink)."""
        try:
            return self._apply_steps(rounds, checkpoint)
        except BaseException:
            self._settle()
            raise

    def _apply_steps(self, rounds: Rounds, checkpoint: Checkpoint) -> int | None:
        started = False
        applied = checkpoint.resolved_ts
        for step in rounds.steps:
            started = True
            if isinstance(step, RoundEnd):
                self._drain()
                said = None if self._in_order is None else self._in_order.summary()
                if said:
                    log.info("round up to ts %s: %s", describe_tso(step.resolved), said)
                # Every batch before the end is applied: the thread may trim and read on.
                rounds.gate.applied(step.resolved)
                self._ahead = Ahead(step.resolved, rounds)
                return step.resolved
            if self._stop.is_set():
                rounds.close()
                applied = max(applied, self._drain() or 0)
                # A transaction's parts without their last: rolled back, read again later.
                self.target.abandon()
                log.info("stopping: the round ends at ts %s, the rest stays staged", applied)
                return applied
            if isinstance(step, DDLEvent):
                self._drain()
                offsets = self.staging.replay_offsets(step.commit_ts)
                self.target.apply_ddl(step, checkpoint, self.epoch, offsets)
                applied = step.commit_ts
            elif self._in_order is not None and not step.split:
                self._submit(self._in_order, step)
            else:
                self._drain()
                self.steps.apply(step)
                if not step.continued:
                    applied = step.upto
        if started:
            raise RuntimeError("the sink's rounds ended before the round did")
        return None

    def _submit(self, in_order: InOrder[int], batch: PlannedBatch) -> None:
        """Start ``batch`` on a free connection once no batch in flight meets its write set."""
        writes = write_set(batch.plans, self.target.router)

        def run(lane: int, turn: Turn) -> int:
            return self.steps.apply(batch, lane, turn)

        in_order.submit(writes, batch.upto, run)

    def _drain(self) -> int | None:
        """Wait for the batches in flight to commit; how far the last took the checkpoint."""
        return None if self._in_order is None else self._in_order.drain()

    def _settle(self) -> None:
        """After a failure: wait for the batches in flight (those before the failure commit),
        their own errors logged, not raised over the one that ended the round."""
        if self._in_order is None or not self._in_order.busy:
            return
        try:
            self._in_order.drain()
        except Exception as error:
            log.info("a batch in flight did not commit: %s", error)

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
