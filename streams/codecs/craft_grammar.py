"""Craft's grammar: what TiCDC's encoder writes in a well-framed message, as rules both decoders
enforce.

Taken from tiflow's encoder: ``pkg/sink/codec/craft/craft_encoder.go`` (rows are batched into one
message; a DDL and a resolved event each get a message of their own),
``pkg/sink/codec/craft/message_encoder.go`` (``NewResolvedEventEncoder``: one header of partition
-1, no schema or table, an empty body; ``NewDDLEventEncoder``: the action type as a uvarint, then
the query; ``encodeRowChangeEvents``: one column-group size table per row) and
``pkg/sink/codec/craft/model.go`` (``AppendRowChangedEvent``: partition -1 or the physical table
id, schema and table as terms; ``newRowChangedMessage``: the new group, then the old one, a group
written only when it holds columns; ``columnGroup.encode``: names as term ids, types and flags as
uvarints, values as nullable bytes; ``termDictionary.decodeChunk``: a column's name id is never
null) and ``EncodeTiDBType`` (each type's value bytes).

The framing (the version, the size tables' own layout, regions that run past the message or do
not add up, varints past 64 bits) stays a plain ``DecodeError``: such bytes are no message at all.
A well-framed message breaking a rule here is refused by ``streams/codecs/craft.py`` with a
:class:`~config.errors.GrammarError` naming the rule (the message's dead letter) and handed to it
by ``native/src/craft.rs``.

Accepted, because harmless: a type code or flag bit the model does not know (0-255, 0-65535: its
value is kept as raw bytes, or as text for the text types), a DDL's or resolved event's partition
(the decoder reads neither), a resolved event that names a schema or table, a value for a NULL or
GEOMETRY column (read as NULL, as TiCDC's decoder does), a row's commit ts lower than the one
before it (delta chunks wrap, as in Go). Refused is every shape that would be applied as something
TiCDC never meant, or that shows the message was misread: a row without its table, groups TiCDC
never combines (two new ones: an update applied as an insert), an empty group, a column named
twice, an integer whose varint leaves bytes over, an update whose old image names other columns
than its new one, a statement-less DDL, bytes after a DDL's statement or in a resolved body.

Examples are messages described as trees, which tests/streams/codecs/structure/craft.py encodes
(and its structural fuzz mutates): ``{"events": [event, ...]}`` with optional ``"tables"`` (the
column-group size tables to write instead of each row body's own); an event is ``{"ts", "type",
"partition", "schema", "table", "body"}``, a row's body a list of groups ``{"type", "columns"}``
(optional ``"count"``: the width written instead of the columns' number), a column ``{"name",
"type", "flags", "value"}`` (value bytes or None), a DDL's body ``{"action", "query"}`` (optional
``"after"``: bytes written after the query), a resolved one's bytes.
"""

from __future__ import annotations

from typing import Any

from streams.codecs import grammar
from streams.codecs.grammar import Rule

# The longest column name TiDB takes (MySQL's identifier limit), in characters.
MAX_NAME = 64
# TiCDC's event types (cdc/model's MessageType) and column-group types (craft/model.go).
ROW, DDL, RESOLVED = 1, 2, 3
GROUP_NEW, GROUP_OLD = 1, 2
# The group types a row body holds, in order, by what the row is.
GROUPS = ((GROUP_NEW,), (GROUP_OLD,), (GROUP_NEW, GROUP_OLD))

Example = dict[str, Any]

SIZE_TABLES = "size-tables"
MESSAGE_EVENTS = "message-events"
EVENT_TYPE = "event-type"
TERM_ID = "term-id"
ROW_TABLE = "row-table"
PARTITION = "partition"
COLUMN_GROUPS = "column-groups"
GROUP_COLUMNS = "group-columns"
COLUMN_TYPE = "column-type"
COLUMN_VALUE = "column-value"
UPDATE_IMAGES = "update-images"
DDL_BODY = "ddl-body"
RESOLVED_BODY = "resolved-body"


def column(name: Any = "id", value: Any = b"\x02", kind: Any = 8, flags: Any = 11) -> Example:
    """A column as the examples write it (BIGINT 1, the handle, by default)."""
    return {"name": name, "type": kind, "flags": flags, "value": value}


def group(kind: Any = GROUP_NEW, *columns: Example) -> Example:
    return {"type": kind, "columns": list(columns or [column()])}


def row(*groups: Example, **header: Any) -> Example:
    """A row event; ``header`` replaces the header fields of a row of ``db.t``."""
    event = {"ts": 5, "type": ROW, "partition": -1, "schema": "db", "table": "t"}
    return event | header | {"body": list(groups or [group()])}


def ddl(query: Any = "TRUNCATE TABLE t", action: Any = 11, **header: Any) -> Example:
    event = {"ts": 5, "type": DDL, "partition": -1, "schema": "db", "table": "t"}
    return event | header | {"body": {"action": action, "query": query}}


def resolved(body: bytes = b"", **header: Any) -> Example:
    event = {"ts": 5, "type": RESOLVED, "partition": -1, "schema": None, "table": None}
    return event | header | {"body": body}


def message(*events: Example, **fields: Any) -> Example:
    return {"events": list(events)} | fields


_OLD = group(GROUP_OLD)

