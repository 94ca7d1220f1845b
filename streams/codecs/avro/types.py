"""How TiCDC's Avro protocol types a column (tiflow pkg/sink/codec/avro, ``columnToAvroSchema``
and ``columnToAvroData``), both ways: a column's Avro field from its model type, and a model
value from what fastavro reads.

TiCDC names a column's TiDB type in the field's ``connect.parameters.tidb_type``: ``INT`` (TINYINT
to INT, one name), ``BIGINT``, either with `` UNSIGNED``, ``FLOAT``, ``DOUBLE``, ``BIT``,
``DECIMAL``, ``TEXT`` (every CHAR/VARCHAR/TEXT), ``BLOB`` (their binary forms), ``ENUM``, ``SET``,
``JSON``, ``DATE``, ``DATETIME``, ``TIMESTAMP``, ``TIME``, ``YEAR``. So a decoded column's MySQL
type is the one type each name stands for (INT is a LONG, TEXT a VARCHAR, BLOB a LONG_BLOB), as
TiCDC's own decoder reads it back. Values: DECIMAL is ``bytes`` with ``logicalType: decimal`` at
the column's precision and scale (``avro-decimal-handling-mode=precise``, TiCDC's default) or its
text (``string``); BIGINT UNSIGNED is the ``long`` of the same 64 bits (``long``, the default) or
its decimal text (``string``); ENUM and SET are their member names, the members listed in
``connect.parameters.allowed``; BIT is its big-endian bytes; dates and times are TiDB's text, or
with ``avro-time-precision-handling-mode=adaptive_time_microseconds`` (later TiCDC) DATE the days
since 1970 and DATETIME and TIME milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any

from config.errors import EncodeError, shown
from core.model import ColumnFlag, ColumnType, MySQLType, Value, column_type
from streams.codecs.values import format_float

TIDB_TYPE = "tidb_type"
PARAMETERS = "connect.parameters"
MASK64 = (1 << 64) - 1
# TiCDC writes every DECIMAL at MySQL's widest precision when the column names none; the
# project's encoder, which knows no column's precision, uses it always.
MAX_PRECISION = 65


class DecimalMode(StrEnum):
    """``avro-decimal-handling-mode``."""

    PRECISE = "precise"
    STRING = "string"


class BigintUnsignedMode(StrEnum):
    """``avro-bigint-unsigned-handling-mode``."""

    LONG = "long"
    STRING = "string"


_KIND_OF_TIDB_TYPE: dict[str, tuple[MySQLType, int]] = {
    "INT": (MySQLType.LONG, 0),
    "INT UNSIGNED": (MySQLType.LONG, int(ColumnFlag.UNSIGNED)),
    "BIGINT": (MySQLType.LONGLONG, 0),
    "BIGINT UNSIGNED": (MySQLType.LONGLONG, int(ColumnFlag.UNSIGNED)),
    "FLOAT": (MySQLType.FLOAT, 0),
    "DOUBLE": (MySQLType.DOUBLE, 0),
    "BIT": (MySQLType.BIT, 0),
    "DECIMAL": (MySQLType.NEWDECIMAL, 0),
    "TEXT": (MySQLType.VARCHAR, 0),
    "BLOB": (MySQLType.LONG_BLOB, int(ColumnFlag.BINARY)),
    "ENUM": (MySQLType.ENUM, 0),
    "SET": (MySQLType.SET, 0),
    "JSON": (MySQLType.JSON, 0),
    "DATE": (MySQLType.DATE, 0),
    "DATETIME": (MySQLType.DATETIME, 0),
    "TIMESTAMP": (MySQLType.TIMESTAMP, 0),
    "TIME": (MySQLType.DURATION, 0),
    "YEAR": (MySQLType.YEAR, 0),
}
_TIDB_TYPE_OF: dict[int, str] = {
    MySQLType.TINY: "INT",
    MySQLType.SHORT: "INT",
    MySQLType.INT24: "INT",
    MySQLType.LONG: "INT",
    MySQLType.LONGLONG: "BIGINT",
    MySQLType.FLOAT: "FLOAT",
    MySQLType.DOUBLE: "DOUBLE",
    MySQLType.BIT: "BIT",
    MySQLType.NEWDECIMAL: "DECIMAL",
    MySQLType.TINY_BLOB: "TEXT",
    MySQLType.MEDIUM_BLOB: "TEXT",
    MySQLType.BLOB: "TEXT",
    MySQLType.LONG_BLOB: "TEXT",
    MySQLType.VARCHAR: "TEXT",
    MySQLType.VAR_STRING: "TEXT",
    MySQLType.STRING: "TEXT",
    MySQLType.ENUM: "ENUM",
    MySQLType.SET: "SET",
    MySQLType.JSON: "JSON",
    MySQLType.DATE: "DATE",
    MySQLType.NEWDATE: "DATE",
    MySQLType.DATETIME: "DATETIME",
    MySQLType.TIMESTAMP: "TIMESTAMP",
    MySQLType.DURATION: "TIME",
    MySQLType.YEAR: "YEAR",
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# A reader takes what fastavro read for a non-null value and gives the model's value.
Reader = Callable[[Any], Value]


@dataclass(frozen=True, slots=True)
class FieldPlan:
    """How one column of a record is read: its name, model type and, where fastavro's value is
    not already the model's, the reader that converts it."""

    name: str
    kind: ColumnType
    reader: Reader | None


