"""Progress for a stream without watermarks: a partition read to its end and quiet is resolved.

TiCDC's Debezium encoder (tiflow c7b2588) writes no resolved events, so no partition's watermark
ever moves and the sink applies nothing. With ``TICDC_SINK_RESOLVE_WHEN_IDLE`` set, a worker takes
a partition that it has staged up to Kafka's log-end offset, and that has staged nothing new for
that long, as resolved up to the highest commit ts staged from it: TiCDC is assumed to have
written everything up to that ts once a partition has gone quiet at its end (see the README).

A quiet partition also follows the highest watermark another partition of the pipeline reached
the same way: TiCDC flushes a commit ts to every partition together, so a partition that got no
change of the stream's last transactions (rows dispatched by table) is done with them as well.
Without that, the lowest partition would hold every other one's last rows until its next change.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.staging import TopicPartition

# The longest a worker waits between two looks at its partitions: a quiet partition resolves
# at most this long after its quiet time is up.
IDLE_CHECK_MAX_S = 1.0
# The shortest: each look is a Redis round trip and a Kafka ListOffsets request.
IDLE_CHECK_MIN_S = 0.25


@dataclass(frozen=True, slots=True)
class IdleView:
    """What a worker knows of one of its partitions when it looks for quiet ones."""

    # The last Kafka offset staged in Redis (None: nothing staged yet).
    staged_offset: int | None
    # Kafka's log-end offset: the offset the next message written will get.
    end_offset: int | None
    # How long the staged offset has not moved, in seconds.
    quiet_s: float
    # The highest commit ts staged from the partition, rows and DDL (None: none).
    highest_ts: int | None
    # The partition's watermark in Redis (None: none yet).
    watermark: int | None
    # Whether it holds Simple messages waiting for their schema (its progress is capped).
    holding: bool
    # The highest watermark any partition of the pipeline has (None: none yet).
    pipeline_watermark: int | None = None


def idle_watermark(view: IdleView, idle_s: float) -> int | None:
    """The watermark a quiet partition moves to, or None to leave it where it is.

    Only a partition staged up to its log-end offset, quiet for ``idle_s`` seconds (0: off),
    holding nothing, moves, and only forward, to the highest commit ts staged from it or the
    pipeline's highest watermark, whichever is higher.
    """
    if idle_s <= 0 or view.holding:
        return None
    if view.staged_offset is None or view.end_offset is None:
        return None
    if view.staged_offset + 1 < view.end_offset or view.quiet_s < idle_s:
        return None
    target = max(
        (ts for ts in (view.highest_ts, view.pipeline_watermark) if ts is not None), default=None
    )
    if target is None or (view.watermark is not None and target <= view.watermark):
        return None
    return target


def idle_check_interval(idle_s: float) -> float:
    """How often to look for quiet partitions: twice per quiet time, within the bounds above."""
    return min(IDLE_CHECK_MAX_S, max(IDLE_CHECK_MIN_S, idle_s / 2))


class QuietClock:
    """How long each partition's staged offset has stayed where it is.

    A change is seen at the first look after it, so the time is never overstated.
    """

    def __init__(self) -> None:
        self._since: dict[TopicPartition, tuple[int | None, float]] = {}

    def quiet_for(self, tp: TopicPartition, staged_offset: int | None, now: float) -> float:
        """Seconds ``tp``'s staged offset has been ``staged_offset`` as of ``now`` (monotonic)."""
        seen = self._since.get(tp)
        if seen is None or seen[0] != staged_offset:
            self._since[tp] = (staged_offset, now)
            return 0.0
        return now - seen[1]
