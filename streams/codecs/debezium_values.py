"""Column values as TiCDC's Debezium encoder writes them (tiflow pkg/sink/codec/debezium/codec.go,
``writeDebeziumFieldValue``), read back to the model's exact values and written from them.

A row message's own schema gives each field's Kafka Connect type and Debezium semantic name;
what it leaves out (binary strings are base64 ``string`` fields, DECIMAL is a ``double``, BIGINT
UNSIGNED an ``int64``, the fractional digits of DATETIME and TIME) comes from the table's DDL
(``tableChanges``), when the codec has seen it.

Longer than the usual module on purpose, one for the reading and the writing of every type:
each type's reader sits beside its writer, so a change to one is seen with the other (the
round-trip property test holds them).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import Any

from core.model import (
    INTEGER_TYPES,
    ColumnFlag,
    ColumnSchema,
    ColumnType,
    MySQLType,
    TableSchema,
    Value,
    column_type,
)
from streams.codecs.limits import Limit, limit
from streams.codecs.simple_schema import is_binary_name, type_code, type_name
from streams.codecs.values import format_float

_MASK64 = (1 << 64) - 1
_EPOCH_DAY = date(1970, 1, 1)
_EPOCH_ORDINAL = _EPOCH_DAY.toordinal()
_MICROS_A_DAY = 86_400_000_000
_day = date.fromordinal
# DATETIME has no zone: TiCDC reads it as UTC.
_EPOCH = datetime(1970, 1, 1)
# Digits after the second when the DDL does not say: what each semantic name can carry.
_DEFAULT_FSP = {"io.debezium.time.Timestamp": 3, "io.debezium.time.MicroTimestamp": 6}
_TIME_FSP = 6
# Element names the project's encoder gives ENUM and SET members, which the model knows only by
# index: TiCDC writes the real names, which it takes from the table.
ENCODER_ELEMENTS = tuple(str(i) for i in range(1, 65))

Reader = Callable[[Any], Value]


@dataclass(frozen=True, slots=True)
class DDLColumn:
    """What a DDL message's ``tableChanges`` says of a column."""

    type_name: str
    length: int | None
    scale: int | None
    elements: tuple[str, ...] | None
    # ``charsetName``: None for binary types (and where TiCDC does not say).
    charset: str | None = None


def ddl_column(raw: dict[str, Any]) -> DDLColumn:
    """A ``tableChanges[].table.columns[]`` entry."""
    elements = raw.get("enumValues")
    type_name, length, scale = raw["typeName"], raw.get("length"), raw.get("scale")
    if type_name.__class__ is not str:
        raise ValueError(f"a column's 'typeName' must be a string, not {type(type_name).__name__}")
    if any(n is not None and n.__class__ is not int for n in (length, scale)):
        raise ValueError("a column's 'length' and 'scale' must be integers")
    charset = raw.get("charsetName")
    if charset is not None and charset.__class__ is not str:
        raise ValueError(f"a column's 'charsetName' must be a string, not {type(charset).__name__}")
    return DDLColumn(
        type_name,
        length,
        scale,
        tuple(_unquote(e) for e in elements) if elements else None,
        charset,
    )


# The version under which a table's last DDL columns are kept in a schema store: Debezium has no
# schema versions, and only the last DDL of a table types its rows.
LAST_DDL_VERSION = 0


def ddl_table_schema(db: str, table: str, columns: dict[str, DDLColumn]) -> TableSchema:
    """``columns`` as a schema store keeps them (lengths of None as 0: only the digits of
    DATETIME and TIME use them, and TiCDC always gives those)."""
    return TableSchema(
        db,
        table,
        0,
        LAST_DDL_VERSION,
        tuple(
            ColumnSchema(
                name,
                column.type_name.lower(),
                charset=column.charset or "binary",
                length=column.length or 0,
                decimal=column.scale,
                elements=column.elements,
            )
            for name, column in columns.items()
        ),
    )


