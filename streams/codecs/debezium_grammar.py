"""TiCDC's Debezium grammar: what its encoder writes, as rules the decoder enforces, and the
checks that enforce the message's shape (the decoder's readers check the values).

Taken from tiflow's encoder, ``pkg/sink/codec/debezium/codec.go``: ``EncodeRowChangedEvent`` (a
value ``{"payload": {"source": {..., "db", "table", "commit_ts"}, "op", "before", "after"},
"schema"?}``; an insert writes ``op`` c, ``before`` null and ``after``, a delete ``op`` d,
``after`` null and ``before``, an update ``op`` u, ``after`` and, with
``debezium-output-old-value`` (the default), ``before``; each image an object of every column;
``schema`` unless ``debezium-disable-schema``), ``EncodeDDLEvent`` (``ddl`` the statement,
``tableChanges`` one change of ``type`` CREATE, ALTER or DROP, its ``id`` ``"db"."table"``, its
``table`` the columns) and ``EncodeCheckpointEvent`` (``op`` m), and
``pkg/sink/codec/debezium/encoder.go`` (the key: an object whose ``payload`` holds the handle
key's columns). The decoder (``streams/codecs/debezium.py``; there is no native one) refuses a
message breaking a rule with :class:`~config.errors.GrammarError` naming it (its dead letter).
docs/architecture.md shows :func:`markdown`'s table; tests/streams/codecs/test_debezium_grammar.py
runs every example through the decoder.

Deviations that are harmless, and so accepted: a field the grammar does not name (anywhere:
Debezium's ``transaction``, ``ts_ms``, source fields, later additions), an update without
``before`` (``debezium-output-old-value=false``), ``op`` r (Debezium's snapshot read, an insert),
a schema change without ``tableChanges`` (TiCDC's database-level statements), one whose ``ddl`` is
empty (no statement: the project's own encoder announcing a table's types), an empty value (the
tombstone Debezium writes after a delete). Refused are the shapes that would be applied as
something TiCDC never meant: a row without its table, images an operation never carries (a
delete's ``after``: a delete applied as an upsert), an empty image, a column value that is no
JSON scalar, a table change whose columns cannot type the rows after it.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from config.errors import GrammarError, shown
from streams.codecs import grammar
from streams.codecs.grammar import Rule
from streams.codecs.open_grammar import MAX_NAME
from streams.codecs.simple_schema import type_code

PROTOCOL = "debezium"

MESSAGE = "message-object"
VALUE_SCHEMA = "value-schema"
SOURCE = "source"
OP = "op"
ROW_TABLE = "row-table"
ROW_IMAGES = "row-images"
IMAGE = "image"
COLUMN_VALUE = "column-value"
KEY = "key"
DDL = "ddl-statement"
TABLE_CHANGES = "table-changes"

_KEY = '{"payload":{"id":1}}'
_SOURCE = '"source":{"db":"db","table":"t","commit_ts":5}'
_AFTER = '"after":{"id":1,"v":"a"}'
_INSERT = '{"payload":{' + _SOURCE + ',"op":"c","before":null,' + _AFTER + "}}"
_CHANGE = (
    '{"type":"CREATE","id":"\\"db\\".\\"t\\"","table":{"columns":[{"name":"id","typeName":"INT"}]}}'
)
_DDL = (
    '{"payload":{' + _SOURCE + ',"ddl":"CREATE TABLE t (id INT)","tableChanges":[' + _CHANGE + "]}}"
)


def _row(op: str, images: str) -> tuple[str, str]:
    return _KEY, '{"payload":{' + _SOURCE + ',"op":"' + op + '",' + images + "}}"


def _ddl(changes: str) -> tuple[str, str]:
    return "", _DDL.replace("[" + _CHANGE + "]", changes)


# A rule's examples are (key JSON, value JSON) of one message, the key empty where none.
Example = tuple[str, str]

RULES: tuple[Rule[Example], ...] = (
    Rule(
        MESSAGE,
        "value",
        "a JSON object whose `payload` is an object",
        (("", "[]"), ("", '{"payload":[]}'), ("", '{"schema":{}}'), ("", "null")),
    ),
    Rule(
        VALUE_SCHEMA,
        "value `schema`",
        "null or absent (`debezium-disable-schema`) or an object whose `fields` is an array of "
        "objects, a `before` or `after` struct's `fields` again, each naming its `field`",
        (
            ("", _INSERT[:-1] + ',"schema":[]}'),
            ("", _INSERT[:-1] + ',"schema":{"fields":{}}}'),
            ("", _INSERT[:-1] + ',"schema":{"fields":[{"field":"after","fields":[1]}]}}'),
        ),
    ),
    Rule(
        SOURCE,
        "`payload.source`",
        "an object: `commit_ts` an integer of 64 bits (TiCDC's uint64), `db` and `table` strings "
        "where present",
        (
            ("", '{"payload":{"op":"m"}}'),
            ("", '{"payload":{"source":[5],"op":"m"}}'),
            ("", '{"payload":{"source":{"commit_ts":"5"},"op":"m"}}'),
            ("", '{"payload":{"source":{"commit_ts":18446744073709551616},"op":"m"}}'),
            (_KEY, _INSERT.replace('"table":"t"', '"table":7')),
        ),
    ),
    Rule(
        OP,
        "`payload.op`",
        "c, r (an insert), u (an update), d (a delete), m (a watermark); absent, null or empty "
        "in a schema change (`ddl` present) and a watermark",
        (_row("x", _AFTER), _row("C", _AFTER), (_KEY, _INSERT.replace('"c"', '["c"]'))),
    ),
    Rule(
        ROW_TABLE,
        "row `source`",
        "`db` and `table` are there, non-empty (a row names its table)",
        (
            (_KEY, _INSERT.replace('"table":"t"', '"table":""')),
            (_KEY, _INSERT.replace('"db":"db",', "")),
        ),
    ),
    Rule(
        ROW_IMAGES,
        "row `before`, `after`",
        "c, r: `after` alone (`before` null); d: `before` alone (`after` null); u: `after`, "
        "and `before` unless `debezium-output-old-value` is off",
        (
            _row("c", '"before":{"id":1},' + _AFTER),
            _row("c", '"before":null'),
            _row("d", '"before":{"id":1},' + _AFTER),
            _row("d", '"after":null'),
            _row("u", '"before":{"id":1}'),
        ),
    ),
    Rule(
        IMAGE,
        "an image",
        f"a non-empty object of columns named by 1 to {MAX_NAME} characters, each a field of "
        "the row's schema where it carries one; an update's two name the same columns",
        (
            _row("c", '"after":{}'),
            _row("c", '"after":[1,"a"]'),
            _row("d", '"before":"x"'),
            _row("c", '"after":{"":1}'),
            _row("u", '"before":{"id":1},' + _AFTER),
            (
                _KEY,
                _INSERT[:-1] + ',"schema":{"fields":[{"field":"after","fields":[{"field":"x"}]}]}}',
            ),
        ),
    ),
    Rule(
        COLUMN_VALUE,
        "column value",
        "a JSON scalar, as its column's type writes it (an integer within its range, a number, "
        "a string, base64 for bytes)",
        (_row("c", '"after":{"id":[1]}'), _row("c", '"after":{"id":1,"v":{"a":1}}')),
    ),
    Rule(
        KEY,
        "row key",
        "absent, or a JSON object whose `payload` is an object (the handle key's columns)",
        (('{"payload":[1]}', _INSERT), ('{"id":1}', _INSERT), ("[1]", _INSERT)),
    ),
    Rule(
        DDL,
        "`payload.ddl`",
        "the statement, a string",
        (
            ("", _DDL.replace('"CREATE TABLE t (id INT)"', "null")),
            ("", _DDL.replace('"CREATE TABLE t (id INT)"', "[]")),
        ),
    ),
    Rule(
        TABLE_CHANGES,
        "`payload.tableChanges`",
        'absent, null or an array of objects: `type` a string, `id` `"db"."table"` (a RENAME\'s '
        "two of them), `table` null or an object whose `columns` is an array of objects, each "
        f"`name` of 1 to {MAX_NAME} characters and `typeName` a type TiDB names",
        (
            _ddl("{}"),
            _ddl("[1]"),
            _ddl(_CHANGE.replace('"CREATE"', "1")),
            _ddl(_CHANGE.replace('"\\"db\\".\\"t\\""', '"t"')),
            _ddl(_CHANGE.replace('[{"name":"id","typeName":"INT"}]', '{"id":"INT"}')),
            _ddl(_CHANGE.replace('"INT"', '"INTEGRAL"')),
            _ddl(_CHANGE.replace('"name":"id"', '"name":""')),
        ),
    ),
)

# Messages as TiCDC writes them, from which the examples above differ by one rule each.
VALID: tuple[tuple[str, str], ...] = (
    (_KEY, _INSERT),
    _row("u", '"before":{"id":1,"v":"b"},' + _AFTER),
    _row("d", '"before":{"id":1,"v":"b"},"after":null'),
    ("", _DDL),
    ("", '{"payload":{"source":{"commit_ts":5},"op":"m"}}'),
)

# Deviations the decoder accepts, and why (each decodes as the message without it would).
ACCEPTED: tuple[tuple[str, str, str], ...] = (
    ("an unknown field in a payload", _KEY, _INSERT.replace('"op"', '"new":[{}],"op"')),
    ("an unknown field in a source", _KEY, _INSERT.replace('"commit_ts"', '"x":{},"commit_ts"')),
    ("an update without before", *_row("u", _AFTER)),
    ("op r (a snapshot read)", *_row("r", _AFTER)),
    ("a row without a key", "", _INSERT),
    (
        "a schema change without tableChanges",
        "",
        _DDL.replace(',"tableChanges":[' + _CHANGE + "]", ""),
    ),
)


def markdown() -> str:
    """The rules as the Markdown table docs/architecture.md holds."""
    return grammar.markdown(RULES)


def broken(rule: str, reason: str, where: str | None = None) -> GrammarError:
    """The error of a message breaking ``rule``."""
    return GrammarError(PROTOCOL, rule, reason, event_index=0, where=where)


def payload_of(message: Any) -> dict[str, Any]:
    """The message's payload, its envelope checked (rules message-object, value-schema, source)."""
    if message.__class__ is not dict or message.get("payload").__class__ is not dict:
        raise broken(MESSAGE, "a value is an object holding the object 'payload'")
    schema = message.get("schema")
    if schema is not None:
        fields = schema.get("fields") if schema.__class__ is dict else None
        if not _objects(fields) or not all(_objects(f.get("fields", [])) for f in fields):
            raise broken(VALUE_SCHEMA, "'schema' must be an object of field objects", "schema")
        for side in (f for f in fields if f.get("field") in _SIDES):
            inner = side.get("fields")
            if not _objects(inner) or any(f.get("field").__class__ is not str for f in inner):
                raise broken(VALUE_SCHEMA, "'before' and 'after' need their fields", "schema")
    payload: dict[str, Any] = message["payload"]
    source: Any = payload.get("source")
    commit_ts = source.get("commit_ts") if source.__class__ is dict else None
    if commit_ts.__class__ is not int or not -(1 << 63) <= commit_ts < 1 << 64:
        raise broken(SOURCE, f"'source.commit_ts' must be a 64-bit integer, got {shown(commit_ts)}")
    if any(source.get(name, "").__class__ is not str for name in ("db", "table")):
        raise broken(SOURCE, "'source.db' and 'source.table' must be strings", "payload.source")
    return payload


