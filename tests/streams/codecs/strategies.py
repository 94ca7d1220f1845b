"""Hypothesis strategies for events each protocol can carry exactly."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Context, Decimal
from typing import Any

from hypothesis import strategies as st

from core.model import (
    BLOB_TYPES,
    CHAR_TYPES,
    INTEGER_TYPES,
    ColumnFlag,
    ColumnType,
    DDLEvent,
    Event,
    MySQLType,
    Op,
    Resolved,
    RowChange,
    Value,
    column_type,
)
from streams.codecs.canal_json import _ddl_action
from streams.codecs.simple_schema import schema_from_types
from streams.codecs.values import format_float

TSO = st.integers(0, (1 << 64) - 1)
KEY = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
_INT_BITS = {
    MySQLType.TINY: 8,
    MySQLType.SHORT: 16,
    MySQLType.INT24: 24,
    MySQLType.LONG: 32,
    MySQLType.LONGLONG: 64,
}
# Types whose Simple/Canal names round-trip to the same code.
PORTABLE_TYPES = [
    *_INT_BITS,
    MySQLType.FLOAT,
    MySQLType.DOUBLE,
    MySQLType.NEWDECIMAL,
    MySQLType.DATE,
    MySQLType.DATETIME,
    MySQLType.TIMESTAMP,
    MySQLType.DURATION,
    MySQLType.YEAR,
    MySQLType.VARCHAR,
    MySQLType.STRING,
    *BLOB_TYPES,
    MySQLType.ENUM,
    MySQLType.SET,
    MySQLType.BIT,
    MySQLType.JSON,
]
ALL_TYPES = [*PORTABLE_TYPES, MySQLType.VAR_STRING, MySQLType.NEWDATE, MySQLType.NULL]
# Names that stress quoting and encodings: unicode, backticks, SQL punctuation.
NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
FLOAT32 = st.floats(width=32, allow_nan=False, allow_infinity=False).map(
    lambda v: float(format_float(v, single=True))
)


def values_for(kind: ColumnType) -> st.SearchStrategy[Value]:
    mysql_type = kind.mysql_type
    if mysql_type in INTEGER_TYPES:
        bits = _INT_BITS[MySQLType(mysql_type)]
        if kind.is_unsigned:
            return st.integers(0, (1 << bits) - 1)
        return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if mysql_type == MySQLType.FLOAT:
        return FLOAT32
    if mysql_type == MySQLType.DOUBLE:
        return st.floats(allow_nan=False, allow_infinity=False)
    if mysql_type == MySQLType.YEAR:
        return st.integers(0, 2155)
    if mysql_type in (MySQLType.BIT, MySQLType.SET):
        return st.integers(0, (1 << 64) - 1)
    if mysql_type == MySQLType.ENUM:
        return st.integers(0, 65535)
    if mysql_type == MySQLType.NULL:
        return st.none()
    if mysql_type in BLOB_TYPES or mysql_type in CHAR_TYPES:
        return st.binary(max_size=40) if kind.is_binary else TEXT
    return TEXT


_DATES = st.dates(date(1000, 1, 1), date(9999, 12, 31))
_MICROS = st.integers(0, 999_999)
# TiCDC's Debezium encoder writes dates and times as numbers and DECIMAL as a double: these are
# the values that survive that exactly (DATETIME and TIME with six digits: the codec shows the
# digits of the column, which a table announced from the model does not know).
DEBEZIUM_VALUES: dict[int, st.SearchStrategy[Value]] = {
    MySQLType.NEWDECIMAL: st.floats(allow_nan=False, allow_infinity=False).map(format_float),
    MySQLType.DATE: _DATES.map(date.isoformat),
    MySQLType.DATETIME: st.datetimes(datetime(1000, 1, 1), datetime(9999, 12, 31)).map(
        lambda moment: moment.isoformat(" ", "microseconds")
    ),
    MySQLType.TIMESTAMP: st.builds(
        lambda moment, digits: (
            moment.isoformat(" ", "seconds")
            + (f".{moment.microsecond:06d}"[: digits + 1] if digits else "")
        ),
        st.datetimes(datetime(1970, 1, 2), datetime(2038, 1, 1)),
        st.integers(0, 6),
    ),
    MySQLType.DURATION: st.builds(
        lambda negative, seconds, micros: (
            ("-" if negative and (seconds or micros) else "")
            + f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{micros:06d}"
        ),
        st.booleans(),
        st.integers(0, 838 * 3600 + 59 * 60 + 59),
        _MICROS,
    ),
    # The project's encoder names ENUM members by index, up to 64 of them.
    MySQLType.ENUM: st.integers(0, 64),
}


def debezium_values_for(kind: ColumnType) -> st.SearchStrategy[Value]:
    special = DEBEZIUM_VALUES.get(kind.mysql_type)
    return special if special is not None else values_for(kind)


@st.composite
def column_types(draw: Any, protocol: str) -> dict[str, ColumnType]:
    names = draw(st.lists(NAMES, min_size=1, max_size=10, unique=True))
    types = ALL_TYPES if protocol in ("open", "craft") else PORTABLE_TYPES
    columns: dict[str, ColumnType] = {}
    for index, name in enumerate(names):
        mysql_type = draw(st.sampled_from(types))
        if protocol in ("open", "craft"):
            flags = draw(st.integers(0, 255))
        else:
            flags = 0
            if mysql_type in BLOB_TYPES or mysql_type in CHAR_TYPES:
                flags |= ColumnFlag.BINARY if draw(st.booleans()) else 0
            if mysql_type in INTEGER_TYPES and draw(st.booleans()):
                flags |= ColumnFlag.UNSIGNED
            is_key = index == 0
            if is_key:
                flags |= KEY
            elif protocol == "canal-json" or draw(st.booleans()):
                flags |= ColumnFlag.NULLABLE
        columns[name] = column_type(mysql_type, int(flags))
    return columns


@st.composite
def images(draw: Any, columns: dict[str, ColumnType], values: Any = values_for) -> dict[str, Value]:
    image: dict[str, Value] = {}
    for name, kind in columns.items():
        nullable = not kind.flags & ColumnFlag.PRIMARY_KEY
        image[name] = draw(st.none() | values(kind) if nullable else values(kind))
    return image


@st.composite
def rows(draw: Any, protocol: str, schema: str, table: str) -> RowChange:
    columns = draw(column_types(protocol))
    op = draw(st.sampled_from(list(Op)))
    values = debezium_values_for if protocol == "debezium" else values_for
    new = draw(images(columns, values)) if op is not Op.DELETE else None
    old = draw(images(columns, values)) if op is not Op.INSERT else None
    partition = draw(st.none() | st.integers(0, 1 << 40)) if protocol in ("open", "craft") else None
    # Open Protocol's rid: TiDB's int64 handle of the row.
    int64 = st.integers(-(1 << 63), (1 << 63) - 1)
    row_id = draw(st.none() | int64) if protocol == "open" else None
    return RowChange(
        draw(TSO), schema, table, op, columns, new, old, partition_id=partition, row_id=row_id
    )


@st.composite
def event_lists(draw: Any, protocol: str) -> list[Event]:
    events: list[Event] = []
    schema = draw(NAMES)
    table = draw(NAMES)
    for _ in range(draw(st.integers(1, 24))):
        choice = draw(st.integers(0, 9))
        if choice < 7:
            events.append(draw(rows(protocol, schema, table)))
        elif choice < 8:
            events.append(Resolved(draw(TSO)))
        else:
            events.append(draw(ddls(protocol, schema, table)))
    return events


@st.composite
def ddls(draw: Any, protocol: str, schema: str, table: str) -> DDLEvent:
    query = draw(TEXT)
    ts = draw(TSO)
    if protocol == "simple" or protocol == "simple-avro":
        columns = draw(column_types(protocol))
        table_schema = schema_from_types(schema, table, columns, draw(st.integers(0, 1 << 62)))
        kind = draw(st.sampled_from(["CREATE", "ALTER", "ERASE", "TRUNCATE", "QUERY"]))
        # TiCDC sends no Simple DDL without its statement (rule schema-message).
        query = draw(TEXT.filter(str.strip))
        return DDLEvent(ts, schema, table, query, kind, table_schema=table_schema)
    if protocol == "debezium":
        # TiCDC names a DDL's kind in its tableChanges, and sends no DDL without SQL.
        kind = draw(st.sampled_from(["CREATE", "ALTER", "DROP", "QUERY"]))
        query = draw(TEXT.filter(bool))
        return DDLEvent(ts, schema, draw(st.none() | st.just(table)), query, kind)
    if protocol == "canal-json":
        # TiCDC sends no Canal-JSON DDL without its statement (rule ddl-sql).
        query = draw(TEXT.filter(str.strip))
        return DDLEvent(ts, schema, draw(st.none() | st.just(table)), query, _ddl_action(query))
    named = st.none() | NAMES
    # TiCDC sends no Open Protocol DDL without its statement (rule ddl-value).
    query = draw(TEXT.filter(str.strip))
    return DDLEvent(ts, draw(named), draw(named), query, draw(st.integers(0, 70)))


# TiCDC's Avro protocol: names Avro takes as they are (TiCDC rewrites any other character), and
# the values it carries exactly (DECIMAL at up to 65 digits, ENUM and SET by the encoder's 64
# numbered members).
AVRO_NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,11}", fullmatch=True)
_DECIMAL_CONTEXT = Context(prec=100)
AVRO_DECIMALS = st.builds(
    lambda unscaled, scale: format(Decimal(unscaled).scaleb(-scale, _DECIMAL_CONTEXT), "f"),
    st.integers(-(10**65) + 1, 10**65 - 1),
    st.integers(0, 30),
)
_AVRO_VALUES: dict[int, st.SearchStrategy[Value]] = {
    MySQLType.NEWDECIMAL: AVRO_DECIMALS,
    MySQLType.ENUM: st.integers(0, 64),
}


def avro_values_for(kind: ColumnType) -> st.SearchStrategy[Value]:
    special = _AVRO_VALUES.get(kind.mysql_type)
    return special if special is not None else values_for(kind)


@st.composite
def avro_column_types(draw: Any) -> dict[str, ColumnType]:
    names = draw(st.lists(AVRO_NAMES, min_size=1, max_size=10, unique=True))
    keys = draw(st.integers(1, len(names)))
    columns: dict[str, ColumnType] = {}
    for index, name in enumerate(names):
        mysql_type = draw(st.sampled_from([*PORTABLE_TYPES, MySQLType.VAR_STRING]))
        flags = 0
        if mysql_type in BLOB_TYPES or mysql_type in CHAR_TYPES:
            flags |= ColumnFlag.BINARY if draw(st.booleans()) else 0
        if mysql_type in INTEGER_TYPES and draw(st.booleans()):
            flags |= ColumnFlag.UNSIGNED
        if index < keys:
            flags |= KEY
        elif draw(st.booleans()):
            flags |= ColumnFlag.NULLABLE
        columns[name] = column_type(mysql_type, int(flags))
    return columns


@st.composite
def _avro_image(draw: Any, columns: dict[str, ColumnType]) -> dict[str, Value]:
    image: dict[str, Value] = {}
    for name, kind in columns.items():
        values = avro_values_for(kind)
        image[name] = draw(st.none() | values if kind.flags & ColumnFlag.NULLABLE else values)
    return image


@st.composite
def avro_event_lists(draw: Any) -> list[Event]:
    """Rows of one table (a topic of TiCDC's carries one), watermarks and DDL."""
    events: list[Event] = []
    schema = draw(AVRO_NAMES)
    table = draw(AVRO_NAMES)
    columns = draw(avro_column_types())
    for _ in range(draw(st.integers(1, 24))):
        choice = draw(st.integers(0, 9))
        if choice < 7:
            op = draw(st.sampled_from(list(Op)))
            new = draw(_avro_image(columns)) if op is not Op.DELETE else None
            old = draw(_avro_image(columns)) if op is not Op.INSERT else None
            events.append(RowChange(draw(TSO), schema, table, op, columns, new, old))
        elif choice < 8:
            events.append(Resolved(draw(TSO)))
        else:
            named = st.none() | AVRO_NAMES
            # TiCDC sends no Avro DDL without its statement (rule ddl-json).
            query = draw(TEXT.filter(str.strip))
            ddl = DDLEvent(draw(TSO), draw(named), draw(named), query, draw(st.integers(0, 70)))
            events.append(ddl)
    return events