RULES: tuple[Rule[Example], ...] = (
    Rule(
        SIZE_TABLES,
        "size tables",
        "after the meta table (header and dictionary sizes) and the body table, one column-group "
        "size table per row event, in order, and none else",
        (message(row(), tables=[]), message(row(), tables=[[4], [4]]), message(ddl(), tables=[[]])),
    ),
    Rule(
        MESSAGE_EVENTS,
        "message",
        "one resolved event, one DDL event, or one row event or more (only rows are batched)",
        (message(), message(row(), resolved()), message(ddl(), ddl()), message(resolved(), row())),
    ),
    Rule(
        EVENT_TYPE,
        "header",
        "1 (row), 2 (DDL) or 3 (resolved)",
        (message(resolved(type=0)), message(ddl(type=4)), message(row(type=5), tables=[])),
    ),
    Rule(
        TERM_ID,
        "header, column group",
        "a schema, table or column name id indexes the term dictionary; a schema's or table's "
        "may be -1 (none), a column name's may not",
        (
            message(row(table=7)),
            message(row(group(GROUP_NEW, column(name=None)))),
            message(ddl(schema=-2)),
        ),
    ),
    Rule(
        ROW_TABLE,
        "row header",
        "a row names its schema and table, both non-empty",
        (message(row(table=None)), message(row(schema=None)), message(row(table=""))),
    ),
    Rule(
        PARTITION,
        "row header",
        "-1 (the table is not partitioned) or the physical table id, 0 or more",
        (message(row(partition=-2)),),
    ),
    Rule(
        COLUMN_GROUPS,
        "row body",
        "its column groups, each exactly its size: new (1) alone (insert), old (2) alone "
        "(delete), or new then old (update)",
        (
            message(row(group(), group())),
            message(row(_OLD, group())),
            message(row(group(3))),
            message(row(group(), _OLD, _OLD)),
            message({**row(), "body": []}),
        ),
    ),
    Rule(
        GROUP_COLUMNS,
        "column group",
        f"one column or more (TiCDC writes no empty group), each named once, by 1 to {MAX_NAME} "
        "characters",
        (
            message(row({"type": GROUP_NEW, "columns": []})),
            message(row(group(GROUP_NEW, column(), column()))),
            message(row(group(GROUP_NEW, column(name="")))),
            message(row(group(GROUP_NEW, column(name="c" * (MAX_NAME + 1))))),
        ),
    ),
    Rule(
        COLUMN_TYPE,
        "column group",
        "a type 0..255 and flags 0..65535 per column",
        (
            message(row(group(GROUP_NEW, column(kind=256)))),
            message(row(group(GROUP_NEW, column(flags=1 << 16)))),
        ),
    ),
    Rule(
        COLUMN_VALUE,
        "column group",
        "-1 (NULL) or its type's bytes: an integer's one varint filling them, within the type's "
        "range; a FLOAT's or DOUBLE's 8 bytes; a DECIMAL's, date's, time's or JSON's UTF-8",
        (
            message(row(group(GROUP_NEW, column(value=b"\x02\x00")))),
            message(row(group(GROUP_NEW, column(value=b"")))),
            message(row(group(GROUP_NEW, column(kind=1, flags=0, value=b"\x80\x04")))),
            message(row(group(GROUP_NEW, column(kind=5, flags=0, value=b"\x00" * 4)))),
            message(row(group(GROUP_NEW, column(kind=246, flags=0, value=b"\xff")))),
        ),
    ),
    Rule(
        UPDATE_IMAGES,
        "row body",
        "an update's old group names the columns its new group names, with the same types and "
        "flags",
        (
            message(row(group(), group(GROUP_OLD, column(), column(name="c")))),
            message(row(group(), group(GROUP_OLD, column(name="c")))),
            message(row(group(), group(GROUP_OLD, column(flags=3)))),
        ),
    ),
    Rule(
        DDL_BODY,
        "DDL body",
        "TiDB's action type (a uvarint), then the statement: its length and non-empty UTF-8, "
        "nothing after",
        (
            message(ddl(query="")),
            message(ddl(query=" ")),
            message(ddl(query=b"\xff")),
            message({**ddl(), "body": {"action": 11, "query": "TRUNCATE TABLE t", "after": b"\0"}}),
        ),
    ),
    Rule(
        RESOLVED_BODY,
        "resolved body",
        "empty",
        (message(resolved(b"\x00")),),
    ),
)

# Deviations both decoders accept, and why (each decodes as the message without it would).
ACCEPTED: tuple[tuple[str, Example], ...] = (
    (
        "a type code the model does not know",
        message(row(group(GROUP_NEW, column(kind=200, flags=0)))),
    ),
    ("a flag bit the model does not know", message(row(group(GROUP_NEW, column(flags=11 | 4096))))),
    ("a resolved event that names a table", message(resolved(schema="db", table="t"))),
    ("a resolved event's partition", message(resolved(partition=7))),
    (
        "a value for a NULL column",
        message(row(group(GROUP_NEW, column(), column("n", b"x", 6, 0)))),
    ),
    ("a DDL without a table", message(ddl("CREATE DATABASE db", 1, table=None))),
    ("rows whose commit ts go back", message(row(ts=9), row(ts=5))),
)


def rule(name: str) -> Rule[Example]:
    """The rule of that name."""
    return grammar.find(RULES, name)


def markdown() -> str:
    """The rules as the Markdown table docs/architecture.md holds."""
    return grammar.markdown(RULES)
