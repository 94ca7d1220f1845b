"""Native fast paths for ticdc-sink's codecs and staged rows.

One convention (``core/native.py``): each class is made with a ``Model`` and what it caches or
reads passed explicitly; each method takes what its Python twin takes and returns None for what
it hands back to that twin, which decides (and words every error).
"""

from collections.abc import Callable
from typing import Any

from core.model import ColumnType, Event, RowChange

# ``column_type(mysql_type, flags)``: the shared column type of a pair.
ColumnTypeOf = Callable[[int, int], ColumnType]

# What Python calls of the module (``core.native.API_VERSION``) and the member layout it writes
# and reads (``core.staging.layout.LAYOUT_VERSION``): core/native.py declines another.
API_VERSION: int
STAGING_LAYOUT_VERSION: int

class PackedMessage:
    """A message's packed rows and resolved timestamps (``core.packed.PackedEvents``)."""

    @property
    def resolved(self) -> list[int]: ...
    def rows(self) -> list[tuple[int, bytes]]: ...
    def __len__(self) -> int: ...

def stage_frames(
    messages: list[tuple[int, PackedMessage]],
) -> list[tuple[int, bytes, bytes, int]]:
    """Each (offset, message)'s staging-script arguments (their count and RESP encoding), its
    row members as ZADD score/member pairs, and how many members."""

def csv_rows(
    images: list[dict[str, Any]],
    names: list[str],
    binary: list[bool],
    flags: list[int] | None = None,
) -> tuple[bytes, list[bool]]:
    """``spark_sink.load.csv_rows.python_csv_rows``: the images' CSV and which columns went as
    hex."""

class Model:
    """The event model the classes build: ``RowChange``, ``Resolved`` and the row ops."""

    def __init__(
        self, row: type, resolved: type, insert: object, update: object, delete: object
    ) -> None: ...

class OpenDecoder:
    """Open Protocol messages of rows and resolved events."""

    def __init__(self, model: Model, column_type: ColumnTypeOf, max_bytes: int) -> None: ...
    def decode(self, key: object, value: object) -> list[Event] | None: ...
    def decode_packed(self, key: object, value: object) -> PackedMessage | None: ...
    def decode_packed_many(
        self, messages: list[tuple[object, object]]
    ) -> list[PackedMessage | None]: ...

class CraftDecoder:
    """Craft messages (the key is unused)."""

    def __init__(self, model: Model, column_type: ColumnTypeOf, max_bytes: int) -> None: ...
    def decode(self, key: object, value: object) -> list[Event] | None: ...
    def decode_packed(self, key: object, value: object) -> PackedMessage | None: ...
    def decode_packed_many(
        self, messages: list[tuple[object, object]]
    ) -> list[PackedMessage | None]: ...

class SimpleDecoder:
    """Simple JSON DML and watermarks of tables whose layout the Python codec made (``layouts``:
    its own dict of (schema, table, version) to {column: (column type, reader, limit)}, the
    limit a ``streams.codecs.limits.Limit`` or None)."""

    def __init__(
        self,
        model: Model,
        readers: tuple[Any, Any, Any, Any, Any],
        layouts: dict[Any, Any],
        max_bytes: int,
    ) -> None: ...
    def decode(self, key: object, value: object) -> list[Event] | None: ...

class RowUnpacker:
    """Staged rows in the packed form (``core.packed.unpack_row``)."""

    def __init__(self, model: Model, column_type: ColumnTypeOf) -> None: ...
    def unpack(self, commit_ts: int, data: bytes) -> RowChange | None: ...
    def unpack_members(
        self, members: list[bytes], start: int, stop: int, copies: Any
    ) -> tuple[list[RowChange], int]: ...
