"""Where each partition stands, read from Redis: watermarks, the global resolved ts, progress.

The worker reads these for backpressure and quiet partitions, the sink for how far it may
release, ``ticdc-sink status`` for its table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from core.redis_client import RedisClient
from core.staging import scripts
from core.staging.keys import Keys, TopicPartition
from core.staging.layout import as_bytes, as_text, member_ts
from core.staging.retired import leaving

# Members one count script call reads: bounds how long it holds Redis.
COUNT_PAGE = 10_000


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """How far one partition is staged (see :meth:`WatermarkReader.progress`)."""

    staged_offset: int | None
    watermark: int | None
    # Whether it holds messages that wait for their schema (Simple DML).
    holding: bool
    # The highest commit ts among its staged (untrimmed) rows.
    highest_row_ts: int | None


def min_resolved(marks: dict[TopicPartition, int | None], held: dict[str, int]) -> int | None:
    """The global resolved ts: the smallest watermark, None while any partition has none or
    there is none. A partition holding a message (``held``: field -> its smallest commit ts)
    counts only up to just before it."""
    if not marks or any(mark is None for mark in marks.values()):
        return None
    return min(
        min(mark, held[tp.field] - 1 if tp.field in held else mark)
        for tp, mark in marks.items()
        if mark is not None
    )


@dataclass(frozen=True, slots=True)
class Standing:
    """The global resolved ts with retired topics' partitions left out (core/staging/retired.py),
    and what a gate checks before it takes it (spark_sink/topic_gate.py)."""

    resolved: int | None
    # The partition counts it was read over.
    counts: dict[str, int]
    # The partitions left out: each one's watermark (its topic's retirement ts) and staged offset.
    leaving: dict[TopicPartition, tuple[int, int | None]]


def past_retired(
    standing: Standing, ends: Mapping[TopicPartition, int]
) -> tuple[int | None, list[str]]:
    """The global resolved ts of ``standing`` once Kafka's log-end offsets ``ends`` of its
    leaving partitions are known (read after it): a leaving partition on which Kafka holds a
    message not staged counts at its watermark; one Kafka lacks (a deleted topic) stays out.
    Also the retired topics it leaves out, sorted."""
    behind = [
        tp
        for tp, (_, offset) in standing.leaving.items()
        if ends.get(tp, 0) > (-1 if offset is None else offset) + 1
    ]
    retired = sorted({tp.topic for tp in standing.leaving} - {tp.topic for tp in behind})
    if standing.resolved is None:
        return None, retired
    return min([standing.resolved, *(standing.leaving[tp][0] for tp in behind)]), retired


def _partitions_of(counts: dict[str, int]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, count in sorted(counts.items()) for p in range(count)]


class WatermarkReader:
    """Reads of one pipeline's progress."""

    def __init__(self, client: RedisClient, keys: Keys) -> None:
        self._client = client
        self.keys = keys
        self._count_rows = client.register_script(scripts.COUNT_ROWS)

    def partition_counts(self) -> dict[str, int]:
        """Topic -> partition count of every topic the pipeline consumes (as the workers
        recorded)."""
        counts = self._client.hgetall(self.keys.partitions)
        return {as_text(topic): int(count) for topic, count in counts.items()}

    def partitions(self) -> list[TopicPartition]:
        """Every partition of every topic the pipeline consumes (as the workers recorded)."""
        return _partitions_of(self.partition_counts())

    def watermarks(self) -> dict[TopicPartition, int | None]:
        """Every known partition's resolved ts (None: none seen yet)."""
        return self._watermarks_of(self.partitions())

    def _watermarks_of(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        raw = self._client.hgetall(self.keys.watermarks)
        return {
            tp: int(raw[tp.field.encode()], 16) if tp.field.encode() in raw else None
            for tp in partitions
        }

    def highest_watermark(self) -> int | None:
        """The highest watermark any partition of the pipeline has (None: none yet)."""
        return max(
            (int(mark, 16) for mark in self._client.hvals(self.keys.watermarks)), default=None
        )

    def global_resolved_ts(self) -> int | None:
        """The minimum watermark over every partition of every topic; None while any is unknown.

        A partition holding a message it cannot decode yet counts as resolved only up to just
        before that message's commit ts.
        """
        return self._resolved_of(self.partitions())

    def standing(self) -> Standing:
        """The global resolved ts over the recorded partitions but those of retired topics that
        stand at their retirement (:class:`Standing`): safe only once Kafka shows nothing
        unstaged on those."""
        counts = self.partition_counts()
        marks = self._watermarks_of(_partitions_of(counts))
        held = {
            as_text(field): int(ts, 16)
            for field, ts in self._client.hgetall(self.keys.held_ts).items()
        }
        pipe = self._client.pipeline(transaction=False)
        pipe.hgetall(self.keys.retired)
        pipe.hgetall(self.keys.dropped_databases)
        retired_raw, dropped_raw = pipe.execute()
        retired = {as_text(topic): int(ts, 16) for topic, ts in retired_raw.items()}
        dropped = {int(ts, 16): as_text(topic) for ts, topic in dropped_raw.items()}
        out = leaving(marks, held, retired, dropped) if retired or dropped else []
        kept = {tp: mark for tp, mark in marks.items() if tp not in out}
        resolved = min_resolved(kept, held)
        offsets = self._client.hmget(self.keys.offsets, [tp.field for tp in out]) if out else []
        return Standing(
            resolved,
            counts,
            {
                # Where it stands: its retirement's ts.
                tp: (int(marks[tp] or 0), None if offset is None else int(offset))
                for tp, offset in zip(out, offsets, strict=True)
            },
        )

    def _resolved_of(self, partitions: list[TopicPartition]) -> int | None:
        marks = self._watermarks_of(partitions)
        if not marks or any(mark is None for mark in marks.values()):
            return None
        held = {
            as_text(field): int(ts, 16)
            for field, ts in self._client.hgetall(self.keys.held_ts).items()
        }
        return min_resolved(marks, held)

    def releasable(self, resolved: int | Literal[False] | None = False) -> bool:
        """Whether staged changes wait that the sink can apply now: the global resolved ts (or
        ``resolved``, as the sink takes it) is past the last trim. When it is not, holding
        staging back frees nothing."""
        if resolved is False:
            resolved = self.global_resolved_ts()
        if resolved is None:
            return False
        trimmed = self._client.get(self.keys.trimmed)
        return resolved > (int(trimmed, 16) if trimmed else 0)

    def progress(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, PartitionProgress]:
        """Each partition's staged offset, watermark, holding state and highest staged row
        commit ts, in one round trip (what a worker looks at for quiet partitions)."""
        if not partitions:
            return {}
        fields = [tp.field for tp in partitions]
        pipe = self._client.pipeline(transaction=False)
        pipe.hmget(self.keys.offsets, fields)
        pipe.hmget(self.keys.watermarks, fields)
        pipe.hmget(self.keys.held_ts, fields)
        for tp in partitions:
            pipe.zrevrangebylex(self.keys.rows(tp), b"+", b"-", 0, 1)
        offsets, marks, held, *last_rows = pipe.execute()
        return {
            tp: PartitionProgress(
                None if offset is None else int(offset),
                None if mark is None else int(mark, 16),
                holding is not None,
                member_ts(last[0]) if last else None,
            )
            for tp, offset, mark, holding, last in zip(
                partitions, offsets, marks, held, last_rows, strict=True
            )
        }

    def staged_rows(self, tp: TopicPartition) -> int:
        """How many rows of ``tp`` are staged and not yet trimmed (a member holds a run of rows:
        its count is read, a page of members a call)."""
        rows = 0
        low = b"-"
        while True:
            members, counted, last = self._count_rows(
                keys=[self.keys.rows(tp)], args=[low, COUNT_PAGE]
            )
            rows += int(counted)
            if int(members) < COUNT_PAGE:
                return rows
            low = b"(" + as_bytes(last)
