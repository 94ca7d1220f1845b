"""Canal-JSON as TiCDC writes it, with the TiDB extension.

Every value is a string (binary ones as ISO-8859-1 text); column types come from ``mysqlType``
and keys from ``pkNames``. With ``enable-tidb-extension`` rows carry ``_tidb.commitTs`` and
watermarks arrive as ``{"type": "TIDB_WATERMARK", "_tidb": {"watermarkTs": N}}``; without it the
commit ts is unknown (0) and the global resolved ts cannot advance. What TiCDC writes, field by
field, is the grammar of :mod:`streams.codecs.canal_grammar`: a message breaking it is refused with
a :class:`~config.errors.GrammarError` naming the rule.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

from config.errors import DecodeError, EncodeError, GrammarError, shown
from core.model import (
    FLOAT_TYPES,
    INDEX_TYPES,
    INTEGER_TYPES,
    ClaimCheck,
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
from streams.codecs import canal_grammar as grammar
from streams.codecs.base import MAX_MESSAGE_BYTES, Codec, KafkaMessage
from streams.codecs.compression import Compression, compress, decompress
from streams.codecs.simple_schema import is_binary_name, type_code, type_name
from streams.codecs.values import checked_integer, format_float

PROTOCOL = "canal-json"
WATERMARK = "TIDB_WATERMARK"
_OPS = {"INSERT": Op.INSERT, "UPDATE": Op.UPDATE, "DELETE": Op.DELETE}
# The fields of TiCDC's _tidb object (canal_json_message.go, tidbExtension) and their JSON types.
_EXTENSION_FIELDS = {
    "commitTs": (int, "a uint64"),
    "watermarkTs": (int, "a uint64"),
    "onlyHandleKey": (bool, "a boolean"),
    "claimCheckLocation": (str, "a string"),
}
_INTEGER = re.compile(r"-?[0-9]+")
# Canal's java.sql.Types codes, written beside mysqlType (informational for consumers).
_JAVA_TYPES: dict[int, int] = {
    MySQLType.TINY: -6, MySQLType.SHORT: 5, MySQLType.INT24: 4, MySQLType.LONG: 4,
    MySQLType.LONGLONG: -5, MySQLType.FLOAT: 7, MySQLType.DOUBLE: 8, MySQLType.NEWDECIMAL: 3,
    MySQLType.DATE: 91, MySQLType.DATETIME: 93, MySQLType.TIMESTAMP: 93, MySQLType.DURATION: 92,
    MySQLType.YEAR: 12, MySQLType.BIT: -7, MySQLType.JSON: 12, MySQLType.ENUM: 4, MySQLType.SET: -7,
}  # fmt: skip


def _ddl_action(query: str) -> int:
    """TiCDC's guess of a DDL's action from its text: Canal-JSON does not carry one."""
    lowered = query.lstrip().lower()
    if lowered.startswith(("create schema", "create database")):
        return 1
    if lowered.startswith(("drop schema", "drop database")):
        return 2
    return 0


def _value(kind: ColumnType, raw: Any) -> Value:
    if raw is None:
        return None
    if raw.__class__ is not str:
        raise ValueError("Canal-JSON values are strings")
    if kind.is_binary:
        return raw.encode("latin-1")
    mysql_type = kind.mysql_type
    if mysql_type in INTEGER_TYPES or mysql_type in INDEX_TYPES:
        # Decimal digits alone, as Go's strconv writes them (Python's int() takes more).
        if not _INTEGER.fullmatch(raw):
            raise ValueError("not a decimal integer")
        return checked_integer(kind, int(raw))
    if mysql_type in FLOAT_TYPES:
        return float(raw)
    return str(raw)


class CanalJSONCodec(Codec):
    """Canal-JSON, with or without TiCDC's ``_tidb`` extension."""

    protocol = PROTOCOL

    def __init__(
        self, compression: Compression = Compression.NONE, tidb_extension: bool = True
    ) -> None:
        self.compression = compression
        self.tidb_extension = tidb_extension

    def decode(self, key: bytes | None, value: bytes) -> list[Event]:
        if len(value) > MAX_MESSAGE_BYTES:
            raise DecodeError(PROTOCOL, f"message over {MAX_MESSAGE_BYTES} bytes")
        try:
            message = orjson.loads(decompress(self.compression, value, PROTOCOL))
        except orjson.JSONDecodeError as exc:
            raise DecodeError(PROTOCOL, f"not JSON: {exc}", event_index=0) from None
        if message.__class__ is not dict:
            raise _broken(grammar.MESSAGE, f"a message must be an object, got {shown(message)}")
        return _events(message)

    def encode(self, events: Sequence[Event]) -> list[KafkaMessage]:
        return [
            KafkaMessage(None, compress(self.compression, orjson.dumps(self._message(event))))
            for event in events
        ]

    def _message(self, event: Event) -> dict[str, Any]:
        if isinstance(event, Resolved):
            return {
                "id": 0,
                "database": "",
                "table": "",
                "pkNames": None,
                "isDdl": False,
                "type": WATERMARK,
                "es": 0,
                "ts": 0,
                "sql": "",
                "sqlType": None,
                "mysqlType": None,
                "data": None,
                "old": None,
                "_tidb": {"watermarkTs": event.commit_ts},
            }
        if isinstance(event, DDLEvent):
            return {
                "id": 0,
                "database": event.schema or "",
                "table": event.table or "",
                "pkNames": None,
                "isDdl": True,
                "type": "QUERY",
                "es": event.commit_ts >> 18,
                "ts": 0,
                "sql": event.query,
                "sqlType": None,
                "mysqlType": None,
                "data": None,
                "old": None,
                "_tidb": {"commitTs": event.commit_ts},
            }
        if not isinstance(event, RowChange):
            raise EncodeError(f"canal-json has no {type(event).__name__} event")
        mysql_types = {}
        for name, kind in event.columns.items():
            base = type_name(kind)
            mysql_types[name] = f"{base} unsigned" if kind.is_unsigned else base
        image = event.old if event.op is Op.DELETE else event.new
        message: dict[str, Any] = {
            "id": 0,
            "database": event.schema,
            "table": event.table,
            "pkNames": [n for n, k in event.columns.items() if k.flags & ColumnFlag.PRIMARY_KEY],
            "isDdl": False,
            "type": event.op.value.upper(),
            "es": event.commit_ts >> 18,
            "ts": 0,
            "sql": "",
            "sqlType": {n: _JAVA_TYPES.get(k.mysql_type, 12) for n, k in event.columns.items()},
            "mysqlType": mysql_types,
            "data": [_strings(image or {}, event.columns)],
            "old": [_strings(event.old, event.columns)]
            if event.op is Op.UPDATE and event.old is not None
            else None,
        }
        if self.tidb_extension:
            message["_tidb"] = {"commitTs": event.commit_ts}
        return message


