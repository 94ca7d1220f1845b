"""Simple in its Avro encoding (``simple-avro``) in the structural fuzz: messages generated as
TiCDC's encoder writes them (tiflow pkg/sink/codec/simple/avro.go: every message the ``Message``
record of the schema's top-level union, its ``type`` naming its payload's record; a DML's values
the union branches ``encodeValue4Avro`` in marshaller.go picks for each column type), the grammar
the JSON encoding's (streams/codecs/simple_grammar.py): watermarks, DML of one announced table,
BOOTSTRAP and DDL messages with table schemas of other tables.

What is mutated is the message as a datum of the writer schema, and only as that schema still
allows (avro_tree.py): a member set to null where its union has null, a map's entry or an
array's element dropped or repeated, strings, arrays and maps emptied, a union member given
another branch (a number, string, bytes or record where the column's type takes another), values
of the right Avro type that TiCDC never writes (version 2, empty names, negative unsigned
numbers, the type enums' other symbols), unknown map keys (a column the table lacks), and parts
TiCDC never writes together (:func:`_combine`: a message type over another type's payload, an
image a DML type never carries, whole rows marked as holding the handle key only). An unknown
record field has no bytes in Avro, a JSON value of another kind has no Avro encoding under this
schema: such messages are no Avro of TiCDC's schema, the byte fuzz's (tests/streams/codecs/
fuzz.py) to try. A datum fastavro cannot write under the schema (a double past a float's range)
is unjudged. Judged by :func:`oracle`, the fuzz's own reading of the rules in the decoder's
order. There is no native decoder."""

from __future__ import annotations

import copy
import io
import json
from importlib import resources
from typing import Any

import fastavro
from hypothesis import strategies as st

from streams.codecs import simple_grammar as grammar
from streams.codecs.simple_avro import SimpleAvroCodec, avro_schema
from streams.codecs.simple_schema import type_code
from tests.streams.codecs.structure import avro_tree
from tests.streams.codecs.structure.avro_tree import Branch
from tests.streams.codecs.structure.judge import UNJUDGED, Decode, Subject
from tests.streams.codecs.structure.mutate import ALPHABET, NAMES

N = "com.pingcap.simple.avro."
DATABASE, TABLE, VERSION = "db", "fixed table", 3
# The announced table: name, mysqlType, unsigned, what its values are.
COLUMNS = (
    ("id", "bigint", False, "int64"),
    ("c", "varchar", False, "text10"),
    ("u", "int", True, "uint32"),
    ("d", "double", False, "double"),
    ("ts", "timestamp", False, "timestamp"),
    ("ub", "bigint", True, "uint64"),
)
KEY = frozenset({"id"})
_KINDS = {name: kind for name, _, _, kind in COLUMNS}
_TYPE_NAMES = ["bigint", "int", "varchar", "double", "timestamp", "blob", "json", "bit"]
_NUMERIC = {"bigint", "int", "double", "bit"}
# Payload records by message type (a DDL's and a DML's own type is in their payload).
_RECORDS = {"WATERMARK": "Watermark", "BOOTSTRAP": "Bootstrap", "DDL": "DDL", "DML": "DML"}
_LONG = st.integers(-(1 << 63), (1 << 63) - 1)
_MASK64 = (1 << 64) - 1
_TIMESTAMP = {"location": "UTC", "value": "2020-01-02 03:04:05"}


def _column(name: str, kind: str, unsigned: bool, first: bool) -> dict[str, Any]:
    numeric = kind in _NUMERIC
    data_type: dict[str, Any] = {"mysqlType": kind, "charset": "utf8mb4", "collate": "utf8mb4_bin"}
    data_type |= {"length": 10 if kind == "varchar" else 20, "decimal": None, "elements": None}
    data_type |= {"unsigned": unsigned if numeric else None, "zerofill": False if numeric else None}
    return {"name": name, "dataType": data_type, "nullable": not first, "default": None}


def _table_schema(
    database: str, name: str, columns: list[tuple[str, str, bool]], version: int
) -> dict[str, Any]:
    first = columns[0][0]
    index = {"name": "primary", "unique": True, "primary": True, "nullable": False}
    return {
        "database": database,
        "table": name,
        "tableID": 7,
        "version": version,
        "columns": [_column(c, kind, unsigned, c == first) for c, kind, unsigned in columns],
        "indexes": [index | {"columns": [first]}],
    }


ANNOUNCED = _table_schema(DATABASE, TABLE, [(n, k, u) for n, k, u, _ in COLUMNS], VERSION)


# --- generation -------------------------------------------------------------------------------


@st.composite
def _value(draw: Any, kind: str) -> Branch | None:
    if draw(st.integers(0, 6)) == 0:
        return None
    if kind == "int64":
        return Branch("long", draw(_LONG))
    if kind == "uint32":
        return Branch("long", draw(st.integers(0, (1 << 32) - 1)))
    if kind == "uint64":
        return Branch(N + "UnsignedBigint", {"value": draw(_LONG)})
    if kind == "text10":
        return Branch("string", draw(st.text(ALPHABET, max_size=10)))
    if kind == "double":
        return Branch("double", draw(st.floats(allow_nan=False, allow_infinity=False)))
    return Branch(N + "Timestamp", dict(_TIMESTAMP))


