"""TiCDC Simple protocol with ``encoding-format = "avro"``: the codec base of ``simple.py`` over
plain Avro binary (no registry framing), values typed as TiCDC's Avro schema types them."""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

from config.errors import DecodeError
from core.model import FLOAT_TYPES, INDEX_TYPES, INTEGER_TYPES, ColumnType, MySQLType, Value
from streams.codecs import simple_grammar as grammar
from streams.codecs.simple import DDL_TYPES, DML_TYPES, MASK64, SimpleCodec
from streams.codecs.values import format_float, text_or_bytes

_AVRO_NAMESPACE = "com.pingcap.simple.avro."


@cache
def avro_schema() -> Any:
    """The Simple protocol's Avro schema, parsed once: TiCDC's whole top-level union of 12
    records (``message.json`` in tiflow's pkg/sink/codec/simple), not just its ``Message``."""
    import fastavro

    text = resources.files("streams.codecs").joinpath("simple_avro_schema.json").read_text()
    return fastavro.parse_schema(json.loads(text))


# TiCDC's encoder writes every message with the whole union as its schema (goavro's
# BinaryFromNative of ``{"com.pingcap.simple.avro.Message": ...}``), so each message starts with
# the zigzag varint of the union branch: 11, the ``Message`` record, is the byte 0x16.
_AVRO_MESSAGE = _AVRO_NAMESPACE + "Message"


_UNSIGNED_INDEX_TYPES = frozenset({MySQLType.BIT, MySQLType.ENUM, MySQLType.SET})
_UNSIGNED_BIGINT = _AVRO_NAMESPACE + "UnsignedBigint"
_TIMESTAMP = _AVRO_NAMESPACE + "Timestamp"


# Each column kind takes the union branches tiflow's ``encodeValue4Avro``
# (pkg/sink/codec/simple/marshaller.go) writes for it: a TIMESTAMP the Timestamp record, an
# integer a long (an unsigned BIGINT the UnsignedBigint record, the same number either way), a
# FLOAT a float, a DOUBLE a double, ENUM/SET a long (older TiCDC) or their names; everything else
# a string, or bytes where the column is binary (a TEXT's bytes stay text where UTF-8). A value of
# another branch is no value of the column (rule column-value): applied, it would be converted
# by the downstream into something TiCDC never sent.
def _avro_integer(kind: ColumnType, raw: Any) -> Value:
    if raw.__class__ is tuple and raw[0] == _UNSIGNED_BIGINT:
        return int(raw[1]["value"]) & MASK64
    if raw.__class__ is not int:
        if kind.mysql_type in (MySQLType.ENUM, MySQLType.SET):
            return _avro_text(kind, raw)
        raise ValueError(f"a {_branch(raw)} is no integer")
    if kind.mysql_type in _UNSIGNED_INDEX_TYPES or (
        kind.is_unsigned and kind.mysql_type in INTEGER_TYPES
    ):
        return int(raw) & MASK64
    return int(raw)


def _avro_float(kind: ColumnType, raw: Any) -> Value:
    if raw.__class__ is not float:
        raise ValueError(f"a {_branch(raw)} is no float")
    if kind.mysql_type == MySQLType.FLOAT:
        return float(format_float(raw, single=True))
    return float(raw)


def _avro_timestamp(kind: ColumnType, raw: Any) -> Value:
    if raw.__class__ is not tuple or raw[0] != _TIMESTAMP:
        raise ValueError(f"a {_branch(raw)} is no Timestamp record")
    return str(raw[1]["value"])


def _avro_text(kind: ColumnType, raw: Any) -> Value:
    if raw.__class__ is str:
        return str(raw)
    if raw.__class__ is bytes:
        return bytes(raw) if kind.is_binary else text_or_bytes(raw)
    raise ValueError(f"a {_branch(raw)} is no string")


def _branch(raw: Any) -> str:
    return str(raw[0]).rpartition(".")[2] if raw.__class__ is tuple else type(raw).__name__


