"""Writing TiCDC's Avro protocol (what ``produce`` sends): each row's key and value records with
the schemas they are written under, registered in the registry as TiCDC registers them (one
subject per topic and part), DDL and checkpoints in TiCDC's own framing (``wire.py``). The
reading side, with its plans per schema id and the tombstones' commit ts, is ``codec.py``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

from config.errors import ConfigError, EncodeError
from core.model import ColumnFlag, ColumnType, DDLEvent, Event, Op, Resolved, RowChange, Value
from streams.codecs.avro import wire
from streams.codecs.avro.plans import COMMIT_TS, OP, PHYSICAL_TIME
from streams.codecs.avro.registry import Registry
from streams.codecs.avro.types import (
    BigintUnsignedMode,
    DecimalMode,
    datum,
    decimal_scale,
    field_type,
)
from streams.codecs.base import KafkaMessage

_OP_CODES = {Op.INSERT: "c", Op.UPDATE: "u"}


class AvroEncoder:
    """Events to TiCDC's Avro messages, registering each record schema once."""

    def __init__(
        self,
        registry: Registry | None,
        decimals: DecimalMode,
        bigints: BigintUnsignedMode,
        topic_prefix: str,
    ) -> None:
        self._registry = registry
        self._decimals = decimals
        self._bigints = bigints
        self._topic_prefix = topic_prefix
        self._registered: dict[tuple[str, str], int] = {}

    def encode(self, events: Sequence[Event]) -> list[KafkaMessage]:
        out: list[KafkaMessage] = []
        for event in events:
            if isinstance(event, RowChange):
                out += [self._encode_row(row) for row in split_key_change(event)]
            elif isinstance(event, Resolved):
                out.append(KafkaMessage(None, wire.checkpoint(event.commit_ts)))
            elif isinstance(event, DDLEvent):
                if not isinstance(event.ddl_type, int):
                    raise EncodeError(
                        f"avro: DDL type {event.ddl_type!r} is not TiDB's action code"
                    )
                value = wire.ddl(
                    event.query,
                    event.ddl_type,
                    event.schema or "",
                    event.table or "",
                    event.commit_ts,
                )
                out.append(KafkaMessage(None, value))
            else:
                raise EncodeError(f"avro: TiCDC's Avro protocol carries no {type(event).__name__}")
        return out

    def _encode_row(self, row: RowChange) -> KafkaMessage:
        topic = wire.topic_for(self._topic_prefix, row.schema, row.table)
        image = row.old if row.op is Op.DELETE else row.new
        if image is None:
            raise EncodeError(f"avro: a {row.op} of {row.schema}.{row.table} without its image")
        keys = [name for name, kind in row.columns.items() if kind.is_key]
        key = None
        if keys:
            key_columns = {name: row.columns[name] for name in keys}
            key = self._frame(topic, wire.KEY_SUFFIX, row, key_columns, image, None)
        if row.op is Op.DELETE:
            if key is None:
                raise EncodeError(
                    f"avro: a delete of {row.schema}.{row.table}, which has no handle key: TiCDC's"
                    " Avro protocol carries a delete as its key alone"
                )
            return KafkaMessage(key, b"", topic)
        value = self._frame(topic, wire.VALUE_SUFFIX, row, row.columns, image, row)
        return KafkaMessage(key, value, topic)

    def _frame(
        self,
        topic: str,
        suffix: str,
        row: RowChange,
        columns: dict[str, ColumnType],
        image: dict[str, Value],
        extension: RowChange | None,
    ) -> bytes:
        import fastavro

        fields: list[dict[str, Any]] = []
        record: dict[str, Any] = {}
        for name, kind in columns.items():
            value = image.get(name)
            avro_type = field_type(kind, self._decimals, self._bigints, decimal_scale(value))
            avro_name = wire.sanitize_name(name)
            if kind.flags & ColumnFlag.NULLABLE:
                fields.append({"name": avro_name, "type": ["null", avro_type], "default": None})
            else:
                fields.append({"name": avro_name, "type": avro_type})
            record[avro_name] = (
                None if value is None else datum(kind, value, self._decimals, self._bigints)
            )
        if extension is not None:
            fields += [
                {"name": OP, "type": "string", "default": ""},
                {"name": COMMIT_TS, "type": "long", "default": 0},
                {"name": PHYSICAL_TIME, "type": "long", "default": 0},
            ]
            ts = extension.commit_ts
            record[OP] = _OP_CODES[extension.op]
            record[COMMIT_TS] = ts - (1 << 64) if ts >= 1 << 63 else ts
            record[PHYSICAL_TIME] = ts >> 18
        schema = {
            "type": "record",
            "name": wire.sanitize_name(row.table),
            "namespace": wire.record_namespace(row.schema),
            "fields": fields,
        }
        text = json.dumps(schema, separators=(",", ":"))
        schema_id = self._register(wire.subject(topic, suffix), text)
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, _parsed(text), record)
        except (ValueError, TypeError, OverflowError) as exc:
            raise EncodeError(f"avro: {row.schema}.{row.table}: {exc}") from None
        return wire.frame(schema_id, out.getvalue())

    def _register(self, subject: str, text: str) -> int:
        found = self._registered.get((subject, text))
        if found is None:
            if self._registry is None:
                raise ConfigError(
                    "avro: encoding needs a schema registry: set TICDC_SINK_SCHEMA_REGISTRY"
                )
            found = self._registered[(subject, text)] = self._registry.register(subject, text)
        return found


_PARSED: dict[str, Any] = {}
_UNIQUE = int(ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY | ColumnFlag.UNIQUE_KEY)


def split_key_change(row: RowChange) -> list[RowChange]:
    """An update that changes its handle key or a unique key as TiCDC's MQ sinks send it: a
    delete of the old row, then an insert of the new (an Avro update carries no old image, so
    the old key would be lost); any other change as it is."""
    old, new = row.old, row.new
    if row.op is not Op.UPDATE or old is None or new is None:
        return [row]
    changed = any(
        kind.flags & _UNIQUE and old.get(name) != new.get(name)
        for name, kind in row.columns.items()
    )
    if not changed:
        return [row]
    return [
        RowChange(row.commit_ts, row.schema, row.table, Op.DELETE, row.columns, None, old),
        RowChange(row.commit_ts, row.schema, row.table, Op.INSERT, row.columns, new, None),
    ]


def _parsed(text: str) -> Any:
    found = _PARSED.get(text)
    if found is None:
        import fastavro

        found = _PARSED[text] = fastavro.parse_schema(json.loads(text))
    return found
