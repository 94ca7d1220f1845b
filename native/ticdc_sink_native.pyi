"""Native fast paths for ticdc-sink's codecs: each returns None where the Python codec decides."""

from collections.abc import Callable
from typing import Any

class PackedMessage:
    """A message's packed rows and resolved timestamps (``streams.packed.PackedEvents``)."""

    @property
    def resolved(self) -> list[int]: ...
    def rows(self) -> list[tuple[int, bytes]]: ...
    def __len__(self) -> int: ...

def stage_frames(
    messages: list[tuple[int, PackedMessage]],
) -> list[tuple[int, bytes, bytes]]:
    """Each (offset, message)'s staging-script arguments (their count and RESP encoding) and
    its rows as ZADD score/member pairs."""

class Model:
    """The event model the decoders build: ``RowChange``, ``Resolved`` and the row ops."""

    def __init__(
        self, row: type, resolved: type, insert: object, update: object, delete: object
    ) -> None: ...

class OpenDecoder:
    def __init__(self, model: Model) -> None: ...
    def decode(
        self, key: bytes, value: bytes, kinds: dict[int, tuple[Any, ...]]
    ) -> list[Any] | None: ...
    def decode_packed(self, key: bytes, value: bytes) -> PackedMessage | None: ...
    def decode_packed_many(
        self, messages: list[tuple[bytes, bytes]]
    ) -> list[PackedMessage | None]: ...

class CraftDecoder:
    def __init__(self, model: Model, column_type: Any) -> None: ...
    def decode(self, value: bytes) -> list[Any] | None: ...
    def decode_packed(self, value: bytes) -> PackedMessage | None: ...
    def decode_packed_many(self, values: list[bytes]) -> list[PackedMessage | None]: ...

class SimpleDecoder:
    def __init__(
        self,
        model: Model,
        readers: tuple[Any, Any, Any, Any, Any],
        layouts: dict[Any, Any],
        fallback: Callable[[bytes | None, bytes], list[Any]],
        max_bytes: int,
    ) -> None: ...
    def decode(self, key: bytes | None, value: bytes) -> list[Any]: ...
    def try_decode(self, value: object) -> list[Any] | None: ...
