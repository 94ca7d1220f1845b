"""The dead-letter stream of a pipeline: one stream, two kinds of letter, the oldest trimmed
past a cap.

- ``message``: a Kafka message the worker could not decode, with its topic, partition, offset,
  key, value and the error;
- ``row``: a row the downstream refused (``TICDC_SINK_ON_ROW_ERROR=deadletter``), written by the
  sink with its table, key, column, commit ts, error and the row, and what the downstream held
  for that key when it refused it (``before``: a row letter is written downstream by hand only
  while that is still so); or a staged change the sink cannot apply
  (``spark_sink/unplannable.py``), with the topic, partition and offset of its message when
  found, named as a message letter names them.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from core.redis_client import RedisClient
from core.resp import CommandBatch
from core.staging.keys import TopicPartition
from core.tso import utc_millis_time


class LetterKind(StrEnum):
    """What a dead letter holds (its ``kind`` field)."""

    MESSAGE = "message"
    ROW = "row"


def _time(entry: str) -> str:
    """When an entry was dead-lettered (a stream id starts with Redis's clock in ms)."""
    return utc_millis_time(int(entry.split("-")[0]))


@dataclass(frozen=True, slots=True)
class MessageLetter:
    """One dead-lettered Kafka message."""

    id: str
    tp: TopicPartition
    offset: int
    key: bytes
    value: bytes
    error: str
    kind = LetterKind.MESSAGE

    @property
    def time(self) -> str:
        return _time(self.id)

    @property
    def where(self) -> str:
        """What it is, in a listing's few characters."""
        return f"{self.tp.field}@{self.offset} {len(self.value)} B"

    def document(self) -> dict[str, Any]:
        """As JSON: key and value in base64 (they are whatever bytes did not decode)."""
        return {
            "id": self.id,
            "kind": self.kind.value,
            "time": self.time,
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "offset": self.offset,
            "error": self.error,
            "key": base64.b64encode(self.key).decode(),
            "value": base64.b64encode(self.value).decode(),
        }


# The fields of a row letter whose text is JSON (the rest is text as it is).
_ROW_JSON = ("key", "row", "before")


@dataclass(frozen=True, slots=True)
class RowLetter:
    """One row the downstream refused, or a staged change the sink cannot apply. ``key`` and
    ``row`` are JSON text as the sink wrote them (bytes as ``{"hex": ...}``); ``target`` is the
    downstream table, quoted; ``before`` the downstream's row for the key when it refused this
    one (JSON text, ``null``: none), None when not recorded (a table without a key). ``tp`` and
    ``offset``: the Kafka message of a staged change the sink cannot apply, None when not
    recorded (a refused row) or not found."""

    id: str
    table: str
    key: str
    column: str
    commit_ts: int
    error: str
    row: str
    target: str
    before: str | None
    tp: TopicPartition | None = None
    offset: int | None = None
    kind = LetterKind.ROW

    @property
    def time(self) -> str:
        return _time(self.id)

    @property
    def message(self) -> str | None:
        """Its Kafka message as ``<topic>:<partition>@<offset>``, when recorded."""
        return None if self.tp is None else f"{self.tp.field}@{self.offset}"

    @property
    def where(self) -> str:
        message = "" if self.message is None else f" from {self.message}"
        return f"{self.table} {self.key} @{self.commit_ts}{message}"

    def document(self) -> dict[str, Any]:
        """As JSON, the key, row and prior row as the objects they are."""
        document: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind.value,
            "time": self.time,
            "table": self.table,
            "target": self.target,
            "column": self.column,
            "commit_ts": self.commit_ts,
            "error": self.error,
        }
        for name in _ROW_JSON:
            text = getattr(self, name)
            document[name] = None if text is None else orjson.loads(text)
        if self.before is None:
            del document["before"]
        if self.tp is not None:
            document |= {
                "topic": self.tp.topic,
                "partition": self.tp.partition,
                "offset": self.offset,
            }
        return document


DeadLetter = MessageLetter | RowLetter


class DeadLetters:
    """A pipeline's dead-letter stream (``Keys.dead_letters``)."""

    def __init__(self, client: RedisClient, key: str) -> None:
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
            "XADD", self.key, "*", "kind", LetterKind.MESSAGE.value, "topic", tp.topic,
            "partition", tp.partition, "offset", offset, "key", key or b"", "value", value or b"",
            "error", error,
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
        pipe = self.client.pipeline(transaction=True)
        pipe.xlen(self.key)
        pipe.delete(self.key)
        count, _ = pipe.execute()
        return int(count)


def _letter(entry: bytes | str, fields: dict[bytes, bytes]) -> DeadLetter:
    name = entry.decode() if isinstance(entry, bytes) else entry
    kind = fields.get(b"kind", b"message" if b"topic" in fields else b"row").decode()

    def text(field: str) -> str:
        return fields.get(field.encode(), b"").decode(errors="replace")

    if kind == LetterKind.ROW:
        before = fields.get(b"before")
        recorded = b"offset" in fields
        return RowLetter(
            name,
            text("table"),
            text("key"),
            text("column"),
            int(fields.get(b"commit_ts", b"0")),
            text("error"),
            text("row"),
            text("target"),
            None if before is None else before.decode(),
            TopicPartition(text("topic"), int(fields[b"partition"])) if recorded else None,
            int(fields[b"offset"]) if recorded else None,
        )
    return MessageLetter(
        name,
        TopicPartition(text("topic"), int(fields[b"partition"])),
        int(fields[b"offset"]),
        fields.get(b"key", b""),
        fields.get(b"value", b""),
        text("error"),
    )
