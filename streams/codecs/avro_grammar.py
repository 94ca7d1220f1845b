"""TiCDC's Avro grammar (a Confluent schema registry): what its encoder writes around and in its
records, as rules the decoder (``streams/codecs/avro/``) enforces.

Taken from tiflow's encoder, ``pkg/sink/codec/avro/avro.go``: a row is a Confluent frame (the
byte 0, the schema's registry id, the record) as its value, the handle key's columns framed the
same way as its key; a delete is the key with no value; ``_tidb_op`` is "c" or "u"
(``enable-tidb-extension``); with ``avro-enable-watermark`` a DDL is the byte 1 and the JSON
``ddlEvent`` (``query``, ``type``, ``schema``, ``table``, ``commitTs``) and a checkpoint the byte
2 and its ts in 8 bytes (``ddlByte``, ``checkpointByte``); its ``columnToAvroSchema``: each
column a record field whose type is an Avro primitive (nullable: in a union with "null") carrying
``connect.parameters.tidb_type``, the record named after the table in the namespace
``<changefeed namespace>.<schema>``, the key's record of the same table; and
``pkg/sink/codec/avro/confluent_schema_registry.go`` (the frame's magic byte and 4-byte id).
A message breaking a rule is refused with :class:`~config.errors.GrammarError` naming it (its
dead letter); docs/architecture.md shows :func:`markdown`'s table,
tests/streams/codecs/test_avro_grammar.py runs every example through the decoder.

Examples are (key, value, schema): frames naming the registry ids :data:`KEY_ID` and
:data:`VALUE_ID` (the schemas :data:`KEY_SCHEMA` and :data:`VALUE_SCHEMA` registered in that
order), and :data:`OTHER_ID` for ``schema`` where one is given (registered third).

Deviations that are harmless, and so accepted: a field the decoder does not read in a schema
(``default``, ``doc``, other ``connect.parameters``), the extension's other ``_tidb_`` fields, a
DDL JSON member the grammar does not name. Refused are the shapes that would be applied as
something TiCDC never meant: a value of another kind, a schema whose columns cannot say how their
values read, an op other than insert or update (a delete has no value), a key of other columns or
another table than its value's, a message with neither key nor value, a checkpoint of another
length, a DDL without its statement or ts. Bytes that do not frame or read as their record stay
plain decode errors (framing, not shape), as does a value schema without the extension (a
``ConfigError`` naming the changefeed setting: every message of the changefeed breaks it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from config.errors import GrammarError
from streams.codecs import grammar
from streams.codecs.grammar import Rule

PROTOCOL = "avro"

VALUE_KIND = "value-kind"
DELETE_KEY = "delete-key"
CHECKPOINT = "checkpoint"
DDL = "ddl-json"
RECORD_SCHEMA = "record-schema"
KEY_RECORD = "key-record"
OP = "op"

KEY_ID, VALUE_ID, OTHER_ID = 1, 2, 3
_INT = {"type": "int", "connect.parameters": {"tidb_type": "INT"}}
_TEXT = {"type": "string", "connect.parameters": {"tidb_type": "TEXT"}}
_EXTENSION = [
    {"name": "_tidb_op", "type": "string"},
    {"name": "_tidb_commit_ts", "type": "long"},
    {"name": "_tidb_commit_physical_time", "type": "long"},
]
_ID = {"name": "id", "type": _INT}
_V = {"name": "v", "type": ["null", _TEXT], "default": None}


def _record(fields: Sequence[object], name: str = "t", namespace: str = "default.db") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": namespace, "fields": fields})


KEY_SCHEMA = _record([_ID])
VALUE_SCHEMA = _record([_ID, _V, *_EXTENSION])


def _frame(schema_id: int, record: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + record


# id 1 (zigzag 2), v "a" (branch 1), op "c", commit ts 5 (zigzag 10), physical time 0.
_RECORD = b"\x02" + b"\x02\x02a" + b"\x02c" + b"\x0a" + b"\x00"
KEY = _frame(KEY_ID, b"\x02")
ROW = _frame(VALUE_ID, _RECORD)
_DDL = {"query": "CREATE TABLE t (id INT)", "type": 3, "schema": "db", "table": "t", "commitTs": 5}

# A rule's examples: (key, value, a schema registered as OTHER_ID or None).
Example = tuple[bytes | None, bytes, str | None]


def _ddl(**changed: object) -> bytes:
    body = {name: value for name, value in {**_DDL, **changed}.items() if value is not _DROP}
    return b"\x01" + json.dumps(body).encode()


_DROP = object()


def _other(schema: str, record: bytes = _RECORD) -> Example:
    """A row whose value names ``schema``."""
    return KEY, _frame(OTHER_ID, record), schema


RULES: tuple[Rule[Example], ...] = (
    Rule(
        VALUE_KIND,
        "value",
        "empty (a delete), or its first byte 0 (a row in Confluent's frame), 1 (a DDL) or 2 (a "
        "checkpoint)",
        ((KEY, b"\x03" + _RECORD, None), (None, b"{}", None)),
    ),
    Rule(
        DELETE_KEY,
        "key of a delete",
        "there: a delete is its handle key's columns and no value",
        ((None, b"", None), (b"", b"", None)),
    ),
    Rule(
        CHECKPOINT,
        "checkpoint",
        "the byte 2 and the ts in 8 bytes, nothing more",
        ((None, b"\x02\x00\x05", None), (None, b"\x02" + bytes(9), None)),
    ),
    Rule(
        DDL,
        "DDL",
        "the byte 1 and a JSON object: `query` a non-empty string, `type` an integer, `schema` "
        "and `table` strings, `commitTs` an integer 0..2^64-1",
        (
            (None, b"\x01[]", None),
            (None, _ddl(query=""), None),
            (None, _ddl(query=_DROP), None),
            (None, _ddl(type="3"), None),
            (None, _ddl(table=None), None),
            (None, _ddl(commitTs=-1), None),
            (None, _ddl(commitTs=True), None),
        ),
    ),
    Rule(
        RECORD_SCHEMA,
        "registered schema",
        "an Avro record in the namespace `<namespace>.<schema>`, of at least one column; each "
        "column an Avro primitive (or a union of one with null) carrying "
        "`connect.parameters.tidb_type`, of the Avro type TiCDC writes for that type",
        (
            _other(_record([{"name": "id", "type": "int"}, _V, *_EXTENSION])),
            _other(_record([{"name": "id", "type": ["int", "string"]}, _V, *_EXTENSION])),
            _other(_record([{"name": "id", "type": {**_INT, "type": "string"}}, _V, *_EXTENSION])),
            _other(_record([_ID, _V, *_EXTENSION], namespace="db")),
            _other(_record(_EXTENSION), _RECORD[4:]),
            _other(json.dumps({"type": "string"}), b"\x02a"),
        ),
    ),
    Rule(
        KEY_RECORD,
        "row key",
        "where present, a frame of the same table's record, of columns the value has (the "
        "handle key's)",
        (
            (_frame(OTHER_ID, b"\x02"), ROW, _record([{"name": "k", "type": _INT}])),
            (_frame(OTHER_ID, b"\x02"), ROW, _record([_ID], name="u")),
        ),
    ),
    Rule(
        OP,
        "`_tidb_op`",
        '"c" (an insert) or "u" (an update)',
        ((KEY, ROW.replace(b"\x02c", b"\x02d"), None), (KEY, ROW.replace(b"\x02c", b"\x00"), None)),
    ),
)

# Messages as TiCDC writes them, from which the examples above differ by one rule each.
VALID: tuple[Example, ...] = (
    (KEY, ROW, None),
    (KEY, ROW.replace(b"\x02c", b"\x02u"), None),
    (KEY, b"", None),
    (None, _ddl(), None),
    (None, b"\x02" + bytes(7) + b"\x05", None),
)

# Deviations the decoder accepts, and why (each decodes as the message without it would).
ACCEPTED: tuple[tuple[str, Example], ...] = (
    ("a DDL JSON member the grammar does not name", (None, _ddl(charset="utf8mb4"), None)),
    ("a DDL of a database (no table)", (None, _ddl(table=""), None)),
    (
        "schema members the decoder does not read",
        _other(_record([{**_ID, "doc": "x"}, {**_V, "aliases": []}, *_EXTENSION])),
    ),
    ("a row of a table without a handle key (no key)", (None, ROW, None)),
)


def markdown() -> str:
    """The rules as the Markdown table docs/architecture.md holds."""
    return grammar.markdown(RULES)


def broken(rule: str, reason: str, where: str | None = None) -> GrammarError:
    """The error of a message breaking ``rule``."""
    return GrammarError(PROTOCOL, rule, reason, event_index=0, where=where)