_SIDES = ("before", "after")
OPS = frozenset({"c", "r", "u", "d"})
WATERMARK = "m"


def op_of(payload: dict[str, Any]) -> str:
    """The payload's op, "" for a schema change or watermark without one (rule op)."""
    op = payload.get("op")
    if op is None or op == "" or (op.__class__ is str and (op in OPS or op == WATERMARK)):
        return op or ""
    raise broken(OP, f"unknown op {shown(op)}", "payload.op")


def row_images(op: str, payload: dict[str, Any], names: frozenset[str] | None) -> None:
    """Rules row-table, row-images, image and column-value (their JSON shape) for a row;
    ``names`` the columns of the row's schema, None when it carries none."""
    source = payload["source"]
    if not source.get("db") or not source.get("table"):
        raise broken(ROW_TABLE, "a row needs 'source.db' and 'source.table'", "payload.source")
    before, after = payload.get("before"), payload.get("after")
    wanted = {"d": (True, False), "u": (None, True)}.get(op, (False, True))
    for side, image, there in (("before", before, wanted[0]), ("after", after, wanted[1])):
        if there is not None and (image is not None) != there:
            state = "needs" if there else "has no"
            raise broken(ROW_IMAGES, f"an op {op} {state} '{side}'", f"payload.{side}")
        if image is not None:
            _image(image, side, names)
    if before is not None and after is not None and before.keys() != after.keys():
        raise broken(IMAGE, "an update's images name other columns", "payload.before")


