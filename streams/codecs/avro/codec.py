"""TiCDC's Avro protocol (``protocol=avro``, a Confluent schema registry), both ways.

A row is one Kafka message: its key the handle key's columns (none for a table without one),
its value every column plus, with ``enable-tidb-extension=true``, ``_tidb_op`` ("c" insert, "u"
update), ``_tidb_commit_ts`` and ``_tidb_commit_physical_time``. A delete is the key with an
empty value (a tombstone), so it decodes to a DELETE whose old image is the key's columns. The
records' schemas are in the registry under the ids the frames name (``wire.py``), each read
once into a plan (``plans.py``); a column's type and value follow ``types.py``. DDL and
checkpoints come in TiCDC's own framing when the changefeed sets ``avro-enable-watermark=true``.
This module reads; the codec writes through ``encoder.py``.

What TiCDC's Avro messages do not carry, and how the codec stands:

- Without the TiDB extension a row has no commit ts, so the sink could neither order it nor
  hold it back until every partition has passed it: a value schema without ``_tidb_commit_ts``
  is refused with a ``ConfigError`` naming the changefeed setting (``AvroCodec._value_plan``),
  for every message of it, rather than staged at a guessed ts.
- A delete carries no commit ts even with the extension (pingcap/tiflow#9421). It is given the
  smallest ts it can have: the largest commit ts this codec decoded before it, or just past the
  last checkpoint or DDL, whichever is later, and past its own key's last change (within one
  commit ts the sink applies removals before new images, as TiCDC's transactions need, so a
  delete at its key's previous ts would be undone; a key changing its unique column is a
  delete and an insert in one transaction, so the delete must not go past the transaction
  either). A delete thus follows every earlier change of its key and precedes every later one,
  so per-key order holds when the codec sees one partition's messages in order, which is why
  it is one codec per partition that may decode deletes, told where its partition stands when
  it starts mid-stream (``AvroCodec.follows``). Keys are remembered only since the last
  checkpoint or DDL: past one, the floor is above all of them.
- A table without a handle key has no Kafka key: its inserts decode, but its updates (no old
  row to find) and deletes (nothing at all) are refused as ``DecodeError``s.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from config.errors import ConfigError, DecodeError, UnknownSchemaError, shown
from core.model import DDLEvent, Event, Op, Resolved, RowChange
from streams.codecs import avro_grammar as grammar
from streams.codecs.avro import wire
from streams.codecs.avro.encoder import AvroEncoder
from streams.codecs.avro.plans import (
    COMMIT_TS,
    OP,
    RecordPlan,
    RowPlan,
    image,
    keyed,
    record_plan,
)
from streams.codecs.avro.registry import Registry
from streams.codecs.avro.types import (
    MASK64,
    BigintUnsignedMode,
    DecimalMode,
    FieldPlan,
)
from streams.codecs.base import Codec, KafkaMessage

PROTOCOL = wire.PROTOCOL
_OPS = {"c": Op.INSERT, "u": Op.UPDATE}


class AvroCodec(Codec):
    """``protocol=avro``: Confluent-framed Avro records whose schemas are in ``registry``."""

    protocol = PROTOCOL
    partitioned = True

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        decimals: DecimalMode = DecimalMode.PRECISE,
        bigints: BigintUnsignedMode = BigintUnsignedMode.LONG,
        topic_prefix: str = "tidb",
        reference_reader: bool = False,
    ) -> None:
        self._registry = registry
        # fastavro reads every record instead of binary.py's readers: the reference they are
        # tested against.
        self._reference_reader = reference_reader
        self._decimals = decimals
        self._bigints = bigints
        self._topic_prefix = topic_prefix
        self._records: dict[int, RecordPlan] = {}
        self._rows: dict[tuple[bytes | None, bytes], RowPlan] = {}
        self._keys: dict[bytes, RowPlan] = {}
        self._floor = 0
        # The commit ts of each key's last change since the last checkpoint or DDL (the Kafka
        # key's bytes: its frame names the key schema).
        self._recent: dict[bytes, int] = {}
        self._encoder = AvroEncoder(registry, decimals, bigints, topic_prefix)

    def for_partition(self) -> AvroCodec:
        """A codec of its own for one partition (its own floor for tombstones), sharing this
        one's registry and the plans made of its schemas (each made once, whichever partition
        meets its id first)."""
        codec = AvroCodec(
            self._registry,
            decimals=self._decimals,
            bigints=self._bigints,
            topic_prefix=self._topic_prefix,
            reference_reader=self._reference_reader,
        )
        codec._records, codec._rows, codec._keys = self._records, self._rows, self._keys
        return codec

    def follows(self, commit_ts: int) -> None:
        """Tell the codec its partition's changes up to ``commit_ts`` came before what it reads
        next (a worker that takes over a partition: the largest commit ts staged from it, or
        its watermark + 1), so that a delete it reads before any other row is not put first."""
        self._floor = max(self._floor, min(commit_ts, MASK64))

    # --- decoding ------------------------------------------------------------------------

    def decode(self, key: bytes | None, value: bytes) -> list[Event]:
        if not value:
            return [self._delete(key)]
        first = value[0]
        if first == wire.MAGIC:
            return [self._row(key, value)]
        if first == wire.CHECKPOINT_BYTE:
            ts = wire.checkpoint_ts(value)
            self._passed(ts)
            return [Resolved(ts)]
        if first == wire.DDL_BYTE:
            fields = wire.ddl_fields(value)
            ts = fields["commitTs"]
            self._passed(ts)
            return [
                DDLEvent(
                    ts,
                    fields["schema"] or None,
                    fields["table"] or None,
                    fields["query"],
                    fields["type"],
                )
            ]
        raise grammar.broken(
            grammar.VALUE_KIND,
            f"value starts with byte {first}: neither a Confluent Avro frame (0), a TiCDC DDL (1)"
            " nor a checkpoint (2)",
            "value byte 0",
        )

    def _passed(self, ts: int) -> None:
        """A checkpoint or DDL at ``ts``: every change before it is at or below it."""
        self._floor = max(self._floor, min(ts + 1, MASK64))
        # Their keys' ts are below the floor now: nothing of them is needed any more.
        self._recent.clear()

    def _row(self, key: bytes | None, value: bytes) -> RowChange:
        # The frames' headers name the plan: checked once, when it is made.
        heads = (key[: wire.HEADER] if key else None, value[: wire.HEADER])
        plan = self._rows.get(heads) or self._row_plan(heads, key, value)
        record, (op_code, commit_ts), _ = self._read(plan.value, value, "value")
        op = _OPS.get(op_code)
        if op is None:
            raise grammar.broken(grammar.OP, f"_tidb_op is {shown(op_code)}, not 'c' or 'u'", OP)
        if op is Op.UPDATE and not plan.keyed:
            # Without a key nor an old image, nothing says which of the table's rows changed.
            raise DecodeError(
                PROTOCOL,
                f"an update of {plan.value.database}.{plan.value.table}, which has no handle key:"
                " TiCDC's Avro protocol carries neither its key nor its old row",
                where="key",
            )
        commit_ts &= MASK64
        if commit_ts > self._floor:
            self._floor = commit_ts
        if key:
            self._recent[key] = commit_ts
        # TiCDC's Avro rows carry no old image: an update is its new row alone.
        return RowChange(
            commit_ts, plan.value.database, plan.value.table, op, plan.columns, record, None
        )

    def _delete(self, key: bytes | None) -> RowChange:
        if not key:
            raise grammar.broken(
                grammar.DELETE_KEY,
                "a message with neither key nor value: a delete of a table without a handle key,"
                " which TiCDC's Avro protocol cannot carry",
                "key",
            )
        plan = self._keys.get(key[: wire.HEADER]) or self._key_plan(key)
        record, _, _ = self._read(plan.value, key, "key")
        # Past its key's last change: at that change's ts the sink would apply the delete
        # first (within one commit ts, removals precede new images: spark_sink/plan.py).
        ts = max(self._floor, min(self._recent.get(key, -1) + 1, MASK64))
        self._floor = self._recent[key] = ts
        return RowChange(
            ts,
            plan.value.database,
            plan.value.table,
            Op.DELETE,
            plan.columns,
            None,
            record,
        )

    def _read(
        self, plan: RecordPlan, data: bytes, part: str
    ) -> tuple[dict[str, Any], tuple[Any, ...], int]:
        """The record in ``data`` (past its frame): its columns' model values, and the TiDB
        extension's op and commit ts (None where the record has none)."""
        if plan.reader is None or self._reference_reader:
            return self._read_fastavro(plan, data, part)
        try:
            record, apart, pos = plan.reader(data, wire.HEADER)
        except ValueError as exc:  # the reader names the field
            raise DecodeError(PROTOCOL, str(exc), where=part) from None
        if pos != len(data):
            raise DecodeError(
                PROTOCOL,
                f"{len(data) - pos} bytes after the {part}'s record",
                where=f"{part} byte {pos}",
            )
        return record, apart, pos

    def _read_fastavro(
        self, plan: RecordPlan, data: bytes, part: str
    ) -> tuple[dict[str, Any], tuple[Any, ...], int]:
        import fastavro

        buffer = io.BytesIO(data)
        buffer.seek(wire.HEADER)
        try:
            record: dict[str, Any] = fastavro.schemaless_reader(  # type: ignore[assignment]
                buffer, plan.parsed, None
            )
        except Exception as exc:  # fastavro raises many kinds on corrupt input
            raise DecodeError(
                PROTOCOL,
                f"{part} does not read as its schema's record: {exc!r}",
                where=f"{part} byte {buffer.tell()}",
            ) from None
        if buffer.tell() != len(data):
            raise DecodeError(
                PROTOCOL,
                f"{len(data) - buffer.tell()} bytes after the {part}'s record",
                where=f"{part} byte {buffer.tell()}",
            )
        apart = (record.get(OP), record.get(COMMIT_TS))
        return image(plan.fields, record, part), apart, buffer.tell()

    def _row_plan(
        self, heads: tuple[bytes | None, bytes], key: bytes | None, value_frame: bytes
    ) -> RowPlan:
        value_id = wire.schema_id(value_frame, "value")
        key_id = wire.schema_id(key, "key") if key else None
        value = self._value_plan(value_id)
        keys: frozenset[str] = frozenset()
        if key_id is not None:
            record = self._record(key_id, "key")
            keys = record.names
            if (record.database, record.table) != (value.database, value.table) or not (
                keys <= value.names
            ):
                raise grammar.broken(
                    grammar.KEY_RECORD,
                    f"key record {record.database}.{record.table} of {sorted(keys)}, value record"
                    f" {value.database}.{value.table} of {sorted(value.names)}",
                    "key",
                )
        fields = tuple(
            FieldPlan(f.name, keyed(f.kind), f.reader) if f.name in keys else f
            for f in value.fields
        )
        plan = RowPlan(value, {f.name: f.kind for f in fields}, fields, bool(keys))
        self._rows[heads] = plan
        return plan

    def _key_plan(self, key: bytes) -> RowPlan:
        key_id = wire.schema_id(key, "key")
        record = self._record(key_id, "key")
        fields = tuple(FieldPlan(f.name, keyed(f.kind), f.reader) for f in record.fields)
        plan = RowPlan(record, {f.name: f.kind for f in fields}, fields, True)
        self._keys[key[: wire.HEADER]] = plan
        return plan

    def _value_plan(self, value_id: int) -> RecordPlan:
        plan = self._record(value_id, "value")
        if not plan.extension:
            raise ConfigError(
                f"avro: the value schema of {plan.database}.{plan.table} (registry id {value_id})"
                f" has no {COMMIT_TS}: set enable-tidb-extension=true on the changefeed (without"
                " it TiCDC's Avro rows carry no commit ts, so the sink can neither order them nor"
                " hold them back until every partition has passed them)"
            )
        return plan

    def _record(self, schema_id: int, part: str) -> RecordPlan:
        plan = self._records.get(schema_id)
        if plan is None:
            plan = self._records[schema_id] = record_plan(
                schema_id, self._schema_text(schema_id, part), part
            )
        return plan

    def _schema_text(self, schema_id: int, part: str) -> str:
        if self._registry is None:
            raise ConfigError(
                "avro: decoding needs a schema registry: set TICDC_SINK_SCHEMA_REGISTRY"
            )
        try:
            return self._registry.schema(schema_id)
        except UnknownSchemaError as unknown:
            raise DecodeError(PROTOCOL, str(unknown), where=f"{part} bytes 1-4") from None

    def encode(self, events: Sequence[Event]) -> list[KafkaMessage]:
        """The events as TiCDC's Avro messages (``encoder.py``)."""
        return self._encoder.encode(events)
