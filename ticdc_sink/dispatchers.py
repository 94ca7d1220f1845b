"""The partition a TiCDC changefeed gives a row event, for each of its partition dispatchers.

TiCDC's own consumer refuses a row found in another partition than its dispatcher gives, so a
stream `produce` writes must place rows exactly as TiCDC does (tiflow
``cdc/sink/dmlsink/mq/dispatcher/partition/``):

- ``table``: the hash of the schema and table names; every row of a table in one partition.
- ``index-value``: that hash combined with the hash of each handle-key column's name and value.
- ``ts``: the commit ts modulo the partition count.
- ``default``: the table dispatcher (TiCDC's default since old values are always sent).

The hash is tiflow's ``PositionInertia``: each write is the CRC-32 (IEEE) of its byte strings one
after the other, and the writes are combined by XOR from 0; the partition is that sum modulo the
partition count.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterable
from decimal import Decimal
from enum import StrEnum

from core.model import ColumnFlag, MySQLType, RowChange, Value

_HANDLE_KEY = int(ColumnFlag.HANDLE_KEY)


class Dispatcher(StrEnum):
    """The partition dispatchers of a TiCDC changefeed's ``dispatchers`` rules."""

    DEFAULT = "default"
    TABLE = "table"
    INDEX_VALUE = "index-value"
    TS = "ts"


def position_inertia(writes: Iterable[tuple[bytes, ...]]) -> int:
    """tiflow's PositionInertia sum over ``writes``, each one call of its ``Write``."""
    total = 0
    for write in writes:
        total ^= zlib.crc32(b"".join(write))
    return total


def value_bytes(value: Value, mysql_type: int) -> bytes:
    """The bytes of tiflow's ``model.ColumnValueString`` of the value TiCDC holds for ``value``.

    TiCDC holds integers, BIT, ENUM and SET as integers, FLOAT as a float32, DOUBLE as a
    float64, text as bytes and DECIMAL, dates, times and JSON as strings: the model holds the
    same, but for text as ``str``.
    """
    if value is None:
        return b"null"
    if isinstance(value, bytes):
        return value
    if isinstance(value, float):
        return _go_float(value, 32 if mysql_type == MySQLType.FLOAT else 64).encode()
    return str(value).encode()


def _go_float(value: float, bits: int) -> str:
    """Go's ``strconv.FormatFloat(v, 'f', -1, bits)``: the fewest digits that read back as the
    same float of that size, never an exponent."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    shortest = repr(value) if bits == 64 else _shortest_float32(value)
    return format(Decimal(shortest).normalize(), "f")


def _shortest_float32(value: float) -> str:
    single = struct.unpack("f", struct.pack("f", value))[0]
    for digits in range(1, 10):
        text = f"{single:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            return text
    return repr(single)


def partition_of(row: RowChange, partitions: int, dispatcher: Dispatcher) -> int:
    """The partition of ``partitions`` that TiCDC's ``dispatcher`` gives ``row``."""
    if dispatcher is Dispatcher.TS:
        return row.commit_ts % partitions
    writes = [(row.schema.encode(), row.table.encode())]
    if dispatcher is Dispatcher.INDEX_VALUE:
        # TiCDC reads the new image, and a delete's old one.
        image = row.new if row.new else (row.old or {})
        writes += [
            (name.encode(), value_bytes(image[name], kind.mysql_type))
            for name, kind in row.columns.items()
            if kind.flags & _HANDLE_KEY and name in image
        ]
    return position_inertia(writes) % partitions