def ddl_columns(table: TableSchema) -> dict[str, DDLColumn]:
    """The DDL columns :func:`ddl_table_schema` keeps (a charset of "binary" as None: a
    schema kept before charsets were, or a binary type's)."""
    return {
        column.name: DDLColumn(
            column.mysql_type,
            column.length,
            column.decimal,
            column.elements,
            None if column.charset == "binary" else column.charset,
        )
        for column in table.columns
    }


def ddl_limit(kind: ColumnType, ddl: DDLColumn) -> Limit | None:
    """The declared bound of a column of ``kind`` by its DDL entry (lengths count characters
    only in a charset the DDL names: TiDB makes every binary-charset string type a binary one)."""
    return limit(kind, ddl.type_name, ddl.length, ddl.charset, ddl.elements)


def _unquote(element: str) -> str:
    # TiCDC lists ENUM/SET members as SQL literals: 'a', with '' for a quote inside.
    if len(element) >= 2 and element[0] == element[-1] == "'":
        return element[1:-1].replace("''", "'")
    return element


def _connect_type(field: dict[str, Any]) -> int:
    """The MySQL type a Connect field stands for when no DDL says more (a name or type that is
    not a string names nothing: never made text, as a deeply nested one would not print)."""
    name, kind = field.get("name"), field.get("type")
    by_name = _SEMANTIC_TYPES.get(name) if name.__class__ is str else None
    if by_name is not None:
        return by_name
    return (
        _CONNECT_TYPES.get(kind, MySQLType.VARCHAR) if kind.__class__ is str else MySQLType.VARCHAR
    )


_SEMANTIC_TYPES = {
    "io.debezium.data.Bits": MySQLType.BIT,
    "io.debezium.data.Enum": MySQLType.ENUM,
    "io.debezium.data.EnumSet": MySQLType.SET,
    "io.debezium.data.Json": MySQLType.JSON,
    "io.debezium.time.Date": MySQLType.DATE,
    "io.debezium.time.Timestamp": MySQLType.DATETIME,
    "io.debezium.time.MicroTimestamp": MySQLType.DATETIME,
    "io.debezium.time.ZonedTimestamp": MySQLType.TIMESTAMP,
    "io.debezium.time.MicroTime": MySQLType.DURATION,
    "io.debezium.time.Year": MySQLType.YEAR,
}
_CONNECT_TYPES = {
    "boolean": MySQLType.BIT,
    "int16": MySQLType.SHORT,
    "int32": MySQLType.LONG,
    "int64": MySQLType.LONGLONG,
    "float": MySQLType.FLOAT,
    "double": MySQLType.DOUBLE,
    "bytes": MySQLType.BLOB,
    "string": MySQLType.VARCHAR,
}


def column_plan(
    field: dict[str, Any] | None, ddl: DDLColumn | None, key: bool
) -> tuple[ColumnType, Reader, type | None]:
    """A column's model type, the function reading its non-null JSON values, and the JSON class
    whose values are already the model's (read as they are), from its row schema ``field``
    (None when TiCDC ran with the schema off) and its DDL entry (None when unseen)."""
    flags = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY) if key else 0
    if field is not None and field.get("optional"):
        flags |= ColumnFlag.NULLABLE
    if ddl is not None:
        lowered = ddl.type_name.lower()
        mysql_type = int(type_code(lowered))
        if is_binary_name(lowered):
            flags |= ColumnFlag.BINARY
        if "unsigned" in lowered:
            flags |= ColumnFlag.UNSIGNED
    elif field is not None:
        mysql_type = int(_connect_type(field))
    else:
        return column_type(MySQLType.VARCHAR, flags), _as_is, None
    kind = column_type(mysql_type, flags)
    reader = _reader(kind, field or {}, ddl)
    return kind, reader, _PLAIN_CLASSES.get(reader)