@st.composite
def _image(draw: Any, key_only: bool) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(sorted(_KINDS)), min_size=1, unique=True))
    return {name: draw(_value(_KINDS[name])) for name in (["id"] if key_only else names)}


@st.composite
def _dml(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(grammar.DML_TYPES))
    key_only = kind == "DELETE" and draw(st.booleans())
    data, old = grammar.IMAGES[kind]
    return {
        "version": 1,
        "database": DATABASE,
        "table": TABLE,
        "tableID": 7,
        "type": kind,
        "commitTs": draw(_LONG),
        "buildTs": draw(_LONG),
        "schemaVersion": VERSION,
        "claimCheckLocation": None,
        "handleKeyOnly": True if key_only else None,
        "checksum": None,
        "data": draw(_image(False)) if data else None,
        "old": draw(_image(key_only)) if old else None,
    }


@st.composite
def _other_table(draw: Any) -> dict[str, Any]:
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    columns = [(n, draw(st.sampled_from(_TYPE_NAMES)), draw(st.booleans())) for n in names]
    return _table_schema("other", draw(NAMES), columns, draw(_LONG))


@st.composite
def _ddl(draw: Any) -> dict[str, Any]:
    tables = st.none() | _other_table()
    return {
        "version": 1,
        "type": draw(st.sampled_from(grammar.DDL_TYPES)),
        "sql": "ALTER TABLE t" + draw(NAMES),
        "commitTs": draw(_LONG),
        "buildTs": draw(_LONG),
        "tableSchema": draw(tables),
        "preTableSchema": draw(tables),
    }


_PAYLOADS = {
    "Watermark": st.builds(
        lambda ts, b: {"version": 1, "commitTs": ts, "buildTs": b}, _LONG, _LONG
    ),
    "Bootstrap": st.builds(
        lambda b, t: {"version": 1, "buildTs": b, "tableSchema": t}, _LONG, _other_table()
    ),
    "DDL": _ddl(),
    "DML": _dml(),
}
_CHECKSUM = {"version": 1, "corrupted": False, "current": 1, "previous": 0}
_SCHEMA = avro_tree.Schema(
    avro_tree.named_types(
        json.loads(
            resources.files("streams.codecs").joinpath("simple_avro_schema.json").read_text()
        )
    ),
    {N + name: payload for name, payload in _PAYLOADS.items()}
    | {
        N + "Timestamp": st.just(_TIMESTAMP)
        | st.builds(lambda v: {"location": "", "value": v}, NAMES),
        N + "UnsignedBigint": st.sampled_from((0, 5, -1, 1 << 32)).map(lambda v: {"value": v}),
        N + "Checksum": st.just(_CHECKSUM),
        N + "TableSchema": _other_table(),
        N + "ColumnSchema": st.just(_column("id", "bigint", False, False)),
        N + "IndexSchema": st.just(
            {"name": "i", "unique": False, "primary": False, "nullable": True, "columns": ["nope"]}
        ),
    },
    ("id", "c", "nope", "x" * 65, "bigint", "vector", " "),
)


def _message(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "payload": Branch(N + _RECORDS[kind], payload)}


def _valid() -> st.SearchStrategy[dict[str, Any]]:
    kinds = st.sampled_from(["WATERMARK", "BOOTSTRAP", "DDL", "DML", "DML", "DML"])
    return kinds.flatmap(lambda k: _PAYLOADS[_RECORDS[k]].map(lambda p: _message(k, p)))


def _combine(draw: Any, message: dict[str, Any]) -> None:
    """A message type over another type's payload, or in a DML an image its type never
    carries, whole rows marked as holding the handle key only, a column its table lacks beside
    the others, a checksum (accepted: nothing reads it)."""
    payload = message["payload"].value
    choices = ["type", "none"]
    if message["type"] == "DML":
        choices = ["type", "data", "old", "handleKeyOnly", "checksum", "column"]
    choice = draw(st.sampled_from(choices))
    if choice == "type":
        message["type"] = draw(st.sampled_from([k for k in _RECORDS if k != message["type"]]))
    elif choice == "handleKeyOnly":
        payload[choice] = True
    elif choice == "checksum":
        payload[choice] = dict(_CHECKSUM)
    elif choice == "column":
        image = payload["data"] if payload["data"] is not None else payload["old"]
        image[draw(NAMES.filter(lambda n: n not in _KINDS))] = Branch("string", "1")
    elif choice != "none":
        payload[choice] = draw(_image(False))


@st.composite
def _changed(draw: Any, message: dict[str, Any]) -> dict[str, Any]:
    how = draw(st.integers(0, 6))
    if how == 0:
        return message
    if how == 1:
        combined = copy.deepcopy(message)
        _combine(draw, combined)
        return combined
    if how == 2:
        changed: dict[str, Any] = draw(avro_tree.mutated(_SCHEMA, N + "Message", message, 5))
        return changed
    # Most mutations within the payload: the message's own two members would take a good part.
    payload = message["payload"]
    inner = draw(avro_tree.mutated(_SCHEMA, payload.name, payload.value, 5))
    return {"type": message["type"], "payload": Branch(payload.name, inner)}


