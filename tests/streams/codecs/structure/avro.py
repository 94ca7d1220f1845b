"""TiCDC's Avro protocol in the structural fuzz: rows (their value and key schemas and records),
deletes (a key alone), DDL (its JSON) and checkpoints generated as TiCDC's encoder writes them
(streams/codecs/avro_grammar.py), the trees' structure mutated (tests/streams/codecs/structure/
mutate.py), then written again: each message's schemas registered in a registry of its own, its
records written under them by fastavro. Judged by :func:`verdict`, the fuzz's own reading of the
rules in the order the decoder reads them. A record its mutated schema cannot hold (a string
where the schema now says int) has no bytes: unjudged. There is no native decoder."""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import fastavro
from hypothesis import strategies as st

from streams.codecs import avro_grammar as grammar
from streams.codecs.avro import AvroCodec, MemoryRegistry
from tests.streams.codecs.structure.judge import NOT_JSON, UNJUDGED, Decode, Subject
from tests.streams.codecs.structure.mutate import ALL, ALPHABET, NAMES, Mutations, dumps, mutated

# Refused by an error that is not the grammar's (framing, a value schema without the extension,
# an update of a table without a key): the judge takes any project error for it.
PLAIN = NOT_JSON
# The tidb_types generated and the Avro types TiCDC writes for each (types.py's table).
_AVRO_TYPES = {
    "INT": ("int",),
    "BIGINT": ("long", "string"),
    "DOUBLE": ("double",),
    "TEXT": ("string",),
}
_VALUES = {
    "INT": st.integers(-(1 << 31), (1 << 31) - 1),
    "BIGINT": st.integers(-(1 << 63), (1 << 63) - 1),
    "DOUBLE": st.floats(allow_nan=False),
    "TEXT": st.text(ALPHABET, max_size=8),
}
_EXTENSION = ("_tidb_op", "_tidb_commit_ts", "_tidb_commit_physical_time")
_KNOWN = {
    "schema", "key_schema", "record", "key", "ddl", "checkpoint", "raw", "type", "name",
    "namespace", "fields", "connect.parameters", "tidb_type", "query", "table", "commitTs",
    *_EXTENSION,
}  # fmt: skip
_TS = st.integers(0, (1 << 64) - 1)
_NAME = st.text(st.sampled_from("abcXYZ_"), min_size=1, max_size=6)


def _column_schema(name: str, tidb: str, nullable: bool) -> dict[str, Any]:
    primitive = {"type": _AVRO_TYPES[tidb][0], "connect.parameters": {"tidb_type": tidb}}
    if nullable:
        return {"name": name, "type": ["null", primitive], "default": None}
    return {"name": name, "type": primitive}


@st.composite
def _row(draw: Any) -> dict[str, Any]:
    names = draw(st.lists(_NAME, min_size=1, max_size=3, unique=True))
    tidb = {n: draw(st.sampled_from(sorted(_AVRO_TYPES))) for n in names}
    nullable = {n: draw(st.booleans()) for n in names}
    columns = [_column_schema(n, tidb[n], nullable[n] and i > 0) for i, n in enumerate(names)]
    extension = [
        {"name": "_tidb_op", "type": "string"},
        {"name": "_tidb_commit_ts", "type": "long"},
        {"name": "_tidb_commit_physical_time", "type": "long"},
    ]
    record_schema = {"type": "record", "name": "t", "namespace": "default.db"}
    values = {n: draw(_VALUES[tidb[n]]) for n in names}
    keyed = draw(st.booleans())
    key_schema = {**record_schema, "fields": columns[:1]} if keyed else None
    key = {names[0]: values[names[0]]} if keyed else None
    if keyed and draw(st.integers(0, 3)) == 0:
        return {"key_schema": key_schema, "key": key}  # a delete: its key alone
    record = {
        **values,
        "_tidb_op": draw(st.sampled_from(["c", "u"] if keyed else ["c"])),
        "_tidb_commit_ts": draw(st.integers(0, (1 << 63) - 1)),
        "_tidb_commit_physical_time": 0,
    }
    schema = {**record_schema, "fields": columns + extension}
    return {"schema": schema, "key_schema": key_schema, "record": record, "key": key}


