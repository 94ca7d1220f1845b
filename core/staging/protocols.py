"""What the stager and the sink's planning need of staging, as protocols: the Redis classes
(:class:`~core.staging.writer.StagingWriter`, :class:`~core.staging.area.Staging`) are one
implementation, in-memory fakes in the unit tests another."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from core.model import RowChange
from core.staging.framing import FramedMessage, StagedMessage
from core.staging.keys import TopicPartition
from core.staging.reader import Barrier
from core.staging.watermarks import PartitionProgress
from core.staging.writer import HeldMessage


class StagingRoundTrip(Protocol):
    """One batch's staging commands, sent together."""

    def stage(
        self, tp: TopicPartition, messages: Sequence[StagedMessage | FramedMessage]
    ) -> None: ...

    def hold(
        self, tp: TopicPartition, offset: int, key: bytes | None, value: bytes, commit_ts: int
    ) -> None: ...

    def dead_letter(
        self, tp: TopicPartition, offset: int, key: bytes | None, value: bytes | None, error: str
    ) -> None: ...

    def send(self) -> list[Any]: ...


class StagerStore(Protocol):
    """What the worker's stager reads and writes."""

    @property
    def pipeline(self) -> str: ...

    def batch(self) -> StagingRoundTrip: ...

    def staged_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]: ...

    def held_count(self) -> int: ...

    def progress(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, PartitionProgress]: ...

    def held(self) -> list[HeldMessage]: ...

    def stage_held(self, held: HeldMessage, rows: Sequence[RowChange]) -> None: ...

    def dead_letter_held(self, held: HeldMessage, error: str) -> None: ...

    def trim_dead_letters(self, max_entries: int) -> int: ...


class ReleaseSource(Protocol):
    """What the sink's planning reads: how far it may go, and the changes up to there."""

    def global_resolved_ts(self) -> int | None: ...

    def has_ddl_at(self, ts: int) -> bool: ...

    def release(self, after: int, upto: int) -> Iterator[RowChange | Barrier]: ...
