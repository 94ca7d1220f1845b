"""TiCDC's Debezium protocol in the structural fuzz: one message (key and value) at a time
generated from its grammar (streams/codecs/debezium_grammar.py) as TiCDC's encoder writes it
(rows with or without the value schema, schema changes with their table changes, watermarks),
its structure mutated (tests/streams/codecs/structure/mutate.py), judged by :func:`verdict`, the
fuzz's own reading of the rules in the order the decoder reads them. There is no native
decoder: the judge holds the Python codec to the grammar. Each message is decoded by a fresh
codec, so that a schema change's columns never type the rows of later cases."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from streams.codecs import debezium_grammar as grammar
from streams.codecs.debezium import DebeziumCodec
from tests.streams.codecs.structure.judge import Decode, Subject
from tests.streams.codecs.structure.mutate import (
    ALL,
    ALPHABET,
    NAMES,
    SCALARS,
    Mutations,
    dumps,
    mutated,
)

_SIDES = ("before", "after")
_ROWS = {"c", "r", "u", "d"}
# Connect types of the generated row schemas and the integers each takes (None: a string).
_CONNECT: dict[str, range | None] = {
    "int32": range(-(1 << 31), 1 << 31),
    "int64": range(-(1 << 63), 1 << 63),
    "string": None,
}
_TYPE_NAMES = ["INT", "BIGINT UNSIGNED", "VARCHAR", "TEXT", "DOUBLE", "DATETIME", "DECIMAL"]
_KNOWN = {
    "payload", "schema", "source", "db", "table", "commit_ts", "op", "before", "after", "ddl",
    "tableChanges", "type", "id", "columns", "name", "typeName", "length", "scale", "fields",
    "field", "optional", "charsetName",
}  # fmt: skip
_TS = st.integers(0, (1 << 64) - 1)


def _source(draw: Any, db: str, table: str) -> dict[str, Any]:
    """TiCDC's source block; three in four without the fields nothing here reads, so that
    mutations land more often where the grammar has rules."""
    if draw(st.integers(0, 3)):
        return {"db": db, "table": table, "commit_ts": draw(_TS)}
    return {
        "version": "2.4.0.Final",
        "connector": "TiCDC",
        "name": "default",
        "ts_ms": draw(st.integers(0, 1 << 44)),
        "snapshot": "false",
        "db": db,
        "table": table,
        "server_id": 0,
        "gtid": None,
        "file": "",
        "pos": 0,
        "row": 0,
        "thread": 0,
        "query": None,
        "commit_ts": draw(_TS),
        "cluster_id": "default",
    }


def _value(draw: Any, connect: str | None) -> Any:
    if connect is None:
        return draw(SCALARS)
    allowed = _CONNECT[connect]
    if allowed is None:
        return draw(st.none() | st.text(ALPHABET, max_size=8))
    return draw(st.none() | st.integers(allowed.start, allowed.stop - 1))


@st.composite
def _row(draw: Any) -> dict[str, Any]:
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    # Three in four with the value schema (debezium-disable-schema off, TiCDC's default): its
    # types give the values rules; without it any scalar is a value.
    typed = draw(st.integers(0, 3)) > 0
    types = {n: draw(st.sampled_from(sorted(_CONNECT))) if typed else None for n in names}
    keys = names[: draw(st.integers(0, len(names)))]
    op = draw(st.sampled_from(["c", "u", "d", "u", "r"]))

    def image() -> dict[str, Any]:
        return {n: _value(draw, types[n]) for n in names}

    db, table = draw(NAMES), draw(NAMES)
    payload = {
        "source": _source(draw, db, table),
        "op": op,
        "before": image() if op == "d" or (op == "u" and draw(st.booleans())) else None,
        "after": None if op == "d" else image(),
    }
    value: dict[str, Any] = {"payload": payload}
    if typed:
        # TiCDC's envelope, without the members nothing here reads (optional, name, version):
        # mutations land more often where the grammar has rules.
        fields = [{"type": types[n], "field": n} for n in names]
        value["schema"] = {
            "fields": [{"type": "struct", "field": side, "fields": fields} for side in _SIDES]
        }
    key = {"payload": {n: payload["after" if op != "d" else "before"][n] for n in keys}}
    return {"k": key if keys or draw(st.booleans()) else None, "v": value}


@st.composite
def _other(draw: Any) -> dict[str, Any]:
    """A schema change or a watermark."""
    db, table = draw(NAMES), draw(NAMES)
    if draw(st.booleans()):
        payload = {"source": _source(draw, "", ""), "op": "m", "ts_ms": 0, "transaction": None}
        return {"k": {"payload": {}}, "v": {"payload": payload}}
    columns = [
        {
            "name": name,
            "typeName": draw(st.sampled_from(_TYPE_NAMES)),
            "length": draw(st.none() | st.integers(0, 6)),
        }
        for name in draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    ]
    change = {"type": "CREATE", "id": f'"{db}"."{table}"', "table": {"columns": columns}}
    payload = {
        "source": _source(draw, db, table),
        "ts_ms": 0,
        "databaseName": db,
        "schemaName": None,
        "ddl": "CREATE TABLE t" + draw(st.text(ALPHABET, max_size=8)),
        "tableChanges": [change] if draw(st.integers(0, 3)) else [],
    }
    return {"k": {"payload": {"databaseName": db}}, "v": {"payload": payload}}


def _combine(draw: Any, node: Any) -> bool:
    """Images an op never carries, or a statement beside a row's op."""
    if not isinstance(node, dict) or "op" not in node:
        return False
    member = draw(st.sampled_from(["before", "after", "ddl"]))
    node[member] = "DROP TABLE t" if member == "ddl" else {"x": 1}
    return True


