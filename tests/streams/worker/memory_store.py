"""An in-memory :class:`~core.staging.StagerStore`: what the stager's unit tests stage into.

It keeps what the stage script keeps (each partition's staged offset, a message at or below it
skipped) and nothing of Redis itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.model import RowChange
from core.staging import FramedMessage, HeldMessage, StagedMessage, TopicPartition
from core.staging.watermarks import PartitionProgress


@dataclass
class MemoryStore:
    pipeline: str = "memory"
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    # Per partition, every staged message's (offset, rows, highest mark) in staging order.
    staged: dict[TopicPartition, list[tuple[int, int, int | None]]] = field(default_factory=dict)
    held_messages: list[HeldMessage] = field(default_factory=list)
    late_rows: list[RowChange] = field(default_factory=list)
    dead: list[tuple[TopicPartition, int, str]] = field(default_factory=list)
    # Round trips still to fail (a Redis outage).
    failures: int = 0
    offset_reads: int = 0

    def batch(self) -> MemoryRoundTrip:
        return MemoryRoundTrip(self)

    def staged_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        self.offset_reads += 1
        return {tp: self.offsets[tp] for tp in partitions if tp in self.offsets}

    def held_count(self) -> int:
        return len(self.held_messages)

    def held(self) -> list[HeldMessage]:
        return list(self.held_messages)

    def stage_held(self, held: HeldMessage, rows: Sequence[RowChange]) -> None:
        self.held_messages.remove(held)
        self.late_rows += rows

    def dead_letter_held(self, held: HeldMessage, error: str) -> None:
        self.held_messages.remove(held)
        self.dead.append((held.tp, held.offset, error))

    def progress(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, PartitionProgress]:
        # Only a partitioned codec (Avro) asks, which these tests do not use.
        return {tp: PartitionProgress(self.offsets.get(tp), None, False, None) for tp in partitions}

    def trim_dead_letters(self, max_entries: int) -> int:
        extra = max(0, len(self.dead) - max_entries)
        del self.dead[:extra]
        return extra


@dataclass
class MemoryRoundTrip:
    store: MemoryStore
    queued: list[Any] = field(default_factory=list)

    def stage(self, tp: TopicPartition, messages: Sequence[StagedMessage | FramedMessage]) -> None:
        self.queued.append(("stage", tp, list(messages)))

    def hold(
        self, tp: TopicPartition, offset: int, key: bytes | None, value: bytes, commit_ts: int
    ) -> None:
        self.queued.append(("hold", HeldMessage(b"%d" % offset, tp, offset, key, value, commit_ts)))

    def dead_letter(
        self, tp: TopicPartition, offset: int, key: bytes | None, value: bytes | None, error: str
    ) -> None:
        self.queued.append(("dead", (tp, offset, error)))

    def send(self) -> list[Any]:
        if self.store.failures:
            self.store.failures -= 1
            raise ConnectionError("the round trip was cut")
        for kind, *args in self.queued:
            if kind == "hold":
                self.store.held_messages.append(args[0])
            elif kind == "dead":
                self.store.dead.append(args[0])
            else:
                tp, messages = args
                for message in messages:
                    # The stage script's replay check.
                    if message.offset <= self.store.offsets.get(tp, -1):
                        continue
                    self.store.offsets[tp] = message.offset
                    rows = message.rows if isinstance(message.rows, int) else len(message.rows)
                    mark = (
                        max(message.marks, default=None)
                        if isinstance(message, FramedMessage)
                        else message.watermark
                    )
                    self.store.staged.setdefault(tp, []).append((message.offset, rows, mark))
        return []
