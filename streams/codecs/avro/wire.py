"""The bytes around TiCDC's Avro records: Confluent's wire format on rows, TiCDC's own framing of
DDL and checkpoint messages, and the names TiCDC gives records, subjects and topics.

A row's key and value are each Confluent's frame: the magic byte 0, the writer schema's registry
id (4 bytes, big-endian), then the Avro binary record. With ``avro-enable-watermark=true`` (and
the TiDB extension) TiCDC also writes a DDL as the byte 1 followed by the JSON
``{"query","type","schema","table","commitTs"}``, and a checkpoint (watermark) as the byte 2
followed by the ts (8 bytes, big-endian); both with no key (tiflow avro.go, ``ddlByte`` and
``checkpointByte``; its decoder tells the three apart by the first byte of the value).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from config.errors import DecodeError
from core.avro_names import sanitize_name as sanitize_name
from streams.codecs import avro_grammar as grammar

PROTOCOL = "avro"
MAGIC = 0
DDL_BYTE = 1
CHECKPOINT_BYTE = 2
HEADER = 5
# TiCDC's changefeed namespace, the first part of every record's namespace.
NAMESPACE = "default"
KEY_SUFFIX = "-key"
VALUE_SUFFIX = "-value"
_NOT_A_TOPIC = re.compile(r"[^A-Za-z0-9._-]")


def frame(schema_id: int, record: bytes) -> bytes:
    """Confluent's frame of an Avro record written with schema ``schema_id``."""
    return bytes((MAGIC,)) + schema_id.to_bytes(4, "big") + record


def schema_id(data: bytes, part: str) -> int:
    """The registry id in a Confluent frame (``part`` is "key" or "value", for the error)."""
    if len(data) < HEADER:
        raise DecodeError(
            PROTOCOL,
            f"{part} of {len(data)} bytes is shorter than Confluent's 5-byte header",
            where=f"{part} byte {len(data)}",
        )
    if data[0] != MAGIC:
        raise DecodeError(
            PROTOCOL,
            f"{part} starts with byte {data[0]}, not Confluent's magic byte 0",
            where=f"{part} byte 0",
        )
    return int.from_bytes(data[1:HEADER], "big")


def checkpoint(ts: int) -> bytes:
    return bytes((CHECKPOINT_BYTE,)) + ts.to_bytes(8, "big")


def checkpoint_ts(value: bytes) -> int:
    if len(value) != 9:
        raise grammar.broken(
            grammar.CHECKPOINT,
            f"checkpoint message of {len(value)} bytes, not 9 (the byte 2 and an 8-byte ts)",
            f"value byte {min(len(value), 9)}",
        )
    return int.from_bytes(value[1:], "big")


def ddl(query: str, ddl_type: int, schema: str, table: str, commit_ts: int) -> bytes:
    body = {"query": query, "type": ddl_type, "schema": schema, "table": table}
    return bytes((DDL_BYTE,)) + orjson.dumps({**body, "commitTs": commit_ts})


def ddl_fields(value: bytes) -> dict[str, Any]:
    """The DDL message's JSON, checked for the fields TiCDC writes and their types."""
    try:
        fields = orjson.loads(value[1:])
    except orjson.JSONDecodeError as exc:
        raise DecodeError(
            PROTOCOL, f"DDL message is not JSON: {exc}", where="value byte 1"
        ) from None
    if not isinstance(fields, dict):
        raise grammar.broken(grammar.DDL, "DDL message is not a JSON object", "value byte 1")
    for name, kind in _DDL_FIELDS.items():
        if fields.get(name).__class__ is not kind:
            raise grammar.broken(
                grammar.DDL, f"DDL message's {name!r} is missing or not a {kind.__name__}", name
            )
    if not 0 <= fields["commitTs"] < 1 << 64:
        raise grammar.broken(grammar.DDL, "DDL message's commitTs is not a TSO", "commitTs")
    if not fields["query"].strip():
        raise grammar.broken(grammar.DDL, "DDL message without its statement", "query")
    return fields


_DDL_FIELDS: dict[str, type] = {
    "query": str,
    "type": int,
    "schema": str,
    "table": str,
    "commitTs": int,
}


def record_namespace(schema: str) -> str:
    return f"{NAMESPACE}.{sanitize_name(schema)}"


def topic_for(prefix: str, schema: str, table: str) -> str:
    """The topic TiCDC's dispatcher ``<prefix>_{schema}_{table}`` names: Kafka's topic
    characters are ``[A-Za-z0-9._-]``, TiCDC writes ``_`` for any other."""
    return _NOT_A_TOPIC.sub("_", f"{prefix}_{schema}_{table}")


def subject(topic: str, suffix: str) -> str:
    """The registry subject of a topic's keys or values (TiCDC writes ``.`` in a topic as
    ``_`` there, ``sanitizeTopic``)."""
    return topic.replace(".", "_") + suffix