def messages() -> st.SearchStrategy[Any]:
    """A fifth of the messages as TiCDC writes them, a fifth combining what it never writes
    together, a fifth mutated anywhere within the schema, the rest within their payload."""
    return _valid().flatmap(_changed)


def _written(message: Any) -> bytes | None:
    try:
        out = io.BytesIO()
        wrapped = (N + "Message", avro_tree.native(message))
        fastavro.schemaless_writer(out, avro_schema(), wrapped)
    except Exception:  # a datum the schema cannot hold: fastavro's many kinds of refusal
        return None
    return out.getvalue()


def encode(message: Any) -> tuple[bytes | None, bytes]:
    return None, _written(message) or b""


# --- the oracle --------------------------------------------------------------------------------


def oracle(message: Any) -> str | None:
    if _written(message) is None:
        return UNJUDGED
    payload = message["payload"]
    if N + _RECORDS[message["type"]] != payload.name:
        return grammar.MESSAGE_TYPE
    record = payload.value
    kind = record["type"] if message["type"] in ("DDL", "DML") else message["type"]
    if record["version"] != grammar.VERSION:
        return grammar.VERSION_RULE
    if kind == "WATERMARK":
        return None
    if kind == "BOOTSTRAP":
        return _schema_verdict(record["tableSchema"])
    if kind in grammar.IMAGES:
        return _dml_verdict(record, kind)
    if not record["sql"].strip():
        return grammar.SCHEMA_MESSAGE
    return _schema_verdict(record["tableSchema"]) or _schema_verdict(record["preTableSchema"])


def _schema_verdict(table: dict[str, Any] | None) -> str | None:
    """Rule table-schema's verdict: in Avro the fields' types are the schema's, what is left are
    the values (a long is any tableID and the uint64's bits of any version)."""
    if table is None:
        return None
    if not table["database"] or not table["table"] or not table["columns"]:
        return grammar.TABLE_SCHEMA
    names: list[str] = []
    for column in table["columns"]:
        name = column["name"]
        if not 0 < len(name) <= grammar.MAX_NAME or name in names:
            return grammar.TABLE_SCHEMA
        try:
            type_code(column["dataType"]["mysqlType"])  # the MySQL type names the project knows
        except ValueError:
            return grammar.TABLE_SCHEMA
        names.append(name)
    for index in table["indexes"]:
        if not index["columns"] or not all(m in names for m in index["columns"]):
            return grammar.TABLE_SCHEMA
    return None


def _dml_verdict(record: dict[str, Any], kind: str) -> str | None:
    if not record["database"] or not record["table"]:
        return grammar.DML_FIELDS
    if record["claimCheckLocation"]:
        return UNJUDGED
    images = []
    for field, carried in zip(("data", "old"), grammar.IMAGES[kind], strict=True):
        image = record[field]
        if carried != (image is not None) or (carried and not image):
            return grammar.ROW_IMAGES
        images.append(image)
    version = record["schemaVersion"] & _MASK64
    if (record["database"], record["table"], version) != (DATABASE, TABLE, VERSION):
        return UNJUDGED  # a table no message announced: MissingSchemaError, not a rule
    for image in images:
        for name, value in (image or {}).items():
            if name not in _KINDS:
                return grammar.IMAGE_COLUMNS
            if value is not None and not _value_valid(_KINDS[name], value):
                return grammar.COLUMN_VALUE
    if record["handleKeyOnly"] and any(i is not None and set(i) != KEY for i in images):
        return grammar.HANDLE_KEY_ONLY
    return None


def _value_valid(kind: str, value: Branch) -> bool:
    """Whether ``value`` is of the branch TiCDC writes for a column of ``kind`` (an integer's:
    a long, or the UnsignedBigint record of the same bits) and within its type's range."""
    branch, raw = value.name, value.value
    if kind in ("int64", "uint32", "uint64"):
        if branch == N + "UnsignedBigint":
            number = raw["value"] & _MASK64
        elif branch == "long":
            number = raw if kind == "int64" else raw & _MASK64
        else:
            return False
        bound = {"int64": 1 << 63, "uint32": 1 << 32, "uint64": 1 << 64}[kind]
        return bool(number < bound)
    if kind == "double":
        return branch in ("float", "double")
    if kind == "timestamp":
        return branch == N + "Timestamp"
    if branch == "bytes":
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return True  # text of another charset: its bytes, bounded downstream
    return branch in ("string", "bytes") and len(raw) <= 10


def _python() -> Decode:
    codec = SimpleAvroCodec()
    bootstrap = _message("BOOTSTRAP", {"version": 1, "buildTs": 0, "tableSchema": ANNOUNCED})
    codec.decode(None, encode(bootstrap)[1])
    return codec.decode


SUBJECT = Subject("simple-avro", messages, oracle, encode, _python, lambda: None)
