"""The packed form of a row change: compact bytes that keep every value exact.

Workers stage rows in this form and the sink reads them back; a codec with a native fast path
produces it straight from the wire (``Codec.decode_packed``), byte for byte what :func:`pack_row`
makes of the row it decodes. msgpack keeps bytes apart from text and 64-bit integers exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

import msgpack

from streams.model import ColumnType, Op, RowChange, column_type
from streams.native import native_decoder

# The op codes, in the order the native decoders write them.
_OPS = {Op.INSERT: 0, Op.UPDATE: 1, Op.DELETE: 2}
_OPS_BACK = {code: op for op, code in _OPS.items()}


class PackedEvents(Protocol):
    """A message's rows already packed and its resolved timestamps, as a native decoder returns
    them: one object per message, a Python object per row only when :meth:`rows` is asked."""

    @property
    def resolved(self) -> list[int]:
        """The message's resolved timestamps."""

    def rows(self) -> list[tuple[int, bytes]]:
        """The rows as (commit ts, packed row), in message order."""

    def __len__(self) -> int:
        """How many rows."""


def pack_row(row: RowChange) -> bytes:
    """``row`` as msgpack of op, schema, table, columns, new, old, partition id, key-only."""
    columns = [[name, kind.mysql_type, kind.flags] for name, kind in row.columns.items()]
    return msgpack.packb(  # type: ignore[no-any-return]
        [
            _OPS[row.op],
            row.schema,
            row.table,
            columns,
            row.new,
            row.old,
            row.partition_id,
            row.handle_key_only,
        ],
        use_bin_type=True,
    )


def pack_rows(rows: Iterable[RowChange]) -> list[tuple[int, bytes]]:
    """Each row as (commit ts, packed row), the form a codec's packed fast path returns."""
    return [(row.commit_ts, pack_row(row)) for row in rows]


def unpack_row(commit_ts: int, data: bytes) -> RowChange:
    """The row change :func:`pack_row` packed (the commit ts travels beside it)."""
    op, schema, table, columns, new, old, partition, key_only = msgpack.unpackb(data, raw=False)
    kinds: dict[str, ColumnType] = {name: column_type(t, f) for name, t, f in columns}
    return RowChange(
        commit_ts,
        schema,
        table,
        _OPS_BACK[op],
        kinds,
        new,
        old,
        partition_id=partition,
        handle_key_only=key_only,
    )


def row_reader() -> Callable[[int, bytes], RowChange]:
    """:func:`unpack_row`, or its native equal (which hands it what it refuses) when built."""
    native = native_decoder("RowUnpacker", column_type, unpack_row)
    return native.unpack if native is not None else unpack_row
