"""The abstract codec every protocol implements, and the Kafka message it reads and writes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from core.model import Event
from core.native import native_first
from core.packed import PackedEvents

# A decoded message larger than this is refused: TiCDC's max-message-bytes tops out at 1 GiB and
# the default is 10 MiB, so 256 MiB leaves room while bounding memory for hostile input.
MAX_MESSAGE_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class KafkaMessage:
    """One Kafka record's key and value (the key is ``None`` where the protocol has none), and
    its topic where the protocol gives each table its own (Avro); None: the stream's topics."""

    key: bytes | None
    value: bytes
    topic: str | None = None


Messages = Sequence[tuple[bytes | None, bytes]]


class Packer(Protocol):
    """A native decoder that packs rows straight from the wire (``ticdc_sink_native``'s
    ``OpenDecoder`` and ``CraftDecoder``): None for each message its codec decides."""

    def decode(self, key: bytes | None, value: bytes) -> list[Event] | None:
        """One message's events, or None."""

    def decode_packed(self, key: object, value: object) -> PackedEvents | None:
        """One message's rows packed and its resolved timestamps, or None."""

    def decode_packed_many(
        self, messages: list[tuple[object, object]]
    ) -> Sequence[PackedEvents | None]:
        """:meth:`decode_packed` of each message, without the GIL."""


class Codec(ABC):
    """Decodes Kafka messages of one protocol into events, and encodes events the way TiCDC does."""

    protocol: ClassVar[str]
    # Whether what a message decodes to depends on the messages its partition carried before it
    # (Avro's tombstones take their commit ts from them): the worker then decodes each partition
    # with a codec of its own (:meth:`for_partition`), told where it stands (:meth:`follows`).
    partitioned: ClassVar[bool] = False

    def for_partition(self) -> Codec:
        """The codec that decodes one partition's messages, in order (this one, unless
        :attr:`partitioned`)."""
        return self

    def follows(self, commit_ts: int) -> None:
        """Tell a :attr:`partitioned` codec that its partition's changes up to ``commit_ts``
        came before what it reads next (the others ignore it)."""

    @abstractmethod
    def decode(self, key: bytes | None, value: bytes) -> list[Event]:
        """The events of one message, in message order; raises ``DecodeError`` on bad input."""

    def decode_packed(self, key: bytes | None, value: bytes) -> PackedEvents | None:
        """The message's rows already packed (see ``core.packed``) and its resolved
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


class PackingCodec(Codec):
    """A codec whose native decoder (when built) packs rows straight from the wire."""

    def __init__(self, native: Packer | None) -> None:
        self._native = native
        # The native decoder takes well-formed messages; what it hands back is decoded by the
        # codec's own ``decode``, where anything wrong raises its DecodeError.
        self.decode = native_first(  # type: ignore[method-assign,assignment]
            None if native is None else native.decode, self.decode
        )

    def decode_packed(self, key: bytes | None, value: bytes) -> PackedEvents | None:
        return None if self._native is None else self._native.decode_packed(key, value)

    def decode_packed_many(self, messages: Messages) -> list[PackedEvents | None]:
        if self._native is None:
            return [None] * len(messages)
        return list(self._native.decode_packed_many(list(messages)))
