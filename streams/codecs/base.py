"""The abstract codec every protocol implements, and the Kafka message it reads and writes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from streams.model import Event
from streams.packed import PackedEvents

# A decoded message larger than this is refused: TiCDC's max-message-bytes tops out at 1 GiB and
# the default is 10 MiB, so 256 MiB leaves room while bounding memory for hostile input.
MAX_MESSAGE_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class KafkaMessage:
    """One Kafka record's key and value (the key is ``None`` where the protocol has none)."""

    key: bytes | None
    value: bytes


Messages = Sequence[tuple[bytes | None, bytes]]


def packed_where(
    messages: Messages,
    eligible: Callable[[bytes | None, bytes], bool],
    decode_many: Callable[[Messages], list[PackedEvents | None]] | None,
) -> list[PackedEvents | None]:
    """``decode_many`` of the ``eligible`` messages, each result in its message's place; None
    for the others, and for all without ``decode_many`` (no native decoder): their codec
    decides."""
    if decode_many is None:
        return [None] * len(messages)
    taken = [i for i, (key, value) in enumerate(messages) if eligible(key, value)]
    out: list[PackedEvents | None] = [None] * len(messages)
    for i, events in zip(taken, decode_many([messages[i] for i in taken]), strict=True):
        out[i] = events
    return out


class Codec(ABC):
    """Decodes Kafka messages of one protocol into events, and encodes events the way TiCDC does."""

    protocol: ClassVar[str]

    @abstractmethod
    def decode(self, key: bytes | None, value: bytes) -> list[Event]:
        """The events of one message, in message order; raises ``DecodeError`` on bad input."""

    def decode_packed(self, key: bytes | None, value: bytes) -> PackedEvents | None:
        """The message's rows already packed (see ``streams.packed``) and its resolved
        timestamps, when a fast path takes a message of only those; otherwise None: call
        :meth:`decode`."""
        return None

    def decode_packed_many(self, messages: Messages) -> list[PackedEvents | None]:
        """:meth:`decode_packed` of each (key, value) message, which a native codec does for the
        whole batch without holding the GIL (safe to call from a thread)."""
        return [self.decode_packed(key, value) for key, value in messages]

    @abstractmethod
    def encode(self, events: Sequence[Event]) -> list[KafkaMessage]:
        """Messages carrying ``events`` in order, batched as TiCDC batches this protocol."""
