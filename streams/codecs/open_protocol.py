"""TiCDC Open Protocol: JSON events framed by 8-byte big-endian lengths, several per message.

Key: version (int64, must be 1), then ``length, key JSON`` pairs. Value: ``length, value JSON``
pairs, one per key. Rows carry ``u`` (new), ``p`` (old, updates only) or ``d`` (deleted);
each column is ``{"t": type, "h": handle?, "f": flags, "v": value}`` where BLOB/TEXT values are
base64 and binary CHAR/VARCHAR values are Go-escaped strings. A row's key carries ``rid``, TiDB's
integer handle of the row (a key-less table's hidden row id), when the table's handle is an
integer and the id is not 0 (TiCDC's ``MessageKey.RowID``, ``omitempty``). What TiCDC writes,
field by field, is the grammar of :mod:`streams.codecs.open_grammar`: a message breaking it is
refused with a :class:`~config.errors.GrammarError` naming the rule.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from config.errors import DecodeError, EncodeError, GrammarError, shown
from core.model import (
    BLOB_TYPES,
    CHAR_TYPES,
    FLOAT_TYPES,
    ClaimCheck,
    ColumnFlag,
    ColumnType,
    DDLEvent,
    Event,
    Op,
    Resolved,
    RowChange,
    Value,
    column_type,
    integer_range,
)
from core.native import native_model
from streams.codecs import open_grammar as grammar
from streams.codecs.base import MAX_MESSAGE_BYTES, KafkaMessage, PackingCodec
from streams.codecs.values import (
    b64decode,
    b64encode,
    checked_integer,
    go_quote,
    go_unquote,
    text_or_bytes,
)

if TYPE_CHECKING:
    from ticdc_sink_native import OpenDecoder

PROTOCOL = "open"
VERSION = 1
# TiCDC's default max-batch-size: row events per message.
DEFAULT_MAX_BATCH = 16
KEY_ROW, KEY_DDL, KEY_RESOLVED = 1, 2, 3
_LENGTH = struct.Struct(">Q")
_HANDLE_KEY = int(ColumnFlag.HANDLE_KEY)
_UNSIGNED = int(ColumnFlag.UNSIGNED)
_BINARY = int(ColumnFlag.BINARY)
_JSON_SCALARS = (str, int, float, bool, type(None))
# The values of TiCDC's MessageKey.RowID (an int64): a row id outside them is no row id.
_INT64 = range(-(1 << 63), 1 << 63)


def split_frames(data: bytes, skip: int, what: str) -> list[bytes]:
    """The length-prefixed frames of ``data`` after its first ``skip`` bytes."""
    frames: list[bytes] = []
    size = len(data)
    pos = skip
    while pos < size:
        if pos + 8 > size:
            raise DecodeError(PROTOCOL, f"{what} ends inside a length", where=f"byte {pos}")
        (length,) = _LENGTH.unpack_from(data, pos)
        pos += 8
        if length > size - pos:
            raise DecodeError(
                PROTOCOL,
                f"{what} frame of {length} bytes runs past the end ({size - pos} left)",
                event_index=len(frames),
                where=f"byte {pos - 8}",
            )
        frames.append(data[pos : pos + length])
        pos += length
    return frames


def _blob(value: Any, flags: int) -> Value:
    data = b64decode(value)
    return data if flags & _BINARY else text_or_bytes(data)


def _char(value: Any, flags: int) -> Value:
    return go_unquote(value) if flags & _BINARY else value


_CONVERT: dict[int, Callable[[Any, int], Value]] = {t: _blob for t in BLOB_TYPES}
_CONVERT.update({t: _char for t in CHAR_TYPES})
# The shared column type, the converter its text values need (if any), whether its values are
# floats (Go's encoder writes a whole-number FLOAT/DOUBLE as an integer: ``"v":3``), and the
# range of an integer type's values (orjson reads an integer past 64 bits as a float: refused),
# looked up once per kind rather than per value.
_Kind = tuple[ColumnType, Callable[[Any, int], Value] | None, bool, range | None]
# type << 16 | flags -> its _Kind: a codec's cache, filled as types are met.
Kinds = dict[int, _Kind]


def _kind(kinds: Kinds, mysql_type: Any, flags: Any) -> _Kind:
    found = kinds[mysql_type << 16 | flags] = (
        column_type(mysql_type, flags),
        _CONVERT.get(mysql_type),
        mysql_type in FLOAT_TYPES,
        integer_range(mysql_type, bool(flags & _UNSIGNED)),
    )
    return found


def _image(
    raw: Any, columns: dict[str, ColumnType], kinds: Kinds, index: int, side: str
) -> dict[str, Value]:
    if raw.__class__ is not dict or not raw:
        raise _broken(
            grammar.IMAGE, f"'{side}' must be a non-empty object, got {shown(raw)}", index, side
        )
    image: dict[str, Value] = {}
    name = ""
    try:
        for name, column in raw.items():
            if not 0 < len(name) <= grammar.MAX_NAME:
                raise _broken(
                    grammar.COLUMN_NAME, f"a column name of {len(name)} characters", index, side
                )
            get = column.get
            flags = get("f")
            if flags is None:
                # Encoders before the flags field only said whether a column is the handle.
                flags = _HANDLE_KEY if get("h") is True else 0
            mysql_type = column["t"]
            # Checked before the lookup: a type or flags out of range would alias another key.
            if mysql_type.__class__ is not int or flags.__class__ is not int:
                raise ValueError("'t' and 'f' must be integers")
            if mysql_type >> 8 or flags >> 16:
                raise ValueError(f"type {mysql_type} or flags {flags} out of range")
            kind, convert, floats, integers = kinds.get(mysql_type << 16 | flags) or _kind(
                kinds, mysql_type, flags
            )
            value = get("v")
            if value is not None:
                if integers is not None and value.__class__ is not str:
                    # Text is taken as sent (TiCDC's own test vectors hold some); a number
                    # must be an integer of the type's range.
                    if value.__class__ is not int or value not in integers:
                        checked_integer(kind, value)
                elif convert is not None and value.__class__ is str:
                    value = convert(value, flags)
                elif floats and value.__class__ is int:
                    value = float(value)
                elif value.__class__ not in _JSON_SCALARS:
                    raise ValueError(f"value of type {type(value).__name__}")
            columns[name] = kind
            image[name] = value
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise _broken(grammar.COLUMN, f"bad column: {exc}", index, f"{side}.{name}") from None
    return image


def _broken(rule: str, reason: str, index: int, where: str | None = None) -> GrammarError:
    """The error of a message breaking ``rule`` of :mod:`streams.codecs.open_grammar`."""
    return GrammarError(PROTOCOL, rule, reason, event_index=index, where=where)


def _load(data: bytes, index: int, what: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(PROTOCOL, f"{what} is not JSON: {exc}", event_index=index) from None


def _event_type(header: Any) -> Any:
    """A key's event type, None when the key is no object."""
    return header.get("t") if header.__class__ is dict else None


