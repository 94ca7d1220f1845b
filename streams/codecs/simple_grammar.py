"""The Simple protocol's grammar, JSON and Avro alike: what TiCDC's encoder writes, as rules the
decoders enforce.

Taken from tiflow's ``pkg/sink/codec/simple/message.go``: ``message`` (``version``, ``type`` and
``commitTs``/``buildTs`` always written; ``database``, ``table``, ``tableID``, ``schemaVersion``,
``handleKeyOnly``, ``claimCheckLocation``, ``data``, ``old``, ``sql``, ``tableSchema`` and
``preTableSchema`` ``omitempty``), ``newResolvedMessage``, ``newBootstrapMessage``,
``newDDLMessage`` (a DDL's query; a table schema where the DDL has one),
``newDMLMessage`` (an insert writes ``data``, a delete ``old``, an update both;
``formatColumns``: with ``handleKeyOnly`` only the handle-key columns), ``TableSchema``,
``columnSchema``, ``dataType`` and ``IndexSchema`` (``newTableSchema``: columns by id, indexes
naming them), and ``getDDLType`` (the DDL type names). The Avro encoding
(``pkg/sink/codec/simple/avro.go``) carries the same message as a record: its optional fields
are null where JSON omits them, ``commitTs`` is a long (a uint64's bits) and a table schema names
its database ``database``.

``streams/codecs/simple.py`` refuses a message breaking a rule with a
:class:`~config.errors.GrammarError` naming it (the message's dead letter); ``native/src/simple.rs``
hands such a message to it. Bytes that are no JSON (or no Avro) at all stay a plain
``DecodeError``.

Accepted, because harmless: a field the grammar does not name (TiCDC's ``checksum``, whatever a
later version adds, in a message, table schema, column or index), a repeated key (the last
counts, as in Go's decoder), null where a field is optional, a ``tableID`` or ``buildTs`` of any
int64 (Go's type; neither is read). Refused are the shapes that would be applied as something
TiCDC never meant: an insert carrying an old image or an update without one (applied as an
upsert), an empty image, a column the table's schema does not have, a handle-key-only image that
is not the table's handle key, a DDL without its statement, a table schema without columns or
with an index of columns it does not have. A column type name the project does not know is
refused too (``table-schema``): the values of such a column could not be typed.

Examples are JSON messages on the table :data:`BOOTSTRAP` announces.
"""

from __future__ import annotations

from typing import Any

from config.errors import GrammarError, shown
from core.model import TableSchema
from streams.codecs import grammar
from streams.codecs.grammar import Rule
from streams.codecs.simple_schema import check_table_schema

# The longest column name TiDB takes (MySQL's identifier limit), in characters.
MAX_NAME = 64
VERSION = 1
DML_TYPES = ("INSERT", "UPDATE", "DELETE")
DDL_TYPES = ("CREATE", "RENAME", "CINDEX", "DINDEX", "ERASE", "TRUNCATE", "ALTER", "QUERY")
TYPES = ("WATERMARK", "BOOTSTRAP", *DDL_TYPES, *DML_TYPES)
# The images each DML type carries, as (data, old).
IMAGES = {"INSERT": (True, False), "UPDATE": (True, True), "DELETE": (False, True)}

MESSAGE_OBJECT = "message-object"
VERSION_RULE = "version"
MESSAGE_TYPE = "message-type"
TS_FIELDS = "ts-fields"
DML_FIELDS = "dml-fields"
ROW_IMAGES = "row-images"
IMAGE_COLUMNS = "image-columns"
COLUMN_VALUE = "column-value"
HANDLE_KEY_ONLY = "handle-key-only"
SCHEMA_MESSAGE = "schema-message"
TABLE_SCHEMA = "table-schema"

_COLUMNS = (
    '[{"name":"id","dataType":{"mysqlType":"bigint","charset":"binary","collate":"binary",'
    '"length":20},"nullable":false,"default":null},{"name":"c","dataType":{"mysqlType":"varchar",'
    '"charset":"utf8mb4","collate":"utf8mb4_bin","length":10},"nullable":true,"default":null}]'
)
_INDEXES = '[{"name":"primary","unique":true,"primary":true,"nullable":false,"columns":["id"]}]'
TABLE = (
    '{"schema":"db","table":"t","tableID":7,"version":1,"columns":'
    + _COLUMNS
    + ',"indexes":'
    + _INDEXES
    + "}"
)
# The table every example's DML names (db.t, version 1: id BIGINT primary key, c VARCHAR(10)).
BOOTSTRAP = '{"version":1,"type":"BOOTSTRAP","commitTs":0,"buildTs":0,"tableSchema":' + TABLE + "}"
_HEAD = '{"version":1,"database":"db","table":"t","tableID":7,"commitTs":5,"buildTs":0,'
_ROW = '{"id":"1","c":"x"}'


