"""How a record schema from the registry reads, worked out once per schema id: its table, its
columns' types and readers, whether it carries the TiDB extension, and the reader of its binary
record (``binary.py``). The codec (``codec.py``) keeps these plans per id and per pair of frame
headers; a schema TiCDC would not have written is a ``DecodeError`` here, once, not per message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from config.errors import DecodeError, shown
from core.model import ColumnFlag, ColumnType, MySQLType, Value, column_type, integer_range
from streams.codecs import avro_grammar as grammar
from streams.codecs.avro import wire
from streams.codecs.avro.binary import RecordReader, record_reader
from streams.codecs.avro.types import (
    PARAMETERS,
    TIDB_TYPE,
    FieldPlan,
    Reader,
    expected_primitive,
    kind_of,
    reader_for,
)
from streams.codecs.values import checked_integer

PROTOCOL = wire.PROTOCOL
# The TiDB extension's fields (``enable-tidb-extension=true``) in a row's value record.
OP = "_tidb_op"
COMMIT_TS = "_tidb_commit_ts"
PHYSICAL_TIME = "_tidb_commit_physical_time"
_HANDLE_KEY = int(ColumnFlag.HANDLE_KEY)
# Integer columns whose Avro type holds values their MySQL type does not: INT UNSIGNED is a
# ``long``, YEAR an ``int``.
_RANGE_CHECKED = frozenset({MySQLType.LONG, MySQLType.YEAR})


@dataclass(frozen=True, slots=True)
class RecordPlan:
    """A registered record schema, parsed once per id: its table, how its columns read
    (``fields``, over fastavro's values), and the reader of its binary record (``binary.py``;
    None: a record it does not take, read by fastavro)."""

    database: str
    table: str
    parsed: Any
    fields: tuple[FieldPlan, ...]
    names: frozenset[str]
    extension: bool
    reader: RecordReader | None


@dataclass(frozen=True, slots=True)
class RowPlan:
    """A value schema read with its key schema: the columns' types with the handle key marked."""

    value: RecordPlan
    columns: dict[str, ColumnType]
    fields: tuple[FieldPlan, ...]
    keyed: bool


def keyed(kind: ColumnType) -> ColumnType:
    return column_type(kind.mysql_type, kind.flags | _HANDLE_KEY)


def image(fields: tuple[FieldPlan, ...], record: dict[str, Any], part: str) -> dict[str, Value]:
    image: dict[str, Value] = {}
    for field in fields:
        raw = record[field.name]
        if raw is None or field.reader is None:
            image[field.name] = raw
            continue
        try:
            image[field.name] = field.reader(raw)
        except ValueError as exc:
            reason = f"{exc}, at field {field.name!r}"
            raise DecodeError(PROTOCOL, reason, where=part) from None
    return image


def record_plan(schema_id: int, text: str, part: str) -> RecordPlan:
    """How a record schema from the registry reads; ``DecodeError`` for one TiCDC would not
    have written (a message framed with such an id is not TiCDC's)."""
    import fastavro

    where = f"{part} schema {schema_id}"
    try:
        schema = json.loads(text)
        parsed = fastavro.parse_schema(json.loads(text))
    except Exception as exc:  # json's and fastavro's many kinds of refusal
        raise _unlike(f"not an Avro schema: {exc}", where) from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise _unlike("the schema is not a record", where)
    _, dot, database = str(schema.get("namespace", "")).partition(".")
    if not dot or not database:
        raise _unlike("the record's namespace is not TiCDC's '<namespace>.<schema>'", where)
    fields: list[FieldPlan] = []
    read: list[tuple[str, Any, Reader | range | None]] = []
    dropped: list[str] = []
    for field in schema.get("fields", ()):
        name = field["name"]
        if name.__class__ is not str:
            # fastavro parses a record whose field name is no string (it names nothing).
            raise _unlike(f"a field named {shown(name)}", where)
        if name.startswith("_tidb_"):
            read.append((name, field["type"], None))
            if name not in (OP, COMMIT_TS):
                dropped.append(name)
            continue
        try:
            plan = _field_plan(name, field["type"])
        except ValueError as exc:
            raise _unlike(str(exc), where) from None
        fields.append(plan)
        bounds = integer_range(plan.kind.mysql_type, plan.kind.is_unsigned)
        checked = plan.kind.mysql_type in _RANGE_CHECKED and bounds is not None
        read.append((name, field["type"], bounds if checked else plan.reader))
    if not fields:
        raise _unlike("a record of no column", where)
    names = {name for name, _, _ in read}
    return RecordPlan(
        database,
        str(schema["name"]),
        parsed,
        tuple(fields),
        frozenset(f.name for f in fields),
        COMMIT_TS in names and OP in names,
        record_reader(read, (OP, COMMIT_TS), frozenset(dropped)),
    )


def _unlike(reason: str, where: str) -> DecodeError:
    """A schema TiCDC would not have written: the message naming it breaks rule record-schema."""
    return grammar.broken(grammar.RECORD_SCHEMA, reason, where)


def _field_plan(name: str, avro_type: Any) -> FieldPlan:
    nullable = False
    if isinstance(avro_type, list):
        branches = [branch for branch in avro_type if branch != "null"]
        nullable = len(branches) < len(avro_type)
        if len(branches) != 1:
            raise ValueError(f"column {name!r} is a union of {len(branches)} non-null types")
        avro_type = branches[0]
    if not isinstance(avro_type, dict) or not isinstance(avro_type.get(PARAMETERS), dict):
        raise ValueError(f"column {name!r} has no connect.parameters.tidb_type")
    kind = kind_of(name, str(avro_type[PARAMETERS].get(TIDB_TYPE)), nullable)
    if not expected_primitive(kind, avro_type):
        raise ValueError(
            f"column {name!r} of tidb_type {avro_type[PARAMETERS][TIDB_TYPE]} is an Avro"
            f" {avro_type.get('type')}, which TiCDC does not write for it"
        )
    reader = reader_for(kind, avro_type)
    if reader is None and kind.mysql_type in _RANGE_CHECKED:
        reader = _range_checked(kind)
    return FieldPlan(name, kind, reader)


def _range_checked(kind: ColumnType) -> Reader:
    def read(raw: Any) -> Value:
        return checked_integer(kind, raw)

    return read