def _reader(kind: ColumnType, field: dict[str, Any], ddl: DDLColumn | None) -> Reader:
    mysql_type = kind.mysql_type
    name = field.get("name")
    if mysql_type in INTEGER_TYPES:
        if mysql_type == MySQLType.LONGLONG and kind.is_unsigned:
            return _unsigned_bigint  # TiCDC writes int64(v), as Debezium does
        return _integer
    if mysql_type == MySQLType.YEAR:
        return _integer
    if mysql_type in (MySQLType.FLOAT, MySQLType.DOUBLE):
        return _float
    if mysql_type == MySQLType.NEWDECIMAL:
        if ddl is None or ddl.scale is None:
            return _decimal
        scale = int(ddl.scale)
        return partial(_decimal_scaled, scale)
    if mysql_type == MySQLType.BIT:
        return _bits
    if mysql_type in (MySQLType.ENUM, MySQLType.SET):
        elements = _elements(field, ddl)
        if mysql_type == MySQLType.ENUM:
            indexes = {element: i for i, element in enumerate(elements, 1)}
            return partial(_enum, indexes)
        bits = {element: 1 << i for i, element in enumerate(elements)}
        return partial(_set, bits)
    if mysql_type in (MySQLType.DATE, MySQLType.NEWDATE):
        return _date
    if mysql_type == MySQLType.DATETIME:
        fsp = _fsp(ddl, _DEFAULT_FSP.get(name or "", 6))
        scale = 1000 if name == "io.debezium.time.Timestamp" or (name is None and fsp <= 3) else 1
        return partial(_datetime, scale, fsp)
    if mysql_type == MySQLType.TIMESTAMP:
        return _timestamp
    if mysql_type == MySQLType.DURATION:
        fsp = _fsp(ddl, _TIME_FSP)
        return partial(_time, fsp)
    if kind.is_binary:
        return _binary
    return _text


def _fsp(ddl: DDLColumn | None, default: int) -> int:
    # TiCDC's tableChanges length of DATETIME/TIMESTAMP/TIME is the column's fractional digits.
    if ddl is None or ddl.length is None:
        return default
    return max(0, min(6, ddl.length))


def _elements(field: dict[str, Any], ddl: DDLColumn | None) -> tuple[str, ...]:
    if ddl is not None and ddl.elements is not None:
        return ddl.elements
    allowed = (field.get("parameters") or {}).get("allowed")
    return tuple(allowed.split(",")) if allowed else ()


def _as_is(raw: Any) -> Value:
    return raw  # type: ignore[no-any-return]


def _integer(raw: Any) -> int:
    if raw.__class__ is not int:
        raise ValueError("not an integer")
    return int(raw)


def _unsigned_bigint(raw: Any) -> int:
    return _integer(raw) & _MASK64


def _float(raw: Any) -> float:
    if raw.__class__ is not float and raw.__class__ is not int:
        raise ValueError("not a number")
    return float(raw)


def _decimal(raw: Any) -> str:
    # TiCDC writes DECIMAL as strconv.ParseFloat of its text: the double is all that is left.
    return format_float(_float(raw))


def _decimal_scaled(scale: int, raw: Any) -> str:
    # With the DDL's scale, the digits the column shows: 588.1 of a DECIMAL(10,2) is "588.10".
    text = repr(_float(raw))
    if "e" in text:
        text = _positional(text)
    whole, _, fraction = text.partition(".")
    if len(fraction) <= scale and whole[-1:].isdigit():
        # The shortest digits already fit the scale ("588.0" -> "588.00"): pad them.
        return f"{whole}.{fraction.ljust(scale, '0')}" if scale else whole
    return format(Decimal(text), f".{scale}f")  # more digits than the scale (or NaN): round


def _positional(text: str) -> str:
    """``repr``'s exponent form of a float written out: "-3.0025e+17" -> "-300250000000000000"."""
    mantissa, _, exponent = text.partition("e")
    sign = "-" if mantissa[0] == "-" else ""
    whole, _, fraction = mantissa.lstrip("-").partition(".")
    digits = whole + fraction
    point = len(whole) + int(exponent)
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _bits(raw: Any) -> int:
    if raw.__class__ is bool:
        return int(raw)  # BIT(1) is a boolean
    # BIT(n > 1): the value's little-endian bytes, as many as n bits need.
    return int.from_bytes(binascii.a2b_base64(raw, strict_mode=True), "little")