def dml(kind: str, images: str, head: str = _HEAD) -> str:
    """A DML message of ``kind`` with ``images`` (JSON members, without braces)."""
    return head + f'"type":"{kind}","schemaVersion":1,' + images + "}"


def ddl(fields: str) -> str:
    """A DDL message with ``fields`` (JSON members, without braces)."""
    return '{"version":1,"type":"CREATE","commitTs":5,"buildTs":0,' + fields + "}"


def bootstrap(table: str) -> str:
    return '{"version":1,"type":"BOOTSTRAP","commitTs":0,"buildTs":0,"tableSchema":' + table + "}"


RULES: tuple[Rule[str], ...] = (
    Rule(
        MESSAGE_OBJECT,
        "message",
        "a JSON object (in Avro, the message record)",
        ("[" + _ROW + "]", '"INSERT"', "null"),
    ),
    Rule(
        VERSION_RULE,
        "message",
        "`version` 1",
        (
            dml("INSERT", '"data":' + _ROW).replace('"version":1', '"version":2'),
            '{"type":"WATERMARK","commitTs":5,"buildTs":0}',
        ),
    ),
    Rule(
        MESSAGE_TYPE,
        "message",
        "`type` WATERMARK, BOOTSTRAP, a DDL type (" + ", ".join(DDL_TYPES) + ") or a DML type "
        "(INSERT, UPDATE, DELETE); in Avro the message's payload the record of its type",
        (
            '{"version":1,"type":"DML","commitTs":5,"buildTs":0}',
            '{"version":1,"type":"insert","commitTs":5,"buildTs":0}',
            '{"version":1,"commitTs":5,"buildTs":0}',
        ),
    ),
    Rule(
        TS_FIELDS,
        "message",
        "`commitTs` an integer 0..2^64-1 (in Avro a long: the uint64's bits; its BOOTSTRAP "
        "has none), `buildTs` an integer -2^63..2^63-1 (Go's int64); both always there",
        (
            '{"version":1,"type":"WATERMARK","buildTs":0}',
            '{"version":1,"type":"WATERMARK","commitTs":-1,"buildTs":0}',
            '{"version":1,"type":"WATERMARK","commitTs":"5","buildTs":0}',
            '{"version":1,"type":"WATERMARK","commitTs":5}',
            dml("INSERT", '"data":' + _ROW).replace('"buildTs":0', '"buildTs":1.5'),
            '{"version":1,"type":"WATERMARK","commitTs":5,"buildTs":9223372036854775808}',
        ),
    ),
    Rule(
        DML_FIELDS,
        "DML",
        "`database` and `table` non-empty strings; `schemaVersion` an integer 0..2^64-1, "
        "`tableID` an integer -2^63..2^63-1, `handleKeyOnly` a boolean, `claimCheckLocation` "
        "a string, where "
        "present (null in Avro)",
        (
            dml("INSERT", '"data":' + _ROW, _HEAD.replace('"table":"t",', "")),
            dml("INSERT", '"data":' + _ROW, _HEAD.replace('"database":"db"', '"database":""')),
            dml("INSERT", '"data":' + _ROW, _HEAD.replace('"table":"t"', '"table":["t"]')),
            dml("INSERT", '"handleKeyOnly":1,"data":' + _ROW),
            dml("INSERT", '"claimCheckLocation":7,"data":' + _ROW),
            dml("INSERT", '"data":' + _ROW).replace('"schemaVersion":1', '"schemaVersion":-1'),
            dml("INSERT", '"data":' + _ROW).replace('"tableID":7', '"tableID":9223372036854775808'),
        ),
    ),
    Rule(
        ROW_IMAGES,
        "DML",
        "INSERT `data` alone, DELETE `old` alone, UPDATE `data` and `old`: each a non-empty "
        "object of values by column name",
        (
            dml("INSERT", '"data":' + _ROW + ',"old":' + _ROW),
            dml("UPDATE", '"data":' + _ROW),
            dml("DELETE", '"data":' + _ROW),
            dml("INSERT", '"data":{}'),
            dml("DELETE", '"old":["1","x"]'),
            dml("INSERT", '"data":null'),
        ),
    ),
    Rule(
        IMAGE_COLUMNS,
        "`data`, `old`",
        "names columns of the table's schema (announced by BOOTSTRAP or a DDL)",
        (dml("INSERT", '"data":{"id":"1","nope":"x"}'), dml("INSERT", '"data":{"":"1"}')),
    ),
    Rule(
        COLUMN_VALUE,
        "`data`, `old`",
        "each value null or what its column's type reads: a string (a number's may be a JSON "
        "number; a TIMESTAMP's an object with `value`; in Avro the union branch TiCDC writes "
        "for the type: a TIMESTAMP's Timestamp record, an integer's long or UnsignedBigint, a "
        "FLOAT's float, a DOUBLE's double, any other's string or bytes), within the type's "
        "range and declared length",
        (
            dml("INSERT", '"data":{"id":"x","c":"x"}'),
            dml("INSERT", '"data":{"id":{"v":1},"c":"x"}'),
            dml("INSERT", '"data":{"id":"1","c":["x"]}'),
            dml("INSERT", '"data":{"id":"1","c":"' + "x" * 11 + '"}'),
        ),
    ),
    Rule(
        HANDLE_KEY_ONLY,
        "`data`, `old`",
        "with `handleKeyOnly` true, the table's handle-key columns and no other (its primary "
        "key, else its first unique index of columns never null)",
        (
            dml("DELETE", '"handleKeyOnly":true,"old":' + _ROW),
            dml("DELETE", '"handleKeyOnly":true,"old":{"c":"x"}'),
        ),
    ),
    Rule(
        SCHEMA_MESSAGE,
        "BOOTSTRAP, DDL",
        "a BOOTSTRAP's `tableSchema` an object; a DDL's `sql` a non-empty string, its "
        "`tableSchema` and `preTableSchema` objects where present (null in Avro)",
        (
            '{"version":1,"type":"BOOTSTRAP","commitTs":0,"buildTs":0}',
            bootstrap("[" + TABLE + "]"),
            ddl('"sql":"","tableSchema":' + TABLE),
            ddl('"tableSchema":' + TABLE),
            ddl('"sql":"CREATE TABLE t (id BIGINT PRIMARY KEY)","tableSchema":"t"'),
        ),
    ),
    Rule(
        TABLE_SCHEMA,
        "`tableSchema`, `preTableSchema`",
        "`schema` (in Avro `database`) and `table` non-empty strings, `tableID` an int64, "
        "`version` a uint64 (in Avro a long); `columns` a non-empty array of objects: `name` 1 "
        "to 64 characters, once, "
        "`dataType` an object whose `mysqlType` names a MySQL type (`charset`, `collate` "
        "strings, `length`, `decimal` integers, `elements` strings, `unsigned`, `zerofill` "
        "booleans, or null), `nullable` a boolean, `default` a JSON scalar or null; `indexes` "
        "an array of objects: `name` a string, `unique`, `primary`, `nullable` booleans or null, "
        "`columns` a non-empty array naming the table's columns",
        (
            bootstrap(TABLE.replace('"table":"t"', '"table":""')),
            bootstrap(TABLE.replace(_COLUMNS, "[]")),
            bootstrap(TABLE.replace('"name":"c"', '"name":"id"')),
            bootstrap(TABLE.replace('"mysqlType":"varchar"', '"mysqlType":"vector"')),
            bootstrap(TABLE.replace('"columns":["id"]', '"columns":["nope"]')),
            bootstrap(TABLE.replace('"version":1', '"version":"1"')),
        ),
    ),
)

