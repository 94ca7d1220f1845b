"""TiCDC's Avro protocol (``protocol=avro``, a Confluent schema registry), both ways.

A row is one Kafka message: its key the handle key's columns (none for a table without one),
its value every column plus, with ``enable-tidb-extension=true``, ``_tidb_op`` ("c" insert, "u"
update), ``_tidb_commit_ts`` and ``_tidb_commit_physical_time``. A delete is the key with an
empty value (a tombstone), so it decodes to a DELETE whose old image is the key's columns. The
records' schemas are in the registry under the ids the frames name (``wire.py``); a column's
type and value follow ``types.py``. DDL and checkpoints come in TiCDC's own framing when the
changefeed sets ``avro-enable-watermark=true``.

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
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from config.errors import ConfigError, DecodeError, EncodeError, UnknownSchemaError, shown
from core.model import (
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
    integer_range,
)
from streams.codecs.avro import wire
from streams.codecs.avro.binary import RecordReader, record_reader
from streams.codecs.avro.registry import Registry
from streams.codecs.avro.types import (
    MASK64,
    PARAMETERS,
    TIDB_TYPE,
    BigintUnsignedMode,
    DecimalMode,
    FieldPlan,
    Reader,
    datum,
    decimal_scale,
    expected_primitive,
    field_type,
    kind_of,
    reader_for,
)
from streams.codecs.base import Codec, KafkaMessage
from streams.codecs.values import checked_integer

PROTOCOL = wire.PROTOCOL
OP = "_tidb_op"
COMMIT_TS = "_tidb_commit_ts"
PHYSICAL_TIME = "_tidb_commit_physical_time"
_OPS = {"c": Op.INSERT, "u": Op.UPDATE}
_OP_CODES = {Op.INSERT: "c", Op.UPDATE: "u"}
_HANDLE_KEY = int(ColumnFlag.HANDLE_KEY)
# Integer columns whose Avro type holds values their MySQL type does not: INT UNSIGNED is a
# ``long``, YEAR an ``int``.
_RANGE_CHECKED = frozenset({MySQLType.LONG, MySQLType.YEAR})


@dataclass(frozen=True, slots=True)
class RecordPlan:
    """A registered record schema, parsed once per id: its table, how its columns read
    (``fields``, over fastavro's values), and the reader of its binary record (``binary.py``;
    None: a record it does not take, read by fastavro)."""

    database: str
    table: str
    parsed: Any
    fields: tuple[FieldPlan, ...]
    names: frozenset[str]
    extension: bool
    reader: RecordReader | None


@dataclass(frozen=True, slots=True)
class RowPlan:
    """A value schema read with its key schema: the columns' types with the handle key marked."""

    value: RecordPlan
    columns: dict[str, ColumnType]
    fields: tuple[FieldPlan, ...]
    keyed: bool


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
        self._registered: dict[tuple[str, str], int] = {}

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
        raise DecodeError(
            PROTOCOL,
            f"value starts with byte {first}: neither a Confluent Avro frame (0), a TiCDC DDL (1)"
            " nor a checkpoint (2)",
            where="value byte 0",
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
            raise DecodeError(PROTOCOL, f"_tidb_op is {shown(op_code)}, not 'c' or 'u'", where=OP)
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
            raise DecodeError(
                PROTOCOL,
                "a message with neither key nor value: a delete of a table without a handle key,"
                " which TiCDC's Avro protocol cannot carry",
                where="key",
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
        return _image(plan.fields, record, part), apart, buffer.tell()

    def _row_plan(
        self, heads: tuple[bytes | None, bytes], key: bytes | None, value_frame: bytes
    ) -> RowPlan:
        value_id = wire.schema_id(value_frame, "value")
        key_id = wire.schema_id(key, "key") if key else None
        value = self._value_plan(value_id)
        keys = frozenset() if key_id is None else self._record(key_id, "key").names
        fields = tuple(
            FieldPlan(f.name, _keyed(f.kind), f.reader) if f.name in keys else f
            for f in value.fields
        )
        plan = RowPlan(value, {f.name: f.kind for f in fields}, fields, bool(keys))
        self._rows[heads] = plan
        return plan

    def _key_plan(self, key: bytes) -> RowPlan:
        key_id = wire.schema_id(key, "key")
        record = self._record(key_id, "key")
        fields = tuple(FieldPlan(f.name, _keyed(f.kind), f.reader) for f in record.fields)
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
            plan = self._records[schema_id] = _record_plan(
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

    # --- encoding ------------------------------------------------------------------------

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


def _keyed(kind: ColumnType) -> ColumnType:
    return column_type(kind.mysql_type, kind.flags | _HANDLE_KEY)


def _image(fields: tuple[FieldPlan, ...], record: dict[str, Any], part: str) -> dict[str, Value]:
    image: dict[str, Value] = {}
    for field in fields:
        raw = record[field.name]
        if raw is None or field.reader is None:
            image[field.name] = raw
            continue
        try:
            image[field.name] = field.reader(raw)
        except ValueError as exc:
            reason = f"{exc}, at field {field.name!r}"
            raise DecodeError(PROTOCOL, reason, where=part) from None
    return image


def _record_plan(schema_id: int, text: str, part: str) -> RecordPlan:
    """How a record schema from the registry reads; ``DecodeError`` for one TiCDC would not
    have written (a message framed with such an id is not TiCDC's)."""
    import fastavro

    where = f"{part} schema {schema_id}"
    try:
        schema = json.loads(text)
        parsed = fastavro.parse_schema(json.loads(text))
    except Exception as exc:  # json's and fastavro's many kinds of refusal
        raise DecodeError(PROTOCOL, f"not an Avro schema: {exc}", where=where) from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise DecodeError(PROTOCOL, "the schema is not a record", where=where)
    _, dot, database = str(schema.get("namespace", "")).partition(".")
    if not dot or not database:
        raise DecodeError(
            PROTOCOL, "the record's namespace is not TiCDC's '<namespace>.<schema>'", where=where
        )
    fields: list[FieldPlan] = []
    read: list[tuple[str, Any, Reader | range | None]] = []
    dropped: list[str] = []
    for field in schema.get("fields", ()):
        name = field["name"]
        if name.startswith("_tidb_"):
            read.append((name, field["type"], None))
            if name not in (OP, COMMIT_TS):
                dropped.append(name)
            continue
        try:
            plan = _field_plan(name, field["type"])
        except ValueError as exc:
            raise DecodeError(PROTOCOL, str(exc), where=where) from None
        fields.append(plan)
        bounds = integer_range(plan.kind.mysql_type, plan.kind.is_unsigned)
        checked = plan.kind.mysql_type in _RANGE_CHECKED and bounds is not None
        read.append((name, field["type"], bounds if checked else plan.reader))
    names = {name for name, _, _ in read}
    return RecordPlan(
        database,
        str(schema["name"]),
        parsed,
        tuple(fields),
        frozenset(f.name for f in fields),
        COMMIT_TS in names and OP in names,
        record_reader(read, (OP, COMMIT_TS), frozenset(dropped)),
    )


def _field_plan(name: str, avro_type: Any) -> FieldPlan:
    nullable = False
    if isinstance(avro_type, list):
        branches = [branch for branch in avro_type if branch != "null"]
        nullable = len(branches) < len(avro_type)
        if len(branches) != 1:
            raise ValueError(f"column {name!r} is a union of {len(branches)} non-null types")
        avro_type = branches[0]
    if not isinstance(avro_type, dict) or not isinstance(avro_type.get(PARAMETERS), dict):
        raise ValueError(f"column {name!r} has no connect.parameters.tidb_type")
    kind = kind_of(name, str(avro_type[PARAMETERS].get(TIDB_TYPE)), nullable)
    if not expected_primitive(kind, avro_type):
        raise ValueError(
            f"column {name!r} of tidb_type {avro_type[PARAMETERS][TIDB_TYPE]} is an Avro"
            f" {avro_type.get('type')}, which TiCDC does not write for it"
        )
    reader = reader_for(kind, avro_type)
    if reader is None and kind.mysql_type in _RANGE_CHECKED:
        reader = _range_checked(kind)
    return FieldPlan(name, kind, reader)


def _range_checked(kind: ColumnType) -> Reader:
    def read(raw: Any) -> Value:
        return checked_integer(kind, raw)

    return read