@st.composite
def _other(draw: Any) -> dict[str, Any]:
    """A checkpoint, a DDL or a value of no kind TiCDC writes (its first byte past 2)."""
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return {"checkpoint": draw(_TS)}
    if kind == 1:
        return {"raw": draw(st.integers(3, 255))}
    ddl = {
        "query": "CREATE TABLE t" + draw(st.text(ALPHABET, max_size=8)),
        "type": draw(st.integers(0, 70)),
        "schema": draw(NAMES),
        "table": draw(st.just("") | NAMES),
        "commitTs": draw(_TS),
    }
    return {"ddl": ddl}


def _combine(draw: Any, node: Any) -> bool:
    """Parts TiCDC never writes together: an op d in a record (a delete is a key alone), a key
    of another table, a value schema without the extension's commit ts, a DDL or checkpoint
    beside a record."""
    if not isinstance(node, dict):
        return False
    choices = [m for m in ("ddl", "checkpoint", "record") if m in node]
    if isinstance(node.get("record"), dict):
        choices.append("op")
    if isinstance(node.get("key_schema"), dict):
        choices.append("key")
    if isinstance(node.get("schema"), dict) and isinstance(node["schema"].get("fields"), list):
        choices.append("extension")
    if not choices:
        return False
    choice = draw(st.sampled_from(choices))
    if choice == "op":
        node["record"]["_tidb_op"] = "d"
    elif choice == "key":
        node["key_schema"]["name"] = "u"
    elif choice == "extension":
        fields = node["schema"]["fields"]
        node["schema"]["fields"] = [
            f for f in fields if f != {"name": "_tidb_commit_ts", "type": "long"}
        ]
    else:
        node[choice] = {"query": "x"} if choice == "ddl" else 5 if choice == "checkpoint" else {}
    return True


MUTATIONS = Mutations(frozenset(_KNOWN), _combine, ALL)


def messages() -> st.SearchStrategy[Any]:
    """One message: a fifth as TiCDC writes it, a fifth with parts TiCDC never writes together
    (:func:`_combine` on the message itself: mutations reach a member of the message's own
    rarely, among the many of its schemas), the rest structurally mutated."""
    valid = (_row() | _row() | _other()).map(lambda m: [m])
    return valid.flatmap(lambda m: st.integers(0, 4).flatmap(lambda n: _changed(m, n))).map(
        lambda doc: doc[0]
    )


@st.composite
def _changed(draw: Any, doc: list[Any], how: int) -> list[Any]:
    if how == 0:
        return doc
    if how == 1:
        combined = copy.deepcopy(doc)
        return combined if _combine(draw, combined[0]) else doc
    return list(draw(mutated(doc, MUTATIONS)))


def _int(value: Any) -> bool:
    """Whether ``value`` is an integer as orjson reads one (past 64 bits: a float)."""
    return type(value) is int and -(1 << 63) <= value < 1 << 64


def _schema_verdict(schema: Any) -> str | None:
    """Rule record-schema's verdict on a registered schema."""
    try:
        fastavro.parse_schema(json.loads(json.dumps(schema)))
    except Exception:  # fastavro's many kinds of refusal
        return grammar.RECORD_SCHEMA
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return grammar.RECORD_SCHEMA
    _, dot, database = str(schema.get("namespace", "")).partition(".")
    fields = schema.get("fields", ())
    if any(type(f["name"]) is not str for f in fields):
        return grammar.RECORD_SCHEMA
    columns = [f for f in fields if not f["name"].startswith("_tidb_")]
    if not dot or not database or not columns:
        return grammar.RECORD_SCHEMA
    return None if all(_column_valid(f["type"]) for f in columns) else grammar.RECORD_SCHEMA


def _column_valid(avro_type: Any) -> bool:
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        if len(branches) != 1:
            return False
        avro_type = branches[0]
    parameters = avro_type.get("connect.parameters") if isinstance(avro_type, dict) else None
    if not isinstance(parameters, dict):
        return False
    allowed = _AVRO_TYPES.get(str(parameters.get("tidb_type")))
    return allowed is not None and avro_type.get("type") in allowed


def _written(schema: Any, record: Any) -> bytes | None:
    """``record`` in Avro binary under ``schema``; None when the schema cannot hold it."""
    try:
        parsed = fastavro.parse_schema(json.loads(json.dumps(schema)))
        if not fastavro.validation.validate(record, parsed, raise_errors=False):
            return None
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
    except Exception:  # a schema or record fastavro refuses
        return None
    return out.getvalue()


