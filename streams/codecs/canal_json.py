"""Canal-JSON as TiCDC writes it, with the TiDB extension.

Every value is a string (binary ones as ISO-8859-1 text); column types come from ``mysqlType``
and keys from ``pkNames``. With ``enable-tidb-extension`` rows carry ``_tidb.commitTs`` and
watermarks arrive as ``{"type": "TIDB_WATERMARK", "_tidb": {"watermarkTs": N}}``; without it the
commit ts is unknown (0) and the global resolved ts cannot advance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from config.errors import DecodeError, EncodeError, shown
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
from streams.codecs.base import MAX_MESSAGE_BYTES, Codec, KafkaMessage
from streams.codecs.compression import Compression, compress, decompress
from streams.codecs.simple_schema import is_binary_name, type_code, type_name
from streams.codecs.values import checked_integer, format_float

PROTOCOL = "canal-json"
WATERMARK = "TIDB_WATERMARK"
_OPS = {"INSERT": Op.INSERT, "UPDATE": Op.UPDATE, "DELETE": Op.DELETE}
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
        if not isinstance(message, dict):
            raise DecodeError(PROTOCOL, "message must be a JSON object", event_index=0)
        try:
            return self._events(message)
        except DecodeError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, UnicodeError) as exc:
            raise DecodeError(
                PROTOCOL, f"bad message: {type(exc).__name__}: {exc}", event_index=0
            ) from None

    @staticmethod
    def _events(message: dict[str, Any]) -> list[Event]:
        extension = message.get("_tidb") or {}
        if not isinstance(extension, dict):
            raise ValueError("'_tidb' must be an object")
        if message.get("type") == WATERMARK:
            return [Resolved(_ts(extension.get("watermarkTs")))]
        location = extension.get("claimCheckLocation")
        if location:
            # TiCDC stored the whole message there and sends only this location.
            if location.__class__ is not str:
                raise ValueError("'_tidb.claimCheckLocation' must be a string")
            return [ClaimCheck(location)]
        commit_ts = _ts(extension.get("commitTs", 0))
        schema = message.get("database") or ""
        table = message.get("table") or ""
        if schema.__class__ is not str or table.__class__ is not str:
            raise ValueError("'database' and 'table' must be strings")
        if message.get("isDdl"):
            query = message["sql"]
            if query.__class__ is not str:
                raise ValueError("'sql' must be a string")
            return [DDLEvent(commit_ts, schema or None, table or None, query, _ddl_action(query))]
        op = _OPS.get(message.get("type"))  # type: ignore[arg-type]
        if op is None:
            raise DecodeError(
                PROTOCOL, f"unknown event type {shown(message.get('type'))}", where="type"
            )
        columns = _columns(message.get("mysqlType") or {}, message.get("pkNames") or ())
        data = message.get("data") or []
        olds = message.get("old") or []
        events: list[Event] = []
        for index, row in enumerate(data):
            image = _image(row, columns, index, "data")
            if op is Op.DELETE:
                events.append(RowChange(commit_ts, schema, table, op, columns, None, image))
                continue
            old = None
            if op is Op.UPDATE and index < len(olds) and olds[index] is not None:
                # Canal's "old" may hold only the changed columns: the rest are unchanged.
                old = {**image, **_image(olds[index], columns, index, "old")}
            events.append(
                RowChange(commit_ts, schema, table, op, columns, image, old, handle_key_only=False)
            )
        if extension.get("onlyHandleKey"):
            for event in events:
                if isinstance(event, RowChange):
                    event.handle_key_only = True
        return events

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


def _ts(value: Any) -> int:
    if value.__class__ is not int or not 0 <= value < 1 << 64:
        raise ValueError(f"timestamp {shown(value)} is not a uint64")
    return int(value)


def _columns(mysql_types: dict[str, Any], keys: Sequence[str]) -> dict[str, ColumnType]:
    primary = set(keys)
    columns: dict[str, ColumnType] = {}
    for name, text in mysql_types.items():
        if text.__class__ is not str:
            raise ValueError(f"the mysqlType of column {shown(name)} must be a string")
        text = text.lower()
        flags = ColumnFlag.NULLABLE
        if is_binary_name(text):
            flags |= ColumnFlag.BINARY
        if "unsigned" in text:
            flags |= ColumnFlag.UNSIGNED
        if name in primary:
            flags = (flags | ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY) & ~ColumnFlag.NULLABLE
        columns[name] = column_type(type_code(text), int(flags))
    return columns


def _image(row: Any, columns: dict[str, ColumnType], index: int, side: str) -> dict[str, Value]:
    if not isinstance(row, dict):
        raise DecodeError(PROTOCOL, f"'{side}' rows must be objects", event_index=index)
    image: dict[str, Value] = {}
    for name, raw in row.items():
        kind = columns.get(name)
        if kind is None:
            raise DecodeError(
                PROTOCOL, f"column {shown(name)} has no mysqlType", event_index=index, where=side
            )
        try:
            image[name] = _value(kind, raw)
        except (ValueError, UnicodeError) as exc:
            raise DecodeError(
                PROTOCOL,
                f"bad value {shown(raw)}: {exc}",
                event_index=index,
                where=f"{side}.{name}",
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
