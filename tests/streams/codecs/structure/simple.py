"""Simple (JSON) in the structural fuzz: messages generated from its grammar
(streams/codecs/simple_grammar.py): watermarks, DML of one announced table (every image shape,
handle-key-only deletes, values of each column type), BOOTSTRAP and DDL messages with table schemas
of their own (other tables: the announced one never changes); their structure mutated
(mutate.py), judged by :func:`oracle`, the fuzz's own reading of the rules."""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from hypothesis import strategies as st

from streams.codecs import simple_grammar as grammar
from streams.codecs.simple import SimpleJSONCodec
from streams.codecs.simple_schema import type_code
from tests.streams.codecs.structure.judge import UNJUDGED, Decode, Subject
from tests.streams.codecs.structure.mutate import ALL, ALPHABET, NAMES, Mutations, dumps, mutated

DATABASE, TABLE, VERSION = "db", "fixed table", 3
# The announced table: name, mysqlType, what its values are.
COLUMNS = (
    ("id", "bigint", "int64"),
    ("c", "varchar", "text10"),
    ("u", "int unsigned", "uint32"),
    ("d", "double", "float"),
    ("ts", "timestamp", "timestamp"),
)
KEY = frozenset({"id"})
_TYPE_NAMES = ["bigint", "int unsigned", "varchar", "double", "timestamp", "blob", "json", "bit"]
_INTEGER = re.compile(r"-?[0-9]+")
_KNOWN = {"version", "type", "commitTs", "buildTs", "database", "table", "tableID"}
_KNOWN |= {"schemaVersion", "handleKeyOnly", "claimCheckLocation", "data", "old", "sql"}
_KNOWN |= {"tableSchema", "preTableSchema", "schema", "columns", "indexes", "name", "dataType"}
_KNOWN |= {"mysqlType", "charset", "collate", "length", "decimal", "elements", "unsigned"}
_KNOWN |= {"zerofill", "nullable", "default", "unique", "primary", "location", "value"}


def _table_schema(name: str, columns: list[tuple[str, str]], version: int) -> dict[str, Any]:
    return {
        "schema": DATABASE,
        "table": name,
        "tableID": 7,
        "version": version,
        "columns": [
            {
                "name": column,
                "dataType": {"mysqlType": kind, "charset": "utf8mb4", "collate": "utf8mb4_bin"}
                | ({"length": 10} if kind == "varchar" else {}),
                "nullable": column != columns[0][0],
                "default": None,
            }
            for column, kind in columns
        ],
        "indexes": [
            {
                "name": "primary",
                "unique": True,
                "primary": True,
                "nullable": False,
                "columns": [columns[0][0]],
            }
        ],
    }


ANNOUNCED = _table_schema(TABLE, [(name, kind) for name, kind, _ in COLUMNS], VERSION)
_HEAD = {"version": 1, "buildTs": 0}


# --- generation -------------------------------------------------------------------------------


@st.composite
def _value(draw: Any, kind: str) -> Any:
    if draw(st.integers(0, 6)) == 0:
        return None
    if kind == "int64":
        number = draw(st.integers(-(1 << 63), (1 << 63) - 1))
        return draw(st.sampled_from([str(number), number]))
    if kind == "uint32":
        return str(draw(st.integers(0, (1 << 32) - 1)))
    if kind == "text10":
        return draw(st.text(ALPHABET, max_size=10))
    if kind == "float":
        return repr(draw(st.floats(allow_nan=False, allow_infinity=False)))
    return {"location": "UTC", "value": "2020-01-02 03:04:05"}


@st.composite
def _image(draw: Any, key_only: bool) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(COLUMNS), min_size=1, unique=True))
    chosen = [c for c in COLUMNS if c[0] == "id"] if key_only else names
    return {name: draw(_value(kind)) for name, _, kind in chosen}


@st.composite
def _dml(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(grammar.DML_TYPES))
    key_only = kind == "DELETE" and draw(st.booleans())
    message = _HEAD | {"database": DATABASE, "table": TABLE, "tableID": 7, "type": kind}
    message |= {"commitTs": draw(st.integers(0, (1 << 64) - 1)), "schemaVersion": VERSION}
    if key_only:
        message["handleKeyOnly"] = True
    data, old = grammar.IMAGES[kind]
    if data:
        message["data"] = draw(_image(False))
    if old:
        message["old"] = draw(_image(key_only))
    return message


