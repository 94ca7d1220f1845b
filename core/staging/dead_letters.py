"""The dead-letter stream of a pipeline: messages that did not decode, kept in Redis with their
topic, partition, offset, key, value and the error, the oldest trimmed past a cap."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from core.resp import CommandBatch
from core.staging.keys import TopicPartition
from core.tso import utc_millis_time


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead-lettered Kafka message."""

    id: str
    tp: TopicPartition
    offset: int
    key: bytes
    value: bytes
    error: str

    @property
    def time(self) -> str:
        """When it was dead-lettered (a stream id starts with Redis's clock in ms)."""
        return utc_millis_time(int(self.id.split("-")[0]))

    def document(self) -> dict[str, Any]:
        """As JSON: key and value in base64 (they are whatever bytes did not decode)."""
        return {
            "id": self.id,
            "time": self.time,
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "offset": self.offset,
            "error": self.error,
            "key": base64.b64encode(self.key).decode(),
            "value": base64.b64encode(self.value).decode(),
        }


class DeadLetters:
    """A pipeline's dead-letter stream (``Keys.dead_letters``)."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client = client
        self.key = key

    def add(
        self,
        commands: CommandBatch,
        tp: TopicPartition,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        error: str,
    ) -> None:
        """Queue the message on ``commands`` (it goes with its batch's staging)."""
        commands.command(
            "XADD", self.key, "*", "topic", tp.topic, "partition", tp.partition, "offset",
            offset, "key", key or b"", "value", value or b"", "error", error,
        )  # fmt: skip

    def add_entries(self, entries: Sequence[dict[str, str]], max_entries: int) -> int:
        """Add entries (field -> text: rows the downstream refused, say) in one round trip, then
        keep the newest ``max_entries``; returns how many old ones went."""
        pipe = self.client.pipeline(transaction=False)
        for entry in entries:
            pipe.xadd(self.key, entry)  # type: ignore[arg-type]
        pipe.execute()
        return self.trim(max_entries)

    def trim(self, max_entries: int) -> int:
        """Delete the oldest entries past ``max_entries``; returns how many went."""
        return int(self.client.xtrim(self.key, maxlen=max_entries, approximate=False))

    def count(self) -> int:
        return int(self.client.xlen(self.key))

    def entries(self, limit: int | None = None, after: str = "-") -> list[DeadLetter]:
        """The oldest ``limit`` entries (all by default) from ``after`` on."""
        # redis-py types stream replies loosely: each entry is (id, {field: value}) in bytes.
        found: list[Any] = self.client.xrange(self.key, after, "+", count=limit)  # type: ignore[assignment]
        return [_letter(name, fields) for name, fields in found]

    def get(self, entry: str) -> DeadLetter | None:
        found: list[Any] = self.client.xrange(self.key, entry, entry)  # type: ignore[assignment]
        return _letter(*found[0]) if found else None

    def delete(self, entries: list[str]) -> int:
        return int(self.client.xdel(self.key, *entries)) if entries else 0

    def purge(self) -> int:
        """Delete every entry; returns how many there were."""
        pipe = self.client.pipeline()
        pipe.xlen(self.key)
        pipe.delete(self.key)
        count, _ = pipe.execute()
        return int(count)


def _letter(entry: bytes | str, fields: dict[bytes, bytes]) -> DeadLetter:
    name = entry.decode() if isinstance(entry, bytes) else entry
    return DeadLetter(
        name,
        TopicPartition(fields[b"topic"].decode(), int(fields[b"partition"])),
        int(fields[b"offset"]),
        fields.get(b"key", b""),
        fields.get(b"value", b""),
        fields.get(b"error", b"").decode(errors="replace"),
    )