def _enum(indexes: dict[str, int], raw: Any) -> int:
    if raw == "":
        return 0  # TiCDC writes an invalid member (non-strict mode) as ""
    return indexes[raw]


def _set(bits: dict[str, int], raw: Any) -> int:
    if raw == "":
        return 0
    value = 0
    for member in raw.split(","):
        value |= bits[member]
    return value


def _date(raw: Any) -> str:
    return _day(_EPOCH_ORDINAL + _integer(raw)).isoformat()


def _datetime(scale: int, fsp: int, raw: Any) -> str:
    if raw.__class__ is not int:
        raise ValueError("not an integer")
    days, micros = divmod(raw * scale, _MICROS_A_DAY)
    seconds, fraction = divmod(micros, 1_000_000)
    text = "%s %02d:%02d:%02d" % (  # noqa: UP031 - %-formatting is the fastest here
        _day(_EPOCH_ORDINAL + days).isoformat(),
        seconds // 3600,
        seconds // 60 % 60,
        seconds % 60,
    )
    return text + (".%06d" % fraction)[: fsp + 1] if fsp else text  # noqa: UP031


def _timestamp(raw: Any) -> str:
    # ZonedTimestamp in UTC, "2006-01-02T15:04:05[.fff]Z": the model keeps TiCDC's UTC text.
    if raw.__class__ is not str or not raw.endswith("Z") or raw[10:11] != "T":
        raise ValueError("not a UTC ZonedTimestamp")
    return f"{raw[:10]} {raw[11:-1]}"


def _time(fsp: int, raw: Any) -> str:
    micros = _integer(raw)
    seconds, fraction = divmod(-micros if micros < 0 else micros, 1_000_000)
    text = "%s%02d:%02d:%02d" % (  # noqa: UP031 - %-formatting is the fastest here
        "-" if micros < 0 else "",
        seconds // 3600,
        seconds // 60 % 60,
        seconds % 60,
    )
    return text + (".%06d" % fraction)[: fsp + 1] if fsp else text  # noqa: UP031


def carried_decimal(text: str) -> str:
    """What of a DECIMAL's ``text`` reaches a Debezium consumer (TiCDC sends the double), shown
    with the text's own number of decimals."""
    scale = len(text.partition(".")[2])
    return format(Decimal(format_float(float(text))), f".{scale}f")


# Readers whose JSON values of one class are already the model's values.
_PLAIN_CLASSES: dict[Reader, type] = {}


def _binary(raw: Any) -> bytes:
    return binascii.a2b_base64(raw, strict_mode=True)


def _text(raw: Any) -> str:
    if raw.__class__ is not str:
        raise ValueError("not a string")
    return str(raw)


_PLAIN_CLASSES.update({_integer: int, _float: float, _text: str})


# --- writing ---------------------------------------------------------------------------------


def field_schema(name: str, kind: ColumnType) -> dict[str, Any]:
    """The Connect schema TiCDC's ``writeDebeziumFieldSchema`` writes for a column."""
    mysql_type = kind.mysql_type
    field: dict[str, Any] = {"type": "string"}
    if mysql_type == MySQLType.BIT:
        field = {
            "type": "bytes",
            "name": "io.debezium.data.Bits",
            "version": 1,
            "parameters": {"length": "64"},
        }
    elif mysql_type in (MySQLType.ENUM, MySQLType.SET):
        semantic = "Enum" if mysql_type == MySQLType.ENUM else "EnumSet"
        field = {
            "type": "string",
            "name": f"io.debezium.data.{semantic}",
            "version": 1,
            "parameters": {"allowed": ",".join(ENCODER_ELEMENTS)},
        }
    elif mysql_type in _WRITTEN_TIME_NAMES:
        connect, semantic = _WRITTEN_TIME_NAMES[mysql_type]
        field = {"type": connect, "name": semantic, "version": 1}
    elif mysql_type in INTEGER_TYPES:
        field = {"type": _integer_type(kind)}
    elif mysql_type == MySQLType.FLOAT:
        field = {"type": "float"}
    elif mysql_type in (MySQLType.DOUBLE, MySQLType.NEWDECIMAL):
        field = {"type": "double"}
    field["optional"] = bool(kind.flags & ColumnFlag.NULLABLE)
    field["field"] = name
    return field