def tidb_type(kind: ColumnType) -> str:
    """The ``tidb_type`` TiCDC writes for a column (``EncodeError`` for a type it cannot carry)."""
    name = _TIDB_TYPE_OF.get(kind.mysql_type)
    if name is None:
        raise EncodeError(f"avro: TiCDC's Avro protocol carries no MySQL type {kind.mysql_type}")
    if kind.is_unsigned and name in ("INT", "BIGINT"):
        return name + " UNSIGNED"
    if kind.is_binary and name == "TEXT":
        return "BLOB"
    return name


def carried_type(kind: ColumnType) -> ColumnType:
    """The model type a column decodes to after TiCDC's Avro protocol has carried it."""
    mysql_type, flags = _KIND_OF_TIDB_TYPE[tidb_type(kind)]
    keep = int(ColumnFlag.NULLABLE | ColumnFlag.HANDLE_KEY)
    return column_type(mysql_type, flags | (kind.flags & keep))


def kind_of(name: str, tidb: str, nullable: bool) -> ColumnType:
    """A decoded column's model type from its ``tidb_type`` (``ValueError`` naming an unknown
    one)."""
    found = _KIND_OF_TIDB_TYPE.get(tidb)
    if found is None:
        raise ValueError(f"column {name!r} has tidb_type {tidb!r}, which TiCDC does not write")
    mysql_type, flags = found
    return column_type(mysql_type, flags | (int(ColumnFlag.NULLABLE) if nullable else 0))


def allowed_members(text: str) -> tuple[str, ...]:
    """ENUM or SET members from ``allowed``: TiCDC joins them with ``,`` after writing a comma
    inside a member as ``\\,``."""
    if not text:
        return ()
    return tuple(part.replace("\\,", ",") for part in re.split(r"(?<!\\),", text))


# --- decoding: what fastavro read -> the model's value --------------------------------------


def _unsigned_long(raw: Any) -> Value:
    return int(raw) & MASK64


def _unsigned_text(raw: Any) -> Value:
    if raw.__class__ is not str or not raw.isascii() or not raw.isdigit():
        raise ValueError(f"BIGINT UNSIGNED text {shown(raw)} is not a decimal number")
    number = int(raw)
    if number > MASK64:
        raise ValueError(f"BIGINT UNSIGNED text {shown(raw)} is out of range")
    return number


def _float32(raw: Any) -> Value:
    return float(format_float(raw, single=True))