def _broken(rule: str, reason: str, where: str | None = None) -> GrammarError:
    """The error of a message breaking ``rule`` of :mod:`streams.codecs.canal_grammar`."""
    return GrammarError(PROTOCOL, rule, reason, event_index=0, where=where)


def _extension(message: dict[str, Any]) -> dict[str, Any]:
    """The message's ``_tidb`` object, its fields' types checked (rule tidb-extension)."""
    extension = message.get("_tidb")
    if extension is None:
        return {}
    if extension.__class__ is not dict:
        raise _broken(grammar.EXTENSION, "'_tidb' must be an object", "_tidb")
    for field, (kind, named) in _EXTENSION_FIELDS.items():
        if field not in extension:
            continue
        found = extension[field]
        if found.__class__ is not kind or (found.__class__ is int and not 0 <= found < 1 << 64):
            raise _broken(
                grammar.EXTENSION,
                f"'{field}' must be {named}, got {shown(found)}",
                f"_tidb.{field}",
            )
    return extension


def _kind(message: dict[str, Any]) -> tuple[bool, str]:
    """Whether the message is a DDL, and its type, as rules is-ddl and event-type allow."""
    is_ddl = message.get("isDdl", False)
    if is_ddl.__class__ is not bool:
        raise _broken(grammar.IS_DDL, f"'isDdl' must be a boolean, got {shown(is_ddl)}", "isDdl")
    kind = message.get("type")
    if kind.__class__ is not str or not kind or is_ddl == (kind in _OPS or kind == WATERMARK):
        raise _broken(
            grammar.EVENT_TYPE, f"type {shown(kind)} where isDdl is {str(is_ddl).lower()}", "type"
        )
    return is_ddl, kind


