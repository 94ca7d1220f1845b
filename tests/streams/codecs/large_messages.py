"""Messages built as TiCDC builds them for ``large-message-handle-option`` (tiflow
pkg/sink/codec: open ``newClaimCheckLocationMessage``, simple ``newDMLMessage(event, true)`` plus
``ClaimCheckLocation``, canal-json ``NewClaimCheckMessage``; pkg/sink/kafka/claimcheck
``WriteMessage`` for the stored object), from this project's own encoders."""

from __future__ import annotations

import base64
import io
import struct
from typing import Any

import orjson

from core.model import RowChange
from streams.codecs.base import Codec, KafkaMessage
from streams.codecs.open_protocol import split_frames

_LENGTH = struct.Struct(">Q")


def key_only(row: RowChange) -> RowChange:
    """``row`` with only its handle-key columns, as TiCDC sends a handle-key-only row."""
    keys = [name for name, kind in row.columns.items() if kind.is_key]
    pick = lambda image: None if image is None else {k: image[k] for k in keys}  # noqa: E731
    return RowChange(
        row.commit_ts,
        row.schema,
        row.table,
        row.op,
        {k: row.columns[k] for k in keys},
        pick(row.new),
        pick(row.old),
        handle_key_only=True,
    )


def stored_object(message: KafkaMessage) -> bytes:
    """What TiCDC's claim-check writes: Go's JSON of the key and value ([]byte as base64)."""
    encode = base64.b64encode
    return orjson.dumps(
        {
            "key": None if message.key is None else encode(message.key).decode(),
            "value": encode(message.value).decode(),
        }
    )


def _open_patch(message: KafkaMessage, fields: dict[str, Any]) -> KafkaMessage:
    assert message.key is not None
    (header,) = split_frames(message.key, 8, "key")
    patched = orjson.dumps({**orjson.loads(header), **fields})
    return KafkaMessage(message.key[:8] + _LENGTH.pack(len(patched)) + patched, message.value)


def _simple_patch(codec: Codec, message: KafkaMessage, fields: dict[str, Any]) -> KafkaMessage:
    if codec.protocol == "simple":
        return KafkaMessage(None, orjson.dumps({**orjson.loads(message.value), **fields}))
    import fastavro

    from streams.codecs.simple_avro import avro_schema

    # TiCDC writes the schema's whole union: the message reads back as (branch name, record).
    branch, record = fastavro.schemaless_reader(
        io.BytesIO(message.value), avro_schema(), None, return_record_name=True
    )
    name, payload = record["payload"]
    record["payload"] = (name, {**payload, **fields})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, avro_schema(), (branch, record))
    return KafkaMessage(None, out.getvalue())


def handle_key_only_message(codec: Codec, row: RowChange) -> KafkaMessage:
    """``row`` sent with its handle-key columns only (``codec`` already knows its table)."""
    (message,) = codec.encode([key_only(row)])
    if codec.protocol == "open":
        return _open_patch(message, {"ohk": True})
    if codec.protocol == "canal-json":
        body = orjson.loads(message.value)
        body["_tidb"]["onlyHandleKey"] = True
        return KafkaMessage(None, orjson.dumps(body))
    return _simple_patch(codec, message, {"handleKeyOnly": True})


def claim_check_message(codec: Codec, row: RowChange, location: str) -> KafkaMessage:
    """The message TiCDC sends in place of ``row``'s, stored at ``location``."""
    if codec.protocol == "canal-json":
        return KafkaMessage(None, orjson.dumps({"_tidb": {"claimCheckLocation": location}}))
    (message,) = codec.encode([key_only(row)])
    if codec.protocol == "open":
        # TiCDC clears the handle-key-only mark of a claim-check location message.
        return _open_patch(message, {"ccl": location})
    return _simple_patch(codec, message, {"handleKeyOnly": True, "claimCheckLocation": location})
