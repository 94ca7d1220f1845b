"""One planned batch applied: its unplannable changes dead-lettered, the rows the downstream
refuses dead-lettered (or the sink stopped, as ``TICDC_SINK_ON_ROW_ERROR`` says), a transaction's
parts counted until its last commits, each commit logged and measured. The loop
(:mod:`spark_sink.loop`) calls it on its own thread, and the connections applying beside each
other (:mod:`spark_sink.in_order`) on theirs."""

from __future__ import annotations

import logging
import threading
import time

from config.errors import RowRefusedError
from config.settings import OnRowError, Settings
from core.staging import Staging
from core.tso import describe_tso, tso_age
from spark_sink.batches import PlannedBatch
from spark_sink.dead_letters import add_dead_letters
from spark_sink.in_order import Turn
from spark_sink.metrics import record_batch
from spark_sink.refused import RefusedRow, without_refused
from spark_sink.stuck import StuckWatch
from spark_sink.target import Target
from spark_sink.unplannable import dead_letter_all

log = logging.getLogger("ticdc_sink.sink")


class BatchSteps:
    """Applies the loop's planned batches to ``target`` as the leader of ``epoch``."""

    def __init__(self, settings: Settings, staging: Staging, target: Target, epoch: int) -> None:
        self.settings = settings
        self.staging = staging
        self.target = target
        self.epoch = epoch
        self.applied_rows = 0
        self._counted = threading.Lock()
        # The changes of a transaction's parts applied so far, and when its first part started:
        # counted as one batch when its last part commits.
        self._part_changes = 0
        self._parts_started = 0.0
        # Such a transaction going back to the checkpoint again and again: named once.
        self._stuck = StuckWatch()

    def apply(self, batch: PlannedBatch, lane: int = 0, turn: Turn | None = None) -> int:
        """Apply ``batch`` on the connection of ``lane``, committing once its ``turn`` comes
        (right away without one); returns the rows merged."""
        started = time.perf_counter()
        offsets = self.staging.replay_offsets(batch.upto)
        # Before the batch commits, as refused rows: a crash in between finds them again.
        dead_letter_all(
            self.staging,
            self.settings.group,
            batch.unplannable,
            self.settings.redis.dead_letter_max_entries,
        )
        if batch.split:
            return self._apply_part(batch, offsets, started)
        while True:
            try:
                merged = self.target.apply_batch(
                    batch.plans, batch.upto, self.epoch, offsets, lane, turn
                )
                break
            except RowRefusedError as refused:
                if self.settings.sink.on_row_error is OnRowError.STOP:
                    raise
                # Dead-lettered before the batch commits: a crash in between redoes the batch,
                # which finds (and dead-letters) the same rows again.
                rows: list[RefusedRow] = refused.rows
                add_dead_letters(
                    self.staging,
                    self.settings.group,
                    [(row.dead_letter(), row.describe()) for row in rows],
                    self.settings.redis.dead_letter_max_entries,
                )
                without_refused(batch.plans, rows)
        self._count(merged)
        elapsed = time.perf_counter() - started
        record_batch(self.settings.group, batch.changes, elapsed, batch.upto)
        log.info(
            "applied %d changes in %.3f s; resolved ts %s, %.1f s behind",
            batch.changes,
            elapsed,
            describe_tso(batch.upto),
            tso_age(batch.upto),
        )
        return merged

    def _apply_part(self, batch: PlannedBatch, offsets: dict[str, int], started: float) -> int:
        """A part of a transaction larger than a chunk. A row the downstream refuses in it
        stops the sink even under ``deadletter``: the parts before it are rolled back and
        gone from memory, so the rest of the transaction could not go on without them."""
        if not batch.joins:
            self._part_changes, self._parts_started = 0, started
        try:
            merged = self.target.apply_part(
                batch.plans, batch.upto, self.epoch, offsets, batch.joins, batch.continued
            )
        except Exception as error:
            stuck = self._stuck.failed(batch.upto, self._part_changes + batch.changes, error)
            if stuck:
                log.warning("%s", stuck)
            raise
        self._count(merged)
        self._part_changes += batch.changes
        elapsed = time.perf_counter() - started
        if batch.continued:
            log.info(
                "applied part %d (%d changes) of the transaction at ts %s in %.3f s; "
                "not committed until its last part",
                batch.part + 1,
                batch.changes,
                describe_tso(batch.upto),
                elapsed,
            )
            return merged
        self._stuck.committed(batch.upto)
        record_batch(
            self.settings.group,
            self._part_changes,
            time.perf_counter() - self._parts_started,
            batch.upto,
        )
        log.info(
            "applied the last part %d (%d changes) of the transaction at ts %s in %.3f s; "
            "committed, resolved ts %s",
            batch.part + 1,
            batch.changes,
            describe_tso(batch.upto),
            elapsed,
            describe_tso(batch.upto),
        )
        return merged

    def _count(self, merged: int) -> None:
        with self._counted:
            self.applied_rows += merged