def _events(message: dict[str, Any]) -> list[Event]:
    extension = _extension(message)
    if "claimCheckLocation" in extension:
        # TiCDC stored the whole message there and sends only this location.
        location = extension["claimCheckLocation"]
        if not location or any(field in message for field in ("isDdl", "type", "data")):
            raise _broken(grammar.CLAIM_CHECK, "a claim check names a location alone", "_tidb")
        return [ClaimCheck(location)]
    is_ddl, kind = _kind(message)
    if kind == WATERMARK:
        if "watermarkTs" not in extension:
            raise _broken(grammar.WATERMARK, "a watermark without '_tidb.watermarkTs'", "_tidb")
        return [Resolved(extension["watermarkTs"])]
    commit_ts: int = extension.get("commitTs", 0)
    schema = message.get("database", "")
    table = message.get("table", "")
    if schema.__class__ is not str or table.__class__ is not str:
        raise _broken(grammar.NAMES, "'database' and 'table' must be strings")
    if is_ddl:
        query = message.get("sql")
        if query.__class__ is not str or not query.strip():
            raise _broken(grammar.DDL_SQL, "a DDL needs its statement, a non-empty string", "sql")
        return [DDLEvent(commit_ts, schema or None, table or None, query, _ddl_action(query))]
    if not schema or not table:
        raise _broken(grammar.NAMES, "a row needs 'database' and 'table', non-empty")
    op = _OPS[kind]
    columns = _columns(message.get("mysqlType"), message.get("pkNames"))
    data = _one_image(message.get("data"), grammar.ROW_DATA, "data")
    if data.keys() != columns.keys():
        raise _broken(grammar.IMAGE_COLUMNS, "'data' must name the columns of 'mysqlType'", "data")
    image = _image(data, columns, "data")
    for name, column in columns.items():
        if column.flags & ColumnFlag.PRIMARY_KEY and image[name] is None:
            raise _broken(grammar.COLUMN_VALUE, f"key column {shown(name)} is null", "data")
    olds = message.get("old")
    if op is not Op.UPDATE:
        if olds is not None:
            raise _broken(grammar.ROW_OLD, f"an {kind} has no 'old'", "old")
        new, old = (None, image) if op is Op.DELETE else (image, None)
    else:
        changed = _one_image(olds, grammar.ROW_OLD, "old")
        if not changed.keys() <= columns.keys():
            raise _broken(grammar.IMAGE_COLUMNS, "'old' names a column of no type", "old")
        # Canal's "old" may hold only the changed columns: the rest are unchanged.
        new, old = image, {**image, **_image(changed, columns, "old")}
    handle_key_only = extension.get("onlyHandleKey", False)
    return [
        RowChange(commit_ts, schema, table, op, columns, new, old, handle_key_only=handle_key_only)
    ]


def _one_image(images: Any, rule: str, side: str) -> dict[str, Any]:
    """The one object of ``images`` (``[{...}]``, as ``fillColumns`` writes it)."""
    if images.__class__ is not list or len(images) != 1 or images[0].__class__ is not dict:
        raise _broken(rule, f"'{side}' must be an array of one object", side)
    return images[0]


def _columns(mysql_types: Any, keys: Any) -> dict[str, ColumnType]:
    if mysql_types.__class__ is not dict or not mysql_types:
        raise _broken(grammar.ROW_TYPES, "'mysqlType' must be a non-empty object", "mysqlType")
    if keys is None:
        keys = []
    if keys.__class__ is not list or any(k.__class__ is not str for k in keys):
        raise _broken(grammar.PK_NAMES, "'pkNames' must be an array of names", "pkNames")
    primary = set(keys)
    if not primary <= mysql_types.keys():
        raise _broken(grammar.PK_NAMES, "'pkNames' names a column of no type", "pkNames")
    columns: dict[str, ColumnType] = {}
    for name, text in mysql_types.items():
        if not 0 < len(name) <= grammar.MAX_NAME or text.__class__ is not str:
            raise _broken(grammar.ROW_TYPES, f"column {shown(name)}: {shown(text)}", "mysqlType")
        text = text.lower()
        try:
            code = type_code(text)
        except ValueError as exc:
            raise _broken(grammar.ROW_TYPES, str(exc), "mysqlType") from None
        flags = ColumnFlag.NULLABLE
        if is_binary_name(text):
            flags |= ColumnFlag.BINARY
        if "unsigned" in text:
            flags |= ColumnFlag.UNSIGNED
        if name in primary:
            flags = (flags | ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY) & ~ColumnFlag.NULLABLE
        columns[name] = column_type(code, int(flags))
    return columns


def _image(row: dict[str, Any], columns: dict[str, ColumnType], side: str) -> dict[str, Value]:
    image: dict[str, Value] = {}
    for name, raw in row.items():
        try:
            image[name] = _value(columns[name], raw)
        except (ValueError, UnicodeError) as exc:
            raise _broken(
                grammar.COLUMN_VALUE, f"bad value {shown(raw)}: {exc}", f"{side}.{name}"
            ) from None
    return image


def _strings(image: dict[str, Value], columns: dict[str, ColumnType]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name, value in image.items():
        if value is None:
            out[name] = None
        elif isinstance(value, bytes):
            out[name] = value.decode("latin-1")
        elif isinstance(value, float):
            out[name] = format_float(value, single=columns[name].mysql_type == MySQLType.FLOAT)
        else:
            out[name] = str(value)
    return out
