"""Partitions assigned to a worker but no longer fetched: behind their log end in Kafka, and
nothing staged from them for :data:`STALL_S` seconds while the worker's staging line was free.

Faust's consumer can keep a partition assigned and never deliver it again, with no error, after
a broker outage (seen once in CI after a Kafka restart; reported in faust-streaming/faust#523).
Nothing fails, so nothing would say so: the partition's watermark stops, the global resolved ts
with it, and the sink waits for ever. A worker that sees one logs it once, naming the partition
and its offsets; restarting the worker fetches it again (its partitions are assigned afresh).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from core.staging import TopicPartition

# How long a partition behind its log end may go without a message staged, the line free, before
# it is taken as no longer fetched: well past a fetch's wait and a rebalance.
STALL_S = 60.0
# How often a worker looks.
STALL_CHECK_S = 15.0


def behind(staged_offset: int | None, end_offset: int | None) -> bool:
    """Whether Kafka holds messages of a partition past the last one staged (``end_offset``:
    the offset the next message written gets)."""
    if end_offset is None:
        return False
    return end_offset > (0 if staged_offset is None else staged_offset + 1)


@dataclass(slots=True)
class _Seen:
    staged_offset: int | None
    since: float
    reported: bool = False


class StallClock:
    """How long each partition has been behind with its staged offset unmoved and the line
    free; a look that could not tell (Redis or Kafka away, the line stuck) starts every
    partition's time again."""

    def __init__(self) -> None:
        self._seen: dict[TopicPartition, _Seen] = {}

    def stalled(
        self, tp: TopicPartition, staged_offset: int | None, end_offset: int | None, now: float
    ) -> bool:
        """Whether ``tp`` has just become a stall: behind, at ``staged_offset``, for
        :data:`STALL_S` seconds as of ``now`` (monotonic). A stall is told once, until its
        staged offset moves."""
        seen = self._seen.get(tp)
        if (
            seen is None
            or seen.staged_offset != staged_offset
            or not behind(staged_offset, end_offset)
        ):
            self._seen[tp] = _Seen(staged_offset, now)
            return False
        if seen.reported or now - seen.since < STALL_S:
            return False
        seen.reported = True
        return True

    def keep(self, partitions: Collection[TopicPartition]) -> None:
        """Forget the partitions not assigned any more: one assigned again starts afresh."""
        for tp in [tp for tp in self._seen if tp not in partitions]:
            del self._seen[tp]

    def restart(self) -> None:
        """Forget every partition's time: the line was not free to take what was fetched."""
        self._seen.clear()