class OpenProtocolCodec(PackingCodec):
    """Open Protocol, version 1."""

    protocol = PROTOCOL

    def __init__(self, max_batch: int = DEFAULT_MAX_BATCH, native: bool = True) -> None:
        self.max_batch = max_batch
        self._kinds: Kinds = {}
        model = native_model(native)
        decoder: OpenDecoder | None = None
        if model is not None:
            from ticdc_sink_native import OpenDecoder

            decoder = OpenDecoder(model, column_type, MAX_MESSAGE_BYTES)
        super().__init__(decoder)

    def decode(self, key: bytes | None, value: bytes) -> list[Event]:
        if key is None or len(key) < 8:
            raise DecodeError(PROTOCOL, "the key must start with the 8-byte protocol version")
        if len(key) + len(value) > MAX_MESSAGE_BYTES:
            raise DecodeError(PROTOCOL, f"message over {MAX_MESSAGE_BYTES} bytes")
        (version,) = _LENGTH.unpack_from(key, 0)
        if version != VERSION:
            raise DecodeError(PROTOCOL, f"unsupported version {version}", where="key byte 0")
        keys = split_frames(key, 8, "key")
        values = split_frames(value, 0, "value")
        if len(values) != len(keys):
            # A resolved event's value may be absent altogether.
            if values or any(
                _event_type(_load(k, i, "key")) != KEY_RESOLVED for i, k in enumerate(keys)
            ):
                raise DecodeError(
                    PROTOCOL, f"{len(keys)} keys but {len(values)} values in one message"
                )
            values = [b""] * len(keys)
        return [self._event(i, k, v) for i, (k, v) in enumerate(zip(keys, values, strict=True))]

    def _event(self, index: int, key: bytes, value: bytes) -> Event:
        header = _load(key, index, "key")
        if header.__class__ is not dict:
            raise _broken(grammar.KEY_OBJECT, "key must be an object", index)
        kind = header.get("t")
        if kind.__class__ is not int:
            # Python's 1.0 and true equal 1: no type TiCDC writes (rule key-type).
            kind = None
        ts = header.get("ts")
        if ts.__class__ is not int or not 0 <= ts < 1 << 64:
            raise _broken(
                grammar.KEY_TS, f"'ts' must be a uint64, got {shown(ts)}", index, "key.ts"
            )
        if kind == KEY_RESOLVED:
            return Resolved(ts)
        schema = header.get("scm")
        table = header.get("tbl")
        for field, name in (("scm", schema), ("tbl", table)):
            if name is not None and name.__class__ is not str:
                raise _broken(grammar.KEY_NAMES, f"'{field}' must be a string", index, "key")
        if kind == KEY_DDL:
            return self._ddl(index, ts, schema, table, value)
        if kind == KEY_ROW:
            if not schema or not table:
                raise _broken(
                    grammar.KEY_NAMES, "a row's key needs 'scm' and 'tbl', non-empty", index, "key"
                )
            return self._row(index, ts, header, schema, table, value, self._kinds)
        raise _broken(grammar.KEY_TYPE, f"unknown event type {shown(kind)}", index, "key.t")

    @staticmethod
    def _ddl(index: int, ts: int, schema: str | None, table: str | None, value: bytes) -> DDLEvent:
        body = _load(value, index, "DDL value")
        query = body.get("q") if isinstance(body, dict) else None
        ddl_type = body.get("t", 0) if isinstance(body, dict) else None
        if query.__class__ is not str or not query.strip() or ddl_type.__class__ is not int:
            raise _broken(
                grammar.DDL_VALUE,
                "a DDL value needs 'q' (a non-empty string) and 't' (integer)",
                index,
            )
        return DDLEvent(ts, schema or None, table or None, query, ddl_type)

    @staticmethod
    def _row(
        index: int,
        ts: int,
        header: dict[str, Any],
        schema: str,
        table: str,
        value: bytes,
        kinds: Kinds,
    ) -> RowChange | ClaimCheck:
        location = header.get("ccl")
        if location:
            # TiCDC stored the whole message (key and value) there; the value sent here only
            # holds the handle key.
            if location.__class__ is not str:
                raise DecodeError(
                    PROTOCOL, "'ccl' must be a string", event_index=index, where="key.ccl"
                )
            return ClaimCheck(location)
        body = _load(value, index, "row value")
        if body.__class__ is not dict:
            raise _broken(grammar.ROW_VALUE, "row value must be an object", index)
        columns: dict[str, ColumnType] = {}
        new = old = None
        if "d" in body:
            if "u" in body or "p" in body:
                raise _broken(grammar.ROW_IMAGES, "'d' with 'u' or 'p'", index)
            op = Op.DELETE
            old = _image(body["d"], columns, kinds, index, "d")
        elif "u" in body:
            new = _image(body["u"], columns, kinds, index, "u")
            op = Op.INSERT
            if "p" in body:
                op = Op.UPDATE
                old = _image(body["p"], columns, kinds, index, "p")
        else:
            raise _broken(grammar.ROW_IMAGES, "row value has none of 'u', 'd'", index)
        partition = header.get("ptn")
        # Like the partition id, a row id that is not an int64 is dropped, not an error.
        row_id = header.get("rid")
        return RowChange(
            ts,
            schema,
            table,
            op,
            columns,
            new,
            old,
            partition_id=partition if partition.__class__ is int else None,
            handle_key_only=bool(header.get("ohk")),
            row_id=row_id if row_id.__class__ is int and row_id in _INT64 else None,
        )

    def encode(self, events: Sequence[Event]) -> list[KafkaMessage]:
        messages: list[KafkaMessage] = []
        keys: list[bytes] = []
        values: list[bytes] = []

        def flush() -> None:
            if keys:
                messages.append(_frame(keys, values))
                keys.clear()
                values.clear()

        for event in events:
            if isinstance(event, RowChange):
                keys.append(orjson.dumps(_row_key(event)))
                values.append(orjson.dumps(_row_value(event)))
                if len(keys) >= self.max_batch:
                    flush()
                continue
            flush()
            if isinstance(event, DDLEvent):
                key = {"ts": event.commit_ts, "scm": event.schema or "", "tbl": event.table or ""}
                key["t"] = KEY_DDL
                body = orjson.dumps({"q": event.query, "t": event.ddl_type})
                messages.append(_frame([orjson.dumps(key)], [body]))
            elif isinstance(event, Resolved):
                key_bytes = orjson.dumps({"ts": event.commit_ts, "t": KEY_RESOLVED})
                messages.append(_frame([key_bytes], [b""]))
            else:
                raise EncodeError(f"open protocol has no {type(event).__name__} event")
        flush()
        return messages