# Deviations the decoders accept, and why (each decodes as the message without it would).
ACCEPTED: tuple[tuple[str, str], ...] = (
    (
        "an unknown field in a message",
        dml("INSERT", '"checksum":{"current":1},"x":[],"data":' + _ROW),
    ),
    (
        "null where a field is optional",
        dml("INSERT", '"old":null,"handleKeyOnly":null,"data":' + _ROW),
    ),
    ("a repeated key (the last counts)", dml("INSERT", '"data":{"id":"9"},"data":' + _ROW)),
    (
        "an unknown field in a table schema",
        bootstrap(TABLE.replace('"tableID":7', '"tableID":7,"x":1')),
    ),
    ("a DDL without a table schema", ddl('"sql":"CREATE DATABASE db2"')),
    ("a JSON number for an integer column", dml("INSERT", '"data":{"id":1,"c":"x"}')),
)


def check(protocol: str, message: Any, avro: bool) -> None:
    """Raise a GrammarError naming the rule ``message`` (loaded JSON, or the Avro record as a
    dict) breaks, as far as the message alone says it; a DML's images are checked against its
    table's schema by the codec."""
    if message.__class__ is not dict:
        raise broken(protocol, MESSAGE_OBJECT, f"a message of {type(message).__name__}")
    get = message.get
    if get("version").__class__ is not int or get("version") != VERSION:
        raise broken(protocol, VERSION_RULE, f"version {shown(get('version'))}")
    kind = get("type")
    if kind.__class__ is not str or kind not in TYPES:
        raise broken(protocol, MESSAGE_TYPE, f"type {shown(kind)}")
    low = -(1 << 63) if avro else 0
    # Avro's Bootstrap record has no commitTs (JSON's is 0).
    ts = 0 if avro and kind == "BOOTSTRAP" else get("commitTs")
    build = get("buildTs")
    if ts.__class__ is not int or not low <= ts < 1 << 64 or not _int64(build):
        raise broken(protocol, TS_FIELDS, f"commitTs {shown(ts)}, buildTs {shown(build)}")
    if kind in IMAGES:
        _check_dml(protocol, message, kind, low)
    elif kind == "BOOTSTRAP":
        _check_schema(protocol, get("tableSchema"), avro, required=True)
    elif kind != "WATERMARK":
        sql = get("sql")
        if sql.__class__ is not str or not sql.strip():
            raise broken(protocol, SCHEMA_MESSAGE, f"a DDL's sql {shown(sql)}")
        _check_schema(protocol, get("tableSchema"), avro, required=False)
        _check_schema(protocol, get("preTableSchema"), avro, required=False)