def _avro_reader(kind: ColumnType) -> Callable[[ColumnType, Any], Value]:
    mysql_type = kind.mysql_type
    if mysql_type in INTEGER_TYPES or mysql_type in INDEX_TYPES:
        return _avro_integer
    if mysql_type in FLOAT_TYPES:
        return _avro_float
    if mysql_type == MySQLType.TIMESTAMP:
        return _avro_timestamp
    return _avro_text


class SimpleAvroCodec(SimpleCodec):
    """Simple protocol, ``encoding-format = "avro"``: plain Avro binary, no registry framing."""

    protocol = "simple-avro"
    avro = True

    def _load(self, value: bytes) -> dict[str, Any]:
        import fastavro

        try:
            message: Any = fastavro.schemaless_reader(
                io.BytesIO(value),
                avro_schema(),
                None,
                return_record_name=True,
                return_record_name_override=True,
            )
        except Exception as exc:  # fastavro raises many kinds on corrupt input
            raise DecodeError(self.protocol, f"not a Simple Avro message: {exc!r}") from None
        branch, message = message
        if branch != _AVRO_MESSAGE:
            raise DecodeError(
                self.protocol,
                f"top-level union branch is {branch}, not {_AVRO_MESSAGE}",
                where="byte 0",
            )
        payload_branch, payload = message["payload"]
        if _AVRO_RECORDS.get(message["type"]) != payload_branch.rpartition(".")[2]:
            # TiCDC writes each type with its own record (tiflow avro.go newResolvedMessageMap,
            # newBootstrapMessageMap, newDDLMessageMap, newDMLMessageMap); another would be read
            # as something it is not (a DML's fields as a watermark).
            raise grammar.broken(
                self.protocol,
                grammar.MESSAGE_TYPE,
                f"type {message['type']} with a {payload_branch.rpartition('.')[2]} payload",
            )
        if message["type"] in ("DML", "DDL"):
            return dict(payload)
        return {**payload, "type": message["type"]}

    def _reader(self, kind: ColumnType) -> Callable[[Any], Value]:
        return functools.partial(_avro_reader(kind), kind)

    def _dump(self, message: dict[str, Any]) -> bytes:
        import fastavro

        kind = message["type"]
        if kind in DDL_TYPES:
            wrapper = "DDL"
        elif kind in DML_TYPES:
            wrapper = "DML"
        else:
            wrapper = kind
        record = {k: _signed(v) if k in _LONG_FIELDS else v for k, v in message.items()}
        payload = (_AVRO_NAMESPACE + _AVRO_RECORDS[wrapper], record)
        out = io.BytesIO()
        wrapped = {"type": wrapper, "payload": payload}
        fastavro.schemaless_writer(out, avro_schema(), (_AVRO_MESSAGE, wrapped))
        return out.getvalue()

    def _untyped(self, kind: ColumnType, value: Value) -> Any:
        if value is None:
            return None
        if kind.mysql_type == MySQLType.TIMESTAMP:
            return (_AVRO_NAMESPACE + "Timestamp", {"location": "UTC", "value": value})
        if isinstance(value, int):
            if kind.mysql_type == MySQLType.LONGLONG and kind.is_unsigned:
                return (_AVRO_NAMESPACE + "UnsignedBigint", {"value": _signed(value)})
            # Unsigned values travel as the int64 with the same bits, as TiCDC writes them.
            return ("long", _signed(value))
        if isinstance(value, float):
            return ("float" if kind.mysql_type == MySQLType.FLOAT else "double", value)
        if isinstance(value, bytes):
            return ("bytes", value)
        return ("string", value)


_AVRO_RECORDS = {"WATERMARK": "Watermark", "BOOTSTRAP": "Bootstrap", "DDL": "DDL", "DML": "DML"}
_LONG_FIELDS = frozenset({"commitTs", "schemaVersion", "buildTs"})


def _signed(value: Any) -> Any:
    if isinstance(value, int) and value >= 1 << 63:
        return value - (1 << 64)
    return value
