"""TiCDC Simple protocol: one event per message, DML typed by table schemas; the JSON encoding
(the Avro one, ``simple_avro.py``, shares this module's codec base).

DML values are typed from the table schema of the message's ``(database, table, schemaVersion)``,
which BOOTSTRAP and DDL messages announce. In JSON every value is a string (binary ones base64,
TIMESTAMP an object ``{"location", "value"}``); Avro values are typed, with unsigned BIGINT held
as the int64 reinterpretation of its bits.

The codec base (decode and encode of every message type, the schema cache) is one unit with the
JSON encoding's value rules: the Avro encoding overrides only how a message is loaded, dumped and
its values read, so the base stays whole here, longer than the usual module on purpose.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

import orjson

from config.errors import DecodeError, EncodeError, MissingSchemaError, shown
from core.model import (
    FLOAT_TYPES,
    INDEX_TYPES,
    INTEGER_TYPES,
    Bootstrap,
    ClaimCheck,
    ColumnType,
    DDLEvent,
    Event,
    MySQLType,
    Op,
    Resolved,
    RowChange,
    TableSchema,
    Value,
    column_type,
)
from core.native import native_first, native_model
from streams.codecs import simple_grammar as grammar
from streams.codecs.base import MAX_MESSAGE_BYTES, Codec, KafkaMessage
from streams.codecs.compression import Compression, compress, decompress
from streams.codecs.limits import Limit
from streams.codecs.simple_schema import (
    MemorySchemaStore,
    SchemaStore,
    column_limits,
    column_types,
    parse_table_schema,
    schema_from_types,
    table_schema_json,
)
from streams.codecs.values import b64decode, b64encode, checked_integer, format_float

if TYPE_CHECKING:
    from ticdc_sink_native import SimpleDecoder

VERSION = 1
MASK64 = (1 << 64) - 1
DML_TYPES = {"INSERT": Op.INSERT, "UPDATE": Op.UPDATE, "DELETE": Op.DELETE}
DDL_TYPES = frozenset(
    {"CREATE", "RENAME", "CINDEX", "DINDEX", "ERASE", "TRUNCATE", "ALTER", "QUERY"}
)
# TiDB action codes and the Simple DDL type each one is announced as (the rest are QUERY).
_ACTION_TYPES = {3: "CREATE", 14: "RENAME", 7: "CINDEX", 9: "CINDEX", 32: "CINDEX", 8: "DINDEX"}
_ACTION_TYPES |= {10: "DINDEX", 33: "DINDEX", 4: "ERASE", 11: "TRUNCATE"}
_ACTION_TYPES |= dict.fromkeys((5, 6, 12, 13, 15, 17, 18, 19, 20, 22, 23), "ALTER")
# A stand-in type for a column a schema-less decode knows nothing of.
_UNTYPED = column_type(MySQLType.VARCHAR)


# A column of a layout: its type, the reader of its non-null wire values, its declared bound.
Column = tuple[ColumnType, Callable[[Any], Value], Limit | None]


def _uint64(value: Any, field: str) -> int:
    if value.__class__ is not int:
        raise ValueError(f"'{field}' must be an integer")
    if not -(1 << 63) <= value <= MASK64:
        raise ValueError(f"'{field}' is out of the 64-bit range")
    return value & MASK64


class SimpleCodec(Codec):
    """What the JSON and Avro encodings share: message semantics, schemas, typing of values."""

    avro: ClassVar[bool]

    def __init__(
        self,
        schemas: SchemaStore | None = None,
        require_schema: bool = True,
        compression: Compression = Compression.NONE,
    ) -> None:
        self.schemas = schemas if schemas is not None else MemorySchemaStore()
        self.require_schema = require_schema
        self.compression = compression
        self._announced: dict[tuple[str, str], TableSchema] = {}
        self._versions: dict[tuple[str, str], int] = {}
        # Per (schema, table, version), each column's type, value reader and declared bound
        # (None: unknown): a version never changes, so this is worked out once per version.
        self._layouts: dict[tuple[str, str, int], dict[str, Column]] = {}

    # --- decoding -------------------------------------------------------------------------

    def _load(self, value: bytes) -> Any:
        """The message as a dict shaped like the JSON form (what else it is, a rule of
        :mod:`streams.codecs.simple_grammar` refuses)."""
        raise NotImplementedError

    def _reader(self, kind: ColumnType) -> Callable[[Any], Value]:
        """The function that turns a non-null wire value of a column of ``kind`` into a value."""
        raise NotImplementedError

    def decode(self, key: bytes | None, value: bytes) -> list[Event]:
        if len(value) > MAX_MESSAGE_BYTES:
            raise DecodeError(self.protocol, f"message over {MAX_MESSAGE_BYTES} bytes")
        message = self._load(decompress(self.compression, value, self.protocol))
        grammar.check(self.protocol, message, self.avro)
        try:
            return [self._event(message)]
        except DecodeError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DecodeError(
                self.protocol, f"bad message: {type(exc).__name__}: {exc}", event_index=0
            ) from None

    def _event(self, message: dict[str, Any]) -> Event:
        kind = message.get("type")
        if kind == "WATERMARK":
            return Resolved(_uint64(message["commitTs"], "commitTs"))
        if kind == "BOOTSTRAP":
            table = self._remember(parse_table_schema(message["tableSchema"]))
            return Bootstrap(table, int(message.get("buildTs") or 0))
        if kind in DML_TYPES:
            location = message.get("claimCheckLocation")
            if location:
                # TiCDC stored the whole message there; this one holds only the handle key.
                if location.__class__ is not str:
                    raise ValueError("'claimCheckLocation' must be a string")
                return ClaimCheck(location)
            return self._row(message, DML_TYPES[kind])
        if kind in DDL_TYPES:
            return self._ddl(message, kind)
        raise DecodeError(self.protocol, f"unknown message type {shown(kind)}", where="type")

    def _remember(self, table: TableSchema) -> TableSchema:
        self.schemas.put(table)
        self._layouts.pop((table.schema, table.table, table.version), None)
        return table

    def _ddl(self, message: dict[str, Any], kind: str) -> DDLEvent:
        table = pre = None
        if message.get("tableSchema"):
            table = self._remember(parse_table_schema(message["tableSchema"]))
        if message.get("preTableSchema"):
            pre = self._remember(parse_table_schema(message["preTableSchema"]))
        named = table or pre
        sql = message["sql"]
        if sql.__class__ is not str:
            raise ValueError("'sql' must be a string")
        return DDLEvent(
            _uint64(message["commitTs"], "commitTs"),
            named.schema or None if named else None,
            named.table or None if named else None,
            sql,
            kind,
            table_schema=table,
            pre_table_schema=pre,
        )

    def _row(self, message: dict[str, Any], op: Op) -> RowChange:
        schema, table = message["database"], message["table"]
        version = _uint64(message.get("schemaVersion") or 0, "schemaVersion")
        layout = self._layouts.get((schema, table, version))
        if layout is None:
            known = self.schemas.get(schema, table, version)
            if known is None and self.require_schema:
                commit_ts = _uint64(message["commitTs"], "commitTs")
                raise MissingSchemaError(self.protocol, schema, table, version, commit_ts)
            types = {} if known is None else column_types(known)
            limits = {} if known is None else column_limits(known, types)
            layout = {
                name: (kind, self._reader(kind), limits.get(name)) for name, kind in types.items()
            }
            if known is not None:
                self._layouts[(schema, table, version)] = layout
        columns: dict[str, ColumnType] = {}
        new = self._image(message.get("data"), layout, columns, "data")
        old = self._image(message.get("old"), layout, columns, "old")
        if message.get("handleKeyOnly"):
            self._check_handle_key(schema, table, version, new, old)
        return RowChange(
            _uint64(message["commitTs"], "commitTs"),
            schema,
            table,
            op,
            columns,
            new,
            old,
            handle_key_only=bool(message.get("handleKeyOnly")),
        )

    def _check_handle_key(
        self, schema: str, table: str, version: int, *images: dict[str, Value] | None
    ) -> None:
        known = self.schemas.get(schema, table, version)
        key = grammar.handle_key(known) if known is not None else None
        for image in images:
            if image is not None and key is not None and set(image) != key:
                raise grammar.broken(
                    self.protocol,
                    grammar.HANDLE_KEY_ONLY,
                    f"columns {shown(sorted(image))} where the handle key is {sorted(key)}",
                )

    def _image(
        self,
        raw: Any,
        layout: dict[str, Column],
        columns: dict[str, ColumnType],
        side: str,
    ) -> dict[str, Value] | None:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise DecodeError(self.protocol, f"'{side}' must be an object", where=side)
        image: dict[str, Value] = {}
        for name, value in raw.items():
            entry = layout.get(name)
            if entry is None:
                if layout:
                    raise grammar.broken(
                        self.protocol,
                        grammar.IMAGE_COLUMNS,
                        f"column {shown(name)} is not in the table schema",
                        side,
                    )
                entry = (_UNTYPED, _passthrough, None)
            kind, reader, limit = entry
            try:
                if value is None:
                    image[name] = None
                elif limit is None:
                    image[name] = checked_integer(kind, reader(value))
                else:
                    image[name] = limit.check(checked_integer(kind, reader(value)))
            except (ValueError, TypeError, KeyError) as exc:
                raise grammar.broken(
                    self.protocol,
                    grammar.COLUMN_VALUE,
                    f"bad value {shown(value)}: {exc}",
                    f"{side}.{name}",
                ) from None
            columns[name] = kind
        return image

    # --- encoding -------------------------------------------------------------------------

    def _dump(self, message: dict[str, Any]) -> bytes:
        raise NotImplementedError

    def _untyped(self, kind: ColumnType, value: Value) -> Any:
        raise NotImplementedError

    def encode(self, events: Sequence[Event]) -> list[KafkaMessage]:
        messages: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, RowChange):
                known = self._announced.get((event.schema, event.table))
                if known is None or not _describes(known, event):
                    # Versions are unique per table, as TiDB's schema versions are.
                    version = self._versions.get((event.schema, event.table), 0) + 1
                    known = schema_from_types(event.schema, event.table, event.columns, version)
                    messages.append(self._bootstrap(known))
                messages.append(self._dml(event, known))
            elif isinstance(event, Bootstrap):
                messages.append(self._bootstrap(event.table_schema))
            elif isinstance(event, DDLEvent):
                messages.append(self._ddl_message(event))
            elif isinstance(event, Resolved):
                messages.append(
                    {
                        "version": VERSION,
                        "type": "WATERMARK",
                        "commitTs": event.commit_ts,
                        "buildTs": 0,
                    }
                )
            else:
                raise EncodeError(f"simple protocol has no {type(event).__name__} event")
        return [
            KafkaMessage(None, compress(self.compression, self._dump(message)))
            for message in messages
        ]

    def _bootstrap(self, table: TableSchema) -> dict[str, Any]:
        self._announce(table)
        return {
            "version": VERSION,
            "type": "BOOTSTRAP",
            "commitTs": 0,
            "buildTs": 0,
            "tableSchema": table_schema_json(table, self.avro),
        }

    def _announce(self, table: TableSchema) -> None:
        name = (table.schema, table.table)
        self._announced[name] = table
        self._versions[name] = max(self._versions.get(name, 0), table.version)

    def _ddl_message(self, event: DDLEvent) -> dict[str, Any]:
        kind = event.ddl_type
        if isinstance(kind, int):
            kind = _ACTION_TYPES.get(kind, "QUERY")
        if event.table_schema is not None:
            self._announce(event.table_schema)
        return {
            "version": VERSION,
            "type": kind,
            "sql": event.query,
            "commitTs": event.commit_ts,
            "buildTs": 0,
            "tableSchema": _schema_or_none(event.table_schema, self.avro),
            "preTableSchema": _schema_or_none(event.pre_table_schema, self.avro),
        }

    def _dml(self, event: RowChange, table: TableSchema) -> dict[str, Any]:
        types = _cached_types(table)
        message: dict[str, Any] = {
            "version": VERSION,
            "database": event.schema,
            "table": event.table,
            "tableID": table.table_id,
            "type": event.op.value.upper(),
            "commitTs": event.commit_ts,
            "buildTs": 0,
            "schemaVersion": table.version,
        }
        for side, image in (("data", event.new), ("old", event.old)):
            if image is not None:
                message[side] = {name: self._untyped(types[name], v) for name, v in image.items()}
            elif self.avro:
                message[side] = None
        if self.avro:
            message.update(claimCheckLocation=None, handleKeyOnly=None, checksum=None)
        return message


def _describes(table: TableSchema, event: RowChange) -> bool:
    """Whether ``table`` types every column of ``event`` as the event does."""
    types = _cached_types(table)
    return all(types.get(name) == kind for name, kind in event.columns.items())


def _schema_or_none(table: TableSchema | None, avro: bool) -> dict[str, Any] | None:
    return None if table is None else table_schema_json(table, avro)


@cache
def _cached_types(table: TableSchema) -> dict[str, ColumnType]:
    return column_types(table)


# --- JSON ------------------------------------------------------------------------------------


def _passthrough(raw: Any) -> Value:
    # A value is a JSON scalar: an array or object (nested any depth) is no column's value.
    if raw.__class__ not in _SCALARS:
        raise ValueError(f"not a JSON scalar: {type(raw).__name__}")
    return raw


_SCALARS = (str, int, float, bool)


def _json_int(raw: Any) -> int:
    if raw.__class__ is int:
        return int(raw)
    if raw.__class__ is not str or not raw.lstrip("-").isdigit():
        raise ValueError("not an integer")
    return int(raw)


def _json_binary(raw: Any) -> Value:
    return b64decode(raw)


def _json_text(raw: Any) -> Value:
    if raw.__class__ is not str:
        raise ValueError("not a string")
    return str(raw)


def _json_timestamp(raw: Any) -> Value:
    if isinstance(raw, dict):
        raw = raw["value"]
    return _json_text(raw)


def _json_float(raw: Any) -> float:
    if raw.__class__ not in (str, int, float):
        raise ValueError("not a number")
    return float(raw)


def _json_reader(kind: ColumnType) -> Callable[[Any], Value]:
    if kind.is_binary:
        return _json_binary
    mysql_type = kind.mysql_type
    if mysql_type in INTEGER_TYPES or mysql_type in INDEX_TYPES:
        return _json_int
    if mysql_type in FLOAT_TYPES:
        return _json_float
    if mysql_type == MySQLType.TIMESTAMP:
        return _json_timestamp
    return _json_text


class SimpleJSONCodec(SimpleCodec):
    """Simple protocol with ``encoding-format = "json"``."""

    protocol = "simple"
    avro = False

    def __init__(
        self,
        schemas: SchemaStore | None = None,
        require_schema: bool = True,
        compression: Compression = Compression.NONE,
        native: bool = True,
    ) -> None:
        super().__init__(schemas, require_schema, compression)
        readers = (_json_binary, _json_int, _json_float, _json_timestamp, _json_text)
        # The native decoder takes DML and watermarks of tables whose layout is made here and
        # hands anything else to the Python path, where anything wrong raises its DecodeError.
        # Compressed messages are inflated by the Python path.
        model = native_model(native and compression is Compression.NONE)
        self._native: SimpleDecoder | None = None
        if model is not None:
            from ticdc_sink_native import SimpleDecoder

            self._native = SimpleDecoder(model, readers, self._layouts, MAX_MESSAGE_BYTES)
            self.decode = native_first(  # type: ignore[method-assign,assignment]
                self._native.decode, self.decode
            )

    def _load(self, value: bytes) -> Any:
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise DecodeError(self.protocol, f"not JSON: {exc}", event_index=0) from None

    def _reader(self, kind: ColumnType) -> Callable[[Any], Value]:
        return _json_reader(kind)

    def _dump(self, message: dict[str, Any]) -> bytes:
        return orjson.dumps(message)

    def _untyped(self, kind: ColumnType, value: Value) -> Any:
        if value is None:
            return None
        if isinstance(value, bytes):
            if kind.is_binary:
                return b64encode(value)
            raise EncodeError("simple JSON carries text columns as UTF-8 strings")
        if kind.mysql_type == MySQLType.TIMESTAMP:
            return {"location": "UTC", "value": value}
        if isinstance(value, float):
            return format_float(value, single=kind.mysql_type == MySQLType.FLOAT)
        return str(value)