MUTATIONS = Mutations(frozenset(_KNOWN), _combine, ALL)


def messages() -> st.SearchStrategy[Any]:
    """One message ``{"k": key, "v": value}``: a sixth as TiCDC writes it, the rest with one to
    three structural mutations or, a third of them, two rounds of those (most members, a key's
    beside a schema change, a value's without a row schema, take most changes harmlessly)."""
    valid = (_row() | _other()).map(lambda m: [m])
    return valid.flatmap(lambda m: st.integers(0, 5).flatmap(lambda n: _changed(m, n))).map(
        lambda doc: doc[0]
    )


def _changed(message: list[Any], rounds: int) -> st.SearchStrategy[Any]:
    if rounds == 0:
        return st.just(message)
    once = mutated(message, MUTATIONS)
    return once if rounds < 4 else once.flatmap(lambda done: mutated(done, MUTATIONS))


# A message without its value (the "v" member dropped): an empty value, a tombstone.
_TOMBSTONE = object()


def _split(message: Any) -> tuple[Any, Any]:
    """A generated message's key and value trees (a retyped message: no key, that value)."""
    if not isinstance(message, dict):
        return None, message
    return message.get("k"), message.get("v", _TOMBSTONE)


def _int(value: Any) -> bool:
    return type(value) is int and -(1 << 63) <= value < 1 << 64


def _objects(items: Any) -> bool:
    return isinstance(items, list) and all(isinstance(item, dict) for item in items)


def verdict(message: Any) -> str | None:
    """The rule ``message`` (its key and value trees) breaks, None when it is valid."""
    key, value = _split(message)
    if value is _TOMBSTONE:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("payload"), dict):
        return grammar.MESSAGE
    if _schema_verdict(value.get("schema")):
        return grammar.VALUE_SCHEMA
    payload = value["payload"]
    source = payload.get("source")
    commit_ts = source.get("commit_ts") if isinstance(source, dict) else None
    if type(commit_ts) is not int or not -(1 << 63) <= commit_ts < 1 << 64:
        return grammar.SOURCE
    if any(type(source.get(name, "")) is not str for name in ("db", "table")):
        return grammar.SOURCE
    op = payload.get("op")
    if not (op is None or op == "" or (type(op) is str and op in (*_ROWS, "m"))):
        return grammar.OP
    if op in _ROWS:
        return _row_verdict(key, value, payload, op)
    if op == "m" or "ddl" not in payload:
        return None
    return _ddl_verdict(payload)