def _image(image: Any, side: str, names: frozenset[str] | None) -> None:
    if image.__class__ is not dict or not image:
        raise broken(IMAGE, f"'{side}' must be a non-empty object", f"payload.{side}")
    for name, value in image.items():
        if not 0 < len(name) <= MAX_NAME or (names is not None and name not in names):
            raise broken(IMAGE, f"column {shown(name)} is not the row's", f"payload.{side}")
        if value is not None and value.__class__ not in (str, int, float, bool):
            raise broken(COLUMN_VALUE, f"{shown(value)} is no JSON scalar", f"payload.{side}")


def key_columns(key: bytes | None, parsed: Any) -> set[str]:
    """The handle key's columns of a row's parsed key (rule key)."""
    if key is None or key == b"":
        return set()
    if parsed.__class__ is not dict or parsed.get("payload").__class__ is not dict:
        raise broken(KEY, "a row's key is an object holding the object 'payload'", "key")
    return set(parsed["payload"])


def statement(payload: dict[str, Any]) -> str:
    """A schema change's statement (rule ddl-statement), its table changes checked."""
    query = payload.get("ddl")
    if query.__class__ is not str:
        raise broken(DDL, f"'ddl' must be a string, got {shown(query)}", "payload.ddl")
    changes = payload.get("tableChanges")
    if changes is not None and not _objects(changes):
        raise broken(TABLE_CHANGES, "'tableChanges' must be an array of objects")
    for change in changes or ():
        _table_change(change)
    return str(query)