def _frame(keys: list[bytes], values: list[bytes]) -> KafkaMessage:
    key = bytearray(_LENGTH.pack(VERSION))
    for part in keys:
        key += _LENGTH.pack(len(part)) + part
    value = bytearray()
    for part in values:
        value += _LENGTH.pack(len(part)) + part
    return KafkaMessage(bytes(key), bytes(value))


def _row_key(event: RowChange) -> dict[str, Any]:
    key: dict[str, Any] = {"ts": event.commit_ts, "scm": event.schema, "tbl": event.table}
    if event.row_id is not None:
        key["rid"] = event.row_id
    if event.partition_id is not None:
        key["ptn"] = event.partition_id
    if event.handle_key_only:
        key["ohk"] = True
    key["t"] = KEY_ROW
    return key


def _row_value(event: RowChange) -> dict[str, Any]:
    if event.op is Op.DELETE:
        return {"d": _encode_image(event.old or {}, event.columns)}
    body = {"u": _encode_image(event.new or {}, event.columns)}
    if event.op is Op.UPDATE and event.old is not None:
        body["p"] = _encode_image(event.old, event.columns)
    return body


def _encode_image(image: dict[str, Value], columns: dict[str, ColumnType]) -> dict[str, Any]:
    encoded = {}
    for name, value in image.items():
        kind = columns[name]
        column: dict[str, Any] = {"t": kind.mysql_type}
        if kind.flags & ColumnFlag.HANDLE_KEY:
            column["h"] = True
        column["f"] = kind.flags
        if isinstance(value, (bytes, str)) and value is not None:
            if kind.mysql_type in BLOB_TYPES:
                value = b64encode(value if isinstance(value, bytes) else value.encode())
            elif kind.mysql_type in CHAR_TYPES and kind.is_binary:
                value = go_quote(value if isinstance(value, bytes) else value.encode())
            elif isinstance(value, bytes):
                raise EncodeError(f"column {name}: bytes need a BLOB type or the binary flag")
        column["v"] = value
        encoded[name] = column
    return encoded
