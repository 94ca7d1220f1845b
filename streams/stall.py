"""Partitions a worker holds but no longer fetches: behind their log end in Kafka, with the
worker's staging line idle, and nothing staged from them for :data:`STALL_S` seconds.

Faust's consumer can keep a partition assigned and never fetch it again after a broker restart
or a rebalance cut short (faust-streaming/faust#629 and its kin in other Kafka clients). Nothing
fails, so nothing would say so: the partition's watermark stops, the global resolved ts with it,
and the sink waits for ever. A worker that sees one says so and fetches the partition again from
the offset after the last one staged (``Timers.refetch_stalled``).
"""

from __future__ import annotations

from core.staging import TopicPartition

# How long a partition behind its log end may go without a message staged, while the line has
# nothing to do, before it is taken as no longer fetched: well past a fetch's wait and a
# rebalance, so a partition merely slow is never touched.
STALL_S = 60.0
# How often a worker looks.
STALL_CHECK_S = 15.0


def behind(staged_offset: int | None, end_offset: int | None) -> bool:
    """Whether Kafka holds messages of a partition past the last one staged (``end_offset``:
    the offset the next message written gets)."""
    if end_offset is None:
        return False
    return end_offset > (0 if staged_offset is None else staged_offset + 1)


class StallClock:
    """How long each partition has been behind with its staged offset unmoved and the worker
    free to fetch it; a look that could not tell (Redis or Kafka away, the line busy) starts
    every partition's time again."""

    def __init__(self) -> None:
        self._since: dict[TopicPartition, tuple[int | None, float]] = {}

    def stalled(
        self, tp: TopicPartition, staged_offset: int | None, end_offset: int | None, now: float
    ) -> bool:
        """Whether ``tp`` has been behind, at ``staged_offset``, for :data:`STALL_S` seconds as
        of ``now`` (monotonic); one that is starts its time again, so it is reported once a
        :data:`STALL_S`."""
        seen = self._since.get(tp)
        if not behind(staged_offset, end_offset) or seen is None or seen[0] != staged_offset:
            self._since[tp] = (staged_offset, now)
            return False
        if now - seen[1] < STALL_S:
            return False
        self._since[tp] = (staged_offset, now)
        return True

    def restart(self) -> None:
        """Forget every partition's time: the worker was not free to fetch."""
        self._since.clear()