def _schema_verdict(schema: Any) -> bool:
    """Whether a value's schema breaks rule value-schema."""
    if schema is None:
        return False
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if not _objects(fields) or not all(_objects(f.get("fields", [])) for f in fields):
        return True
    return any(
        not _objects(f.get("fields")) or any(type(g.get("field")) is not str for g in f["fields"])
        for f in fields
        if f.get("field") in _SIDES
    )


def _row_verdict(key: Any, value: dict[str, Any], payload: dict[str, Any], op: str) -> str | None:
    source = payload["source"]
    if not source.get("db") or not source.get("table"):
        return grammar.ROW_TABLE
    fields = _row_fields(value.get("schema"))
    wanted = {"d": (True, False), "u": (None, True)}.get(op, (False, True))
    for side, there in zip(_SIDES, wanted, strict=True):
        image = payload.get(side)
        if there is not None and (image is not None) != there:
            return grammar.ROW_IMAGES
        if image is None:
            continue
        if not isinstance(image, dict) or not image:
            return grammar.IMAGE
        for name, item in image.items():
            if not 0 < len(name) <= 64 or (fields and name not in fields):
                return grammar.IMAGE
            if item is not None and type(item) not in (str, int, float, bool):
                return grammar.COLUMN_VALUE
    before, after = payload.get("before"), payload.get("after")
    if before is not None and after is not None and set(before) != set(after):
        return grammar.IMAGE
    if key is not None and (not isinstance(key, dict) or not isinstance(key.get("payload"), dict)):
        return grammar.KEY
    for image in (after, before):
        for name, item in (image or {}).items():
            if item is not None and not _typed(fields.get(name), item):
                return grammar.COLUMN_VALUE
    return None


def _row_fields(schema: Any) -> dict[str, Any]:
    """The first before/after struct's fields by name, as the decoder reads a row's types."""
    for struct in (schema or {}).get("fields") or ():
        if struct.get("field") in _SIDES:
            return {field["field"]: field for field in struct["fields"]}
    return {}


def _typed(field: Any, item: Any) -> bool:
    """Whether ``item`` is a value of the Connect ``field`` (None: no schema, any scalar)."""
    if field is None:
        return True
    kind = field.get("type")
    allowed = _CONNECT.get(kind) if type(kind) is str else None
    if allowed is None:
        return type(item) is str
    return type(item) is int and item in allowed


def _ddl_verdict(payload: dict[str, Any]) -> str | None:
    if type(payload.get("ddl")) is not str:
        return grammar.DDL
    changes = payload.get("tableChanges")
    if changes is not None and not _objects(changes):
        return grammar.TABLE_CHANGES
    for change in changes or ():
        ident, table = change.get("id"), change.get("table")
        if type(change.get("type")) is not str or type(ident) is not str:
            return grammar.TABLE_CHANGES
        first = ident[1:-1].split('","', 1)[0]
        if len(ident) < 5 or not ident[0] == ident[-1] == '"' or '"."' not in first:
            return grammar.TABLE_CHANGES
        if table is None:
            continue
        columns = table.get("columns") if isinstance(table, dict) else None
        if not _objects(columns) or not all(_column_valid(c) for c in columns):
            return grammar.TABLE_CHANGES
    return None


def _column_valid(column: dict[str, Any]) -> bool:
    name, type_name = column.get("name"), column.get("typeName")
    if type(name) is not str or not 0 < len(name) <= 64 or type_name not in _TYPE_NAMES:
        return False
    # orjson reads an integer past 64 bits as a float.
    if any(column.get(n) is not None and not _int(column.get(n)) for n in ("length", "scale")):
        return False
    return column.get("charsetName") is None or type(column.get("charsetName")) is str


def encode(message: Any) -> tuple[bytes | None, bytes]:
    key, value = _split(message)
    return (None if key is None else dumps(key)), b"" if value is _TOMBSTONE else dumps(value)


def _python() -> Decode:
    return lambda key, value: DebeziumCodec().decode(key, value)


SUBJECT = Subject("debezium", messages, verdict, encode, _python, lambda: None)