def _table_change(change: dict[str, Any]) -> None:
    ident, table = change.get("id"), change.get("table")
    if change.get("type").__class__ is not str or ident.__class__ is not str:
        raise broken(TABLE_CHANGES, "a table change needs 'type' and 'id', strings")
    # A RENAME's id names two tables ("d"."new","d"."old"): the first is the one changed.
    first = ident[1:-1].split('","', 1)[0]
    if len(ident) < 5 or ident[0] != '"' or ident[-1] != '"' or '"."' not in first:
        raise broken(TABLE_CHANGES, f'id {shown(ident)} is not "db"."table"')
    if table is None:
        return
    columns = table.get("columns") if table.__class__ is dict else None
    if not _objects(columns):
        raise broken(TABLE_CHANGES, "a changed table's 'columns' must be an array of objects")
    for column in columns:
        name, type_name = column.get("name"), column.get("typeName")
        if name.__class__ is not str or not 0 < len(name) <= MAX_NAME:
            raise broken(TABLE_CHANGES, f"a column name {shown(name)}")
        try:
            if not isinstance(type_name, str):
                raise ValueError(type_name)
            type_code(type_name)
        except ValueError:
            raise broken(TABLE_CHANGES, f"type {shown(type_name)} is none TiDB names") from None


def _objects(items: Any) -> TypeGuard[list[dict[str, Any]]]:
    """Whether ``items`` is a JSON array of objects."""
    return items.__class__ is list and all(item.__class__ is dict for item in items)