def verdict(message: Any) -> str | None:
    """The rule ``message`` breaks, None when valid, UNJUDGED when it cannot be written."""
    if not isinstance(message, dict):
        return UNJUDGED
    if "ddl" in message:
        return _ddl_verdict(message["ddl"])
    if "checkpoint" in message:
        return None if len(encode(message)[1]) == 9 else grammar.CHECKPOINT
    if "raw" in message:
        first = encode(message)[1][0]
        return grammar.VALUE_KIND if first > 2 else grammar.CHECKPOINT if first == 2 else PLAIN
    has_key = message.get("key_schema") is not None and message.get("key") is not None
    if "schema" not in message or "record" not in message:
        if not has_key:
            return grammar.DELETE_KEY
        broken = _schema_verdict(message["key_schema"])
        if broken is None and _written(message["key_schema"], message["key"]) is None:
            return UNJUDGED
        return broken
    return _row_verdict(message, has_key)


def _row_verdict(message: dict[str, Any], has_key: bool) -> str | None:
    schema, record = message["schema"], message["record"]
    broken = _schema_verdict(schema)
    if broken is not None:
        return broken
    names = {f["name"] for f in schema["fields"]}
    if not {"_tidb_op", "_tidb_commit_ts"} <= names:
        return PLAIN
    if has_key:
        key_schema = message["key_schema"]
        broken = _schema_verdict(key_schema)
        if broken is not None:
            return broken
        same = all(key_schema.get(n) == schema.get(n) for n in ("name",))
        same = (
            same
            and str(key_schema["namespace"]).partition(".")[2]
            == str(schema["namespace"]).partition(".")[2]
        )
        columns = {f["name"] for f in key_schema["fields"] if not f["name"].startswith("_tidb_")}
        if not same or not columns <= names:
            return grammar.KEY_RECORD
    if _written(schema, record) is None or (
        has_key and _written(message["key_schema"], message["key"]) is None
    ):
        return UNJUDGED
    op = record.get("_tidb_op")
    if op not in ("c", "u"):
        return grammar.OP
    return PLAIN if op == "u" and not has_key else None


def _ddl_verdict(ddl: Any) -> str | None:
    if not isinstance(ddl, dict):
        return grammar.DDL
    for name, kind in (
        ("query", str),
        ("type", int),
        ("schema", str),
        ("table", str),
        ("commitTs", int),
    ):
        value = ddl.get(name)
        if (kind is int and not _int(value)) or (kind is str and type(value) is not str):
            return grammar.DDL
    if not ddl["commitTs"] >= 0 or not ddl["query"].strip():
        return grammar.DDL
    return None


class _Registries:
    """The registry of the message :func:`encode` wrote last, which the decoder reads: each
    message's schemas under ids of their own."""

    current = MemoryRegistry()


def encode(message: Any) -> tuple[bytes | None, bytes]:
    """The message's key and value, its schemas registered in a registry of its own."""
    registry = _Registries.current = MemoryRegistry()
    if "ddl" in message:
        return None, b"\x01" + dumps(message["ddl"])
    if "checkpoint" in message:
        ts = message["checkpoint"]
        return None, b"\x02" + (ts.to_bytes(8, "big") if _int(ts) and ts >= 0 else dumps(ts))
    if "raw" in message:
        first = message["raw"]
        return None, (bytes((first % 256,)) if type(first) is int else dumps(first)) + b"x"
    key = None
    if message.get("key_schema") is not None and message.get("key") is not None:
        key_id = registry.register("key", json.dumps(message["key_schema"]))
        written = _written(message["key_schema"], message["key"]) or b""
        key = b"\x00" + key_id.to_bytes(4, "big") + written
    if "schema" not in message or "record" not in message:
        return key, b""
    value_id = registry.register("value", json.dumps(message["schema"]))
    record = _written(message["schema"], message["record"]) or b""
    return key, b"\x00" + value_id.to_bytes(4, "big") + record


def _python() -> Decode:
    return lambda key, value: AvroCodec(_Registries.current).decode(key, value)


SUBJECT = Subject("avro", messages, verdict, encode, _python, lambda: None)
