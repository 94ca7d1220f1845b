"""The packed form of a row change: compact bytes that keep every value exact.

Workers stage rows in this form and the sink reads them back; a codec with a native fast path
produces it straight from the wire (``Codec.decode_packed``), byte for byte what :func:`pack_row`
makes of the row it decodes. msgpack keeps bytes apart from text and 64-bit integers exact.
A row that carries its upstream row id packs it as a ninth field; rows without one keep the
eight fields they were staged with before row ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

import msgpack

from core.model import ColumnType, Op, RowChange, column_type
from core.native import native_first, native_model

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
    """``row`` as msgpack of op, schema, table, columns, new, old, partition id, key-only, and
    the row id when it has one."""
    columns = [[name, kind.mysql_type, kind.flags] for name, kind in row.columns.items()]
    fields = [
        _OPS[row.op],
        row.schema,
        row.table,
        columns,
        row.new,
        row.old,
        row.partition_id,
        row.handle_key_only,
    ]
    if row.row_id is not None:
        fields.append(row.row_id)
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed


def pack_rows(rows: Iterable[RowChange]) -> list[tuple[int, bytes]]:
    """Each row as (commit ts, packed row), the form a codec's packed fast path returns."""
    return [(row.commit_ts, pack_row(row)) for row in rows]


def unpack_row(commit_ts: int, data: bytes) -> RowChange:
    """The row change :func:`pack_row` packed (the commit ts travels beside it)."""
    op, schema, table, columns, new, old, partition, key_only, *row_id = msgpack.unpackb(
        data, raw=False
    )
    if len(row_id) > 1:
        raise ValueError(f"a packed row has at most 9 fields, not {8 + len(row_id)}")
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
        row_id=row_id[0] if row_id else None,
    )


def row_reader(native: bool = True) -> Callable[[int, bytes], RowChange]:
    """:func:`unpack_row`, behind its native equal when built (and ``native``); each reader has
    its own cache of table layouts."""
    model = native_model(native)
    if model is None:
        return unpack_row
    from ticdc_sink_native import RowUnpacker

    return native_first(RowUnpacker(model, column_type).unpack, unpack_row)
