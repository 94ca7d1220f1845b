"""A chunk of a transaction committed in chunks (``TICDC_SINK_SPLIT_LARGE_TXN``,
:mod:`spark_sink.split`), applied as a batch of its own (:meth:`BatchApplier.apply_recorded`: the
same loads, merge, retries and errors) with its position in the transaction recorded in the
chunk's downstream transaction instead of the checkpoint, and the leader's epoch in the
checkpoint so a stale leader's chunks are refused; and the last transaction, which advances the
checkpoint past the split transaction and clears its position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spark_sink.apply_batch import BatchApplier
from spark_sink.db.retries import with_retries
from spark_sink.db.split_position import SplitPosition, SplitPositionTable
from spark_sink.plan import TablePlan


class ChunkApplier:
    """Applies a split transaction's chunks through ``batches``, its position in ``positions``."""

    def __init__(self, batches: BatchApplier, positions: SplitPositionTable) -> None:
        self.batches = batches
        self.positions = positions

    def apply_chunk(self, plans: Sequence[TablePlan], position: SplitPosition, epoch: int) -> int:
        """Apply a chunk, recording ``position`` (where the chunk ends) with it, the checkpoint
        unmoved but for the leader's epoch; returns rows merged. A chunk too large raises
        :class:`~config.errors.BatchTooLargeError`."""
        checkpoints = self.batches.checkpoints

        def record(cursor: Any) -> None:
            checkpoints.fence(cursor, epoch)
            self.positions.record(cursor, position)

        def committed() -> bool:
            # A commit in doubt: the position (or the checkpoint) has reached the chunk's end.
            if self.batches.committed_upto(position.commit_ts):
                return True
            found = self.position()
            if found is None or found.commit_ts != position.commit_ts:
                return False
            return (found.pass_, found.done) >= (position.pass_, position.done)

        what = f"chunk ({position.describe()})"
        return self.batches.apply_recorded(plans, record, committed, what, position.commit_ts)

    def finish(self, commit_ts: int, epoch: int, offsets: dict[str, int]) -> None:
        """Advance the checkpoint past the split transaction at ``commit_ts`` (every chunk
        applied) and clear its position, in one transaction (both idempotent: retried)."""
        self.batches.abandon()
        connection = self.batches.connection

        def attempt() -> None:
            try:
                conn = connection.open()
                with conn.cursor() as cursor:
                    self.batches.checkpoints.advance(cursor, commit_ts, epoch, offsets)
                    self.positions.clear(cursor)
                conn.commit()
            except Exception:
                connection.drop()
                raise

        what = f"the end of the split transaction at {commit_ts}"
        with_retries(attempt, what, connection.dialect)

    def position(self) -> SplitPosition | None:
        """Where a split transaction is, when one is under way."""
        conn = self.batches.connection.open()
        with conn.cursor() as cursor:
            found = self.positions.read(cursor)
        conn.commit()
        return found