def _bits(raw: Any) -> Value:
    if len(raw) > 8:
        raise ValueError(f"BIT value of {len(raw)} bytes is wider than 64 bits")
    return int.from_bytes(raw, "big")


def _decimal(raw: Any) -> Value:
    return format(raw, "f")


def _date_days(raw: Any) -> Value:
    return (_EPOCH + timedelta(days=raw)).date().isoformat()


def _datetime_millis(raw: Any) -> Value:
    moment = _EPOCH + timedelta(milliseconds=raw)
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{moment.microsecond // 1000:03d}" if moment.microsecond else text


def _time_millis(raw: Any) -> Value:
    sign = "-" if raw < 0 else ""
    seconds, millis = divmod(abs(raw), 1000)
    text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return f"{text}.{millis:03d}" if millis else text


def _enum_reader(members: tuple[str, ...]) -> Reader:
    index = {member: number for number, member in enumerate(members, 1)}

    def read(raw: Any) -> Value:
        if raw == "":
            return 0
        found = index.get(raw)
        if found is None:
            raise ValueError(f"ENUM value {shown(raw)} is not one of its members")
        return found

    return read


def _set_reader(members: tuple[str, ...]) -> Reader:
    bits = {member: 1 << number for number, member in enumerate(members)}

    def read(raw: Any) -> Value:
        value = 0
        if raw == "":
            return value
        for member in raw.split(","):
            bit = bits.get(member)
            if bit is None:
                raise ValueError(f"SET value {shown(raw)} names {shown(member)}, not a member")
            value |= bit
        return value

    return read


def reader_for(kind: ColumnType, avro_type: dict[str, Any]) -> Reader | None:
    """The reader of a column whose (non-null) Avro type is ``avro_type``, or None where
    fastavro's value is the model's as it is (ints, doubles, text, bytes, TiDB's time text)."""
    primitive = avro_type.get("type")
    mysql_type = kind.mysql_type
    if mysql_type == MySQLType.LONGLONG and kind.is_unsigned:
        return _unsigned_text if primitive == "string" else _unsigned_long
    if mysql_type == MySQLType.FLOAT:
        return _float32
    if mysql_type == MySQLType.BIT:
        return _bits
    if mysql_type == MySQLType.NEWDECIMAL and avro_type.get("logicalType") == "decimal":
        return _decimal
    if mysql_type in (MySQLType.ENUM, MySQLType.SET):
        members = allowed_members(avro_type.get(PARAMETERS, {}).get("allowed", ""))
        return _enum_reader(members) if mysql_type == MySQLType.ENUM else _set_reader(members)
    if primitive == "int" and mysql_type == MySQLType.DATE:
        return _date_days
    if primitive == "long" and mysql_type == MySQLType.DATETIME:
        return _datetime_millis
    if primitive == "long" and mysql_type == MySQLType.DURATION:
        return _time_millis
    return None


def expected_primitive(kind: ColumnType, avro_type: dict[str, Any]) -> bool:
    """Whether ``avro_type`` is one TiCDC writes for a column of ``kind``: a schema that types
    a column otherwise was not written by TiCDC, and its values would decode to nonsense."""
    primitive = avro_type.get("type")
    allowed = _PRIMITIVES.get(kind.mysql_type, ())
    if kind.mysql_type == MySQLType.LONG and kind.is_unsigned:
        # TINYINT to MEDIUMINT UNSIGNED are ``int``s, INT UNSIGNED a ``long``: one tidb_type.
        allowed = ("int", "long")
    return primitive in allowed


_PRIMITIVES: dict[int, tuple[str, ...]] = {
    MySQLType.LONG: ("int",),
    MySQLType.LONGLONG: ("long", "string"),
    MySQLType.FLOAT: ("float",),
    MySQLType.DOUBLE: ("double",),
    MySQLType.BIT: ("bytes",),
    MySQLType.NEWDECIMAL: ("bytes", "string"),
    MySQLType.VARCHAR: ("string",),
    MySQLType.LONG_BLOB: ("bytes",),
    MySQLType.ENUM: ("string",),
    MySQLType.SET: ("string",),
    MySQLType.JSON: ("string",),
    MySQLType.DATE: ("string", "int"),
    MySQLType.DATETIME: ("string", "long"),
    MySQLType.TIMESTAMP: ("string",),
    MySQLType.DURATION: ("string", "long"),
    MySQLType.YEAR: ("int",),
}


# --- encoding: the model's value -> a column's Avro field and datum --------------------------

# The project's encoder names ENUM and SET members by their number: the model holds a member's
# index (ENUM) or bit (SET), not its name, and TiCDC's Avro protocol carries only names.
MEMBERS = tuple(str(number) for number in range(1, 65))
_ALLOWED = ",".join(MEMBERS)


def decimal_scale(value: Value) -> int:
    """The scale a DECIMAL value's text shows (TiDB writes every digit of the column's scale)."""
    if not isinstance(value, str):
        return 0
    _, dot, digits = value.partition(".")
    return len(digits) if dot else 0


def field_type(
    kind: ColumnType, decimals: DecimalMode, bigints: BigintUnsignedMode, scale: int
) -> Any:
    """The Avro type TiCDC writes for a column (without the null branch)."""
    mysql_type = kind.mysql_type
    parameters: dict[str, str] = {TIDB_TYPE: tidb_type(kind)}
    if mysql_type in (MySQLType.TINY, MySQLType.SHORT, MySQLType.INT24, MySQLType.YEAR):
        primitive = "int"
    elif mysql_type == MySQLType.LONG:
        primitive = "long" if kind.is_unsigned else "int"
    elif mysql_type == MySQLType.LONGLONG:
        string = kind.is_unsigned and bigints is BigintUnsignedMode.STRING
        primitive = "string" if string else "long"
    elif mysql_type in (MySQLType.FLOAT, MySQLType.DOUBLE):
        primitive = "float" if mysql_type == MySQLType.FLOAT else "double"
    elif mysql_type == MySQLType.BIT:
        primitive = "bytes"
        parameters["length"] = "64"
    elif mysql_type == MySQLType.NEWDECIMAL:
        if decimals is DecimalMode.PRECISE:
            return {
                "type": "bytes",
                PARAMETERS: parameters,
                "logicalType": "decimal",
                "precision": MAX_PRECISION,
                "scale": scale,
            }
        primitive = "string"
    elif mysql_type in (MySQLType.ENUM, MySQLType.SET):
        primitive = "string"
        parameters["allowed"] = _ALLOWED
    else:
        primitive = "bytes" if parameters[TIDB_TYPE] == "BLOB" else "string"
    return {"type": primitive, PARAMETERS: parameters}


def datum(
    kind: ColumnType, value: Value, decimals: DecimalMode, bigints: BigintUnsignedMode
) -> Any:
    """What fastavro writes for a non-null value of a column."""
    mysql_type = kind.mysql_type
    if mysql_type == MySQLType.LONGLONG and kind.is_unsigned and isinstance(value, int):
        if bigints is BigintUnsignedMode.STRING:
            return str(value)
        return value - (1 << 64) if value >= 1 << 63 else value
    if mysql_type == MySQLType.BIT and isinstance(value, int):
        return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")
    if mysql_type == MySQLType.NEWDECIMAL and decimals is DecimalMode.PRECISE:
        return Decimal(str(value))
    if mysql_type == MySQLType.ENUM and isinstance(value, int):
        return "" if value == 0 else _member(value - 1, value)
    if mysql_type == MySQLType.SET and isinstance(value, int):
        return ",".join(
            _member(bit, value) for bit in range(value.bit_length()) if value >> bit & 1
        )
    if kind.is_binary and isinstance(value, str):
        return value.encode()
    return value


def _member(position: int, value: int) -> str:
    if position >= len(MEMBERS):
        raise EncodeError(f"avro: ENUM/SET value {value} is past the encoder's 64 members")
    return MEMBERS[position]