@st.composite
def _schema_message(draw: Any) -> dict[str, Any]:
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    columns = [(name, draw(st.sampled_from(_TYPE_NAMES))) for name in names]
    table = _table_schema(draw(NAMES), columns, draw(st.integers(0, (1 << 64) - 1)))
    ts = draw(st.integers(0, (1 << 64) - 1))
    if draw(st.booleans()):
        return _HEAD | {"type": "BOOTSTRAP", "commitTs": 0, "tableSchema": table}
    kind = draw(st.sampled_from(grammar.DDL_TYPES))
    message = _HEAD | {"type": kind, "commitTs": ts, "sql": "ALTER TABLE t" + draw(NAMES)}
    if draw(st.booleans()):
        message["tableSchema"] = table
    if draw(st.booleans()):
        message["preTableSchema"] = copy.deepcopy(table)
    return message


def _valid() -> st.SearchStrategy[dict[str, Any]]:
    watermark = st.integers(0, (1 << 64) - 1).map(
        lambda ts: _HEAD | {"type": "WATERMARK", "commitTs": ts}
    )
    return st.one_of(watermark, _dml(), _dml(), _dml(), _schema_message())


def _combine(draw: Any, node: Any) -> bool:
    """An image a DML type never carries, a schema where none goes, or images of whole rows
    marked as holding the handle key only."""
    if not isinstance(node, dict) or not isinstance(node.get("type"), str):
        return False
    if node["type"] not in grammar.IMAGES:
        return False
    field = draw(st.sampled_from(["data", "old", "tableSchema", "handleKeyOnly"]))
    if field == "handleKeyOnly":
        node[field] = True
    else:
        node[field] = copy.deepcopy(ANNOUNCED) if field == "tableSchema" else draw(_image(False))
    return True


MUTATIONS = Mutations(frozenset(_KNOWN), _combine, ALL, (2, -1, "11111111111", 1 << 32))


def messages() -> st.SearchStrategy[Any]:
    """Valid messages, and twice as many structurally mutated ones (many mutations of a DML
    leave it valid: a value for another, a column dropped)."""
    changed = st.sampled_from([False, True, True])
    return st.tuples(_valid(), changed).flatmap(
        lambda pair: (
            mutated([pair[0]], MUTATIONS).map(lambda d: d[0]) if pair[1] else st.just(pair[0])
        )
    )


def encode(message: Any) -> tuple[bytes | None, bytes]:
    return None, dumps(message)


# --- the oracle --------------------------------------------------------------------------------


def oracle(message: Any) -> str | None:
    if not isinstance(message, dict):
        return grammar.MESSAGE_OBJECT
    get = message.get
    if type(get("version")) is not int or get("version") != 1:
        return grammar.VERSION_RULE
    kind = get("type")
    if not isinstance(kind, str) or kind not in grammar.TYPES:
        return grammar.MESSAGE_TYPE
    ts = get("commitTs")
    build = get("buildTs")
    if type(ts) is not int or not 0 <= ts < 1 << 64 or type(build) is not int:
        return grammar.TS_FIELDS
    if not -(1 << 63) <= build < 1 << 63:
        return grammar.TS_FIELDS
    if kind == "WATERMARK":
        return None
    if kind == "BOOTSTRAP":
        return _schema_verdict(get("tableSchema"), required=True)
    if kind in grammar.IMAGES:
        return _dml_verdict(message, kind)
    if not isinstance(get("sql"), str) or not get("sql").strip():
        return grammar.SCHEMA_MESSAGE
    return _schema_verdict(get("tableSchema"), False) or _schema_verdict(
        get("preTableSchema"), False
    )


def _schema_verdict(table: Any, required: bool) -> str | None:
    if table is None and not required:
        return None
    if not isinstance(table, dict):
        return grammar.SCHEMA_MESSAGE
    return None if _schema_valid(table) else grammar.TABLE_SCHEMA


def _schema_valid(table: dict[str, Any]) -> bool:
    names_ok = all(isinstance(table.get(f), str) and table[f] for f in ("schema", "table"))
    table_id, version = table.get("tableID"), table.get("version")
    ints_ok = type(table_id) is int and -(1 << 63) <= table_id < 1 << 63
    ints_ok = ints_ok and type(version) is int and 0 <= version < 1 << 64
    columns, indexes = table.get("columns"), table.get("indexes")
    if not names_ok or not ints_ok or not isinstance(columns, list) or not columns:
        return False
    if not isinstance(indexes, list):
        return False
    names: list[str] = []
    for column in columns:
        if not isinstance(column, dict) or not _column_valid(column, names):
            return False
        names.append(column["name"])
    return all(_index_valid(index, names) for index in indexes)


_OPTIONAL = {"charset": (str,), "collate": (str,), "length": (int,), "decimal": (int,)}
_OPTIONAL |= {"elements": (list,), "unsigned": (bool,), "zerofill": (bool,)}