_WRITTEN_TIME_NAMES: dict[int, tuple[str, str]] = {
    MySQLType.DATE: ("int32", "io.debezium.time.Date"),
    MySQLType.NEWDATE: ("int32", "io.debezium.time.Date"),
    MySQLType.DATETIME: ("int64", "io.debezium.time.MicroTimestamp"),
    MySQLType.TIMESTAMP: ("string", "io.debezium.time.ZonedTimestamp"),
    MySQLType.DURATION: ("int64", "io.debezium.time.MicroTime"),
    MySQLType.YEAR: ("int32", "io.debezium.time.Year"),
    MySQLType.JSON: ("string", "io.debezium.data.Json"),
}


def _integer_type(kind: ColumnType) -> str:
    mysql_type, unsigned = kind.mysql_type, kind.is_unsigned
    if mysql_type == MySQLType.TINY:
        return "int16"
    if mysql_type == MySQLType.SHORT:
        return "int32" if unsigned else "int16"
    if mysql_type == MySQLType.INT24:
        return "int32"
    if mysql_type == MySQLType.LONG:
        return "int64" if unsigned else "int32"
    return "int64"


def ddl_type_name(kind: ColumnType) -> str:
    """The ``typeName`` a DDL's ``tableChanges`` gives a column of ``kind``."""
    name = type_name(kind).upper()
    return f"{name} UNSIGNED" if kind.is_unsigned and kind.mysql_type in INTEGER_TYPES else name


def write_value(kind: ColumnType, value: int | float | str | bytes) -> Any:
    """A non-null model value as TiCDC's ``writeDebeziumFieldValue`` writes it."""
    mysql_type = kind.mysql_type
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        if mysql_type == MySQLType.BIT:
            return base64.b64encode(value.to_bytes(8, "little")).decode("ascii")
        if mysql_type in (MySQLType.ENUM, MySQLType.SET):
            return _members(mysql_type, value)
        if mysql_type == MySQLType.LONGLONG and kind.is_unsigned and value >= 1 << 63:
            return value - (1 << 64)
        return value
    if mysql_type == MySQLType.NEWDECIMAL:
        return float(value)
    if mysql_type in (MySQLType.DATE, MySQLType.NEWDATE):
        return (date.fromisoformat(value) - _EPOCH_DAY).days
    if mysql_type == MySQLType.DATETIME:
        return (datetime.fromisoformat(value) - _EPOCH) // timedelta(microseconds=1)
    if mysql_type == MySQLType.TIMESTAMP:
        return f"{value[:10]}T{value[11:]}Z"
    if mysql_type == MySQLType.DURATION:
        return _time_micros(value)
    return value


def _members(mysql_type: int, value: int) -> str:
    if mysql_type == MySQLType.ENUM:
        if value == 0:
            return ""
        if value > len(ENCODER_ELEMENTS):
            raise ValueError(f"ENUM index {value} is over the encoder's {len(ENCODER_ELEMENTS)}")
        return ENCODER_ELEMENTS[value - 1]
    return ",".join(ENCODER_ELEMENTS[i] for i in range(64) if value >> i & 1)


def _time_micros(text: str) -> int:
    negative = text.startswith("-")
    clock, _, fraction = text.lstrip("-").partition(".")
    hours, minutes, seconds = (int(part) for part in clock.split(":"))
    micros = ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + int(fraction.ljust(6, "0")[:6])
    return -micros if negative else micros