def _check_dml(protocol: str, message: dict[str, Any], kind: str, low: int) -> None:
    get = message.get
    for field in ("database", "table"):
        if get(field).__class__ is not str or not get(field):
            raise broken(protocol, DML_FIELDS, f"'{field}' {shown(get(field))}")
    version = get("schemaVersion")
    if version is not None and (version.__class__ is not int or not low <= version < 1 << 64):
        raise broken(protocol, DML_FIELDS, f"schemaVersion {shown(version)}")
    table_id = get("tableID")
    if table_id is not None and not _int64(table_id):
        raise broken(protocol, DML_FIELDS, f"'tableID' must be an int64, not {shown(table_id)}")
    for field, of_type, what in _OPTIONAL_DML_FIELDS:
        if get(field) is not None and get(field).__class__ is not of_type:
            raise broken(protocol, DML_FIELDS, f"'{field}' must be {what}, not {shown(get(field))}")
    if get("claimCheckLocation"):
        return
    for field, carried in zip(("data", "old"), IMAGES[kind], strict=True):
        image = get(field)
        if carried != (image is not None) or (
            carried and (image.__class__ is not dict or not image)
        ):
            raise broken(protocol, ROW_IMAGES, f"{kind} with '{field}' {shown(image)}")


def _int64(value: Any) -> bool:
    return value.__class__ is int and -(1 << 63) <= value < 1 << 63


# A DML's fields that may be absent (null in Avro), their types and how an error names them.
_OPTIONAL_DML_FIELDS = (
    ("handleKeyOnly", bool, "a boolean"),
    ("claimCheckLocation", str, "a string"),
)


def _check_schema(protocol: str, raw: Any, avro: bool, required: bool) -> None:
    if raw is None and not required:
        return
    if raw.__class__ is not dict:
        raise broken(protocol, SCHEMA_MESSAGE, f"a table schema of {type(raw).__name__}")
    try:
        check_table_schema(raw, avro)
    except ValueError as exc:
        raise broken(protocol, TABLE_SCHEMA, str(exc)) from None


def handle_key(table: TableSchema) -> frozenset[str]:
    """The columns TiCDC flags as the handle key: the primary key's, else those of the first
    unique index whose columns are never null (tiflow ``model.TableInfo`` handle columns)."""
    primary = [i for i in table.indexes if i.primary]
    keys = primary or [i for i in table.indexes if i.unique and not i.nullable]
    return frozenset(keys[0].columns) if keys else frozenset()


def broken(protocol: str, rule: str, reason: str, where: str | None = None) -> GrammarError:
    """The error of a message breaking ``rule``."""
    return GrammarError(protocol, rule, reason, event_index=0, where=where)


def rule(name: str) -> Rule[str]:
    """The rule of that name."""
    return grammar.find(RULES, name)


def markdown() -> str:
    """The rules as the Markdown table docs/architecture.md holds."""
    return grammar.markdown(RULES)