def _column_valid(column: dict[str, Any], names: list[str]) -> bool:
    name, data_type = column.get("name"), column.get("dataType")
    if not isinstance(name, str) or not 0 < len(name) <= grammar.MAX_NAME or name in names:
        return False
    if not isinstance(data_type, dict) or not isinstance(data_type.get("mysqlType"), str):
        return False
    try:
        type_code(data_type["mysqlType"])  # the MySQL type names, as the project knows them
    except ValueError:
        return False
    for field, kinds in _OPTIONAL.items():
        value = data_type.get(field)
        if value is not None and (type(value) not in kinds):
            return False
    elements = data_type.get("elements")
    if elements is not None and not all(type(e) is str for e in elements):
        return False
    default = column.get("default")
    scalar = default is None or type(default) in (str, int, float, bool)
    return type(column.get("nullable")) is bool and scalar


def _index_valid(index: Any, names: list[str]) -> bool:
    if not isinstance(index, dict) or type(index.get("name")) is not str:
        return False
    members = index.get("columns")
    if not isinstance(members, list) or not members:
        return False
    if not all(type(m) is str and m in names for m in members):
        return False
    flags = (index.get(f) for f in ("unique", "primary", "nullable"))
    return all(f is None or type(f) is bool for f in flags)


def _dml_verdict(message: dict[str, Any], kind: str) -> str | None:
    get = message.get
    if not all(type(get(f)) is str and get(f) for f in ("database", "table")):
        return grammar.DML_FIELDS
    version = get("schemaVersion")
    if version is not None and (type(version) is not int or not 0 <= version < 1 << 64):
        return grammar.DML_FIELDS
    table_id = get("tableID")
    if table_id is not None and (type(table_id) is not int or not -(1 << 63) <= table_id < 1 << 63):
        return grammar.DML_FIELDS
    for field, kind_of in (("handleKeyOnly", bool), ("claimCheckLocation", str)):
        if get(field) is not None and type(get(field)) is not kind_of:
            return grammar.DML_FIELDS
    if get("claimCheckLocation"):
        return UNJUDGED
    images = []
    for field, carried in zip(("data", "old"), grammar.IMAGES[kind], strict=True):
        image = get(field)
        if carried != (image is not None):
            return grammar.ROW_IMAGES
        if carried and (not isinstance(image, dict) or not image):
            return grammar.ROW_IMAGES
        images.append(image)
    if (get("database"), get("table"), version or 0) != (DATABASE, TABLE, VERSION):
        return UNJUDGED  # a table no message announced: MissingSchemaError, not a rule
    for image in images:
        broken = None if image is None else _image_verdict(image)
        if broken is not None:
            return broken
    if get("handleKeyOnly") and any(i is not None and set(i) != KEY for i in images):
        return grammar.HANDLE_KEY_ONLY
    return None


_KINDS = {name: kind for name, _, kind in COLUMNS}


def _image_verdict(image: dict[str, Any]) -> str | None:
    for name, value in image.items():
        if name not in _KINDS:
            return grammar.IMAGE_COLUMNS
        if value is not None and not _value_valid(_KINDS[name], value):
            return grammar.COLUMN_VALUE
    return None


def _value_valid(kind: str, value: Any) -> bool:
    if kind in ("int64", "uint32"):
        if type(value) is str and _INTEGER.fullmatch(value):
            value = int(value)
        if type(value) is not int:
            return False
        return -(1 << 63) <= value < 1 << 63 if kind == "int64" else 0 <= value < 1 << 32
    if kind == "text10":
        return type(value) is str and len(value) <= 10
    if kind == "float":
        if type(value) not in (str, int, float):
            return False
        try:
            float(value)
        except ValueError:
            return False
        return not isinstance(value, float) or math.isfinite(value)
    if isinstance(value, dict):
        value = value.get("value")
    return type(value) is str


def _announced(native: bool) -> SimpleJSONCodec:
    codec = SimpleJSONCodec(native=native)
    codec.decode(
        None, dumps(_HEAD | {"type": "BOOTSTRAP", "commitTs": 0, "tableSchema": ANNOUNCED})
    )
    row = {"id": "1", "c": "x", "u": "2", "d": "1.5", "ts": {"location": "UTC", "value": "x"}}
    codec.decode(
        None,
        dumps(
            _HEAD
            | {
                "database": DATABASE,
                "table": TABLE,
                "type": "INSERT",
                "commitTs": 1,
                "schemaVersion": VERSION,
                "data": row,
            }
        ),
    )
    return codec


def _python() -> Decode:
    return _announced(False).decode


def _native() -> list[Decode] | None:
    decoder = _announced(True)._native
    return None if decoder is None else [decoder.decode]


SUBJECT = Subject("simple", messages, oracle, encode, _python, _native)
