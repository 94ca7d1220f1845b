"""TiCDC's Avro protocol: what the codec's encoder writes, its decoder reads back as far as the
protocol carries it; the edge values of each handling mode exactly; broken frames refused."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config.errors import ConfigError, DecodeError
from core.model import (
    ColumnFlag,
    ColumnType,
    DDLEvent,
    Event,
    MySQLType,
    Op,
    Resolved,
    RowChange,
    column_type,
)
from streams.codecs import codec_for
from streams.codecs.avro import AvroCodec, BigintUnsignedMode, DecimalMode, MemoryRegistry
from streams.codecs.avro.encoder import split_key_change
from streams.codecs.avro.types import carried_type
from tests.streams.codecs.strategies import avro_event_lists

MODES = [
    (DecimalMode.PRECISE, BigintUnsignedMode.LONG),
    (DecimalMode.STRING, BigintUnsignedMode.STRING),
]
LAST_TSO = (1 << 64) - 1


def carried(events: list[Event]) -> list[Event]:
    """What the protocol carries of ``events``: each column's type as its tidb_type names it, an
    update without its old image (one that changes a key: a delete and an insert), a delete as
    its key alone at the smallest ts it can have (the largest ts before it, or just past the last
    watermark or DDL, or its key's last change)."""
    out: list[Event] = []
    floor = 0
    recent: dict[tuple[str, str, tuple[object, ...]], int] = {}
    split = [
        part
        for event in events
        for part in (split_key_change(event) if isinstance(event, RowChange) else [event])
    ]
    for event in split:
        if isinstance(event, RowChange):
            columns = {name: carried_type(kind) for name, kind in event.columns.items()}
            keys = {name: kind for name, kind in columns.items() if kind.is_key}
            image = event.old if event.op is Op.DELETE else event.new
            assert image is not None
            key = (event.schema, event.table, tuple(image[name] for name in keys))
            if event.op is Op.DELETE:
                old = {name: image[name] for name in keys}
                floor = recent[key] = max(floor, min(recent.get(key, -1) + 1, LAST_TSO))
                row = RowChange(floor, event.schema, event.table, Op.DELETE, keys, None, old)
            else:
                row = RowChange(
                    event.commit_ts, event.schema, event.table, event.op, columns, event.new, None
                )
                floor = max(floor, event.commit_ts)
                if keys:
                    recent[key] = event.commit_ts
            out.append(row)
        else:
            assert isinstance(event, Resolved | DDLEvent)
            floor = max(floor, min(event.commit_ts + 1, LAST_TSO))
            recent.clear()
            out.append(event)
    return out


def round_trip(
    events: list[Event], decimals: DecimalMode, bigints: BigintUnsignedMode
) -> list[Event]:
    registry = MemoryRegistry()
    encoder = AvroCodec(registry, decimals=decimals, bigints=bigints)
    decoder = codec_for("avro", registry=registry)
    return [event for m in encoder.encode(events) for event in decoder.decode(m.key, m.value)]


# Each example makes its schemas' plans anew (a codec per example): fewer examples than the
# other protocols' round trips, for the same time.
@pytest.mark.parametrize(("decimals", "bigints"), MODES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=avro_event_lists())
def test_round_trip(
    decimals: DecimalMode, bigints: BigintUnsignedMode, events: list[Event]
) -> None:
    assert round_trip(events, decimals, bigints) == carried(events)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=avro_event_lists(), mode=st.sampled_from(MODES))
def test_the_binary_reader_reads_what_fastavro_reads(
    events: list[Event], mode: tuple[DecimalMode, BigintUnsignedMode]
) -> None:
    registry = MemoryRegistry()
    messages = AvroCodec(registry, decimals=mode[0], bigints=mode[1]).encode(events)
    binary, reference = AvroCodec(registry), AvroCodec(registry, reference_reader=True)
    for m in messages:
        assert binary.decode(m.key, m.value) == reference.decode(m.key, m.value)


KEY = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
EDGE_DECIMALS = [
    "0",
    "-1",
    "99999999999999999999999999999999999999999999999999999999999999999",
    "-99999999999999999999999999999999999999999999999999999999999999999",
    "99999999999999999999999999999999999.999999999999999999999999999999",
    "-99999999999999999999999999999999999.999999999999999999999999999999",
    "0.000000000000000000000000000000",
    "-0.000000000000000000000000000001",
    "0.000000000000000000000000000001",
]
EDGE_BIGINTS = [0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]


@pytest.mark.parametrize(("decimals", "bigints"), MODES)
def test_edge_values_round_trip_exactly(decimals: DecimalMode, bigints: BigintUnsignedMode) -> None:
    columns = {
        "id": column_type(MySQLType.LONGLONG, KEY | ColumnFlag.UNSIGNED),
        "amount": column_type(MySQLType.NEWDECIMAL, ColumnFlag.NULLABLE),
        "big": column_type(MySQLType.LONGLONG, ColumnFlag.UNSIGNED | ColumnFlag.NULLABLE),
    }
    rows: list[Event] = [
        RowChange(
            LAST_TSO - index,
            "db",
            "edges",
            Op.INSERT,
            columns,
            {"id": big, "amount": amount, "big": big},
            None,
        )
        for index, (amount, big) in enumerate(zip(EDGE_DECIMALS, EDGE_BIGINTS * 2, strict=False))
    ]
    decoded = round_trip(rows, decimals, bigints)
    assert [row.new for row in decoded] == [row.new for row in rows]  # type: ignore[union-attr]
    assert [row.commit_ts for row in decoded] == [row.commit_ts for row in rows]  # type: ignore[union-attr]
    assert all(isinstance(row.new["amount"], str) for row in decoded)  # type: ignore[union-attr,index]


def test_an_update_of_a_key_is_a_delete_then_an_insert_and_others_stay_updates() -> None:
    columns = {
        "id": column_type(MySQLType.LONG, KEY),
        "email": column_type(MySQLType.VARCHAR, ColumnFlag.UNIQUE_KEY),
        "name": column_type(MySQLType.VARCHAR, ColumnFlag.NULLABLE),
    }
    old = {"id": 1, "email": "a@x", "name": "a"}

    def update(new: dict[str, object]) -> RowChange:
        return RowChange(9, "db", "t", Op.UPDATE, columns, new, old)  # type: ignore[arg-type]

    assert [r.op for r in split_key_change(update({**old, "name": "b"}))] == [Op.UPDATE]
    for new in ({**old, "id": 2}, {**old, "email": "b@x"}):
        delete, insert = split_key_change(update(new))
        assert (delete.op, delete.old, delete.new) == (Op.DELETE, old, None)
        assert (insert.op, insert.old, insert.new) == (Op.INSERT, None, new)


def test_each_mode_writes_the_avro_type_ticdc_writes() -> None:
    registry = MemoryRegistry()
    columns = {
        "id": column_type(MySQLType.LONGLONG, KEY | ColumnFlag.UNSIGNED),
        "amount": column_type(MySQLType.NEWDECIMAL, 0),
    }
    row = RowChange(5, "db", "t", Op.INSERT, columns, {"id": 1, "amount": "1.50"}, None)
    types = {}
    for decimals, bigints in MODES:
        message = AvroCodec(registry, decimals=decimals, bigints=bigints).encode([row])[0]
        schema = json.loads(registry.schema(int.from_bytes(message.value[1:5], "big")))
        types[decimals] = {field["name"]: field["type"] for field in schema["fields"]}
    precise, text = types[DecimalMode.PRECISE], types[DecimalMode.STRING]
    assert precise["amount"]["logicalType"] == "decimal"
    assert (precise["amount"]["precision"], precise["amount"]["scale"]) == (65, 2)
    assert precise["id"]["type"] == "long" and text["id"]["type"] == "string"
    assert text["amount"]["type"] == "string"
    assert precise["_tidb_commit_ts"] == "long"


# --- messages written as TiCDC writes them, by hand ------------------------------------------

TICDC_VALUE_SCHEMA = {
    "type": "record",
    "name": "t1",
    "namespace": "default.shop",
    "fields": [
        {"name": "id", "type": {"type": "int", "connect.parameters": {"tidb_type": "INT"}}},
        {
            "name": "mood",
            "type": [
                "null",
                {
                    "type": "string",
                    "connect.parameters": {"tidb_type": "ENUM", "allowed": "ok,not\\, really"},
                },
            ],
            "default": None,
        },
        {
            "name": "born",
            "type": ["null", {"type": "int", "connect.parameters": {"tidb_type": "DATE"}}],
            "default": None,
        },
        {
            # A nullable column with a default: TiCDC puts the null branch second.
            "name": "note",
            "type": [{"type": "string", "connect.parameters": {"tidb_type": "TEXT"}}, "null"],
            "default": "n/a",
        },
        {"name": "_tidb_op", "type": "string", "default": ""},
        {"name": "_tidb_commit_ts", "type": "long", "default": 0},
        {"name": "_tidb_commit_physical_time", "type": "long", "default": 0},
    ],
}
TICDC_KEY_SCHEMA = {**TICDC_VALUE_SCHEMA, "fields": TICDC_VALUE_SCHEMA["fields"][:1]}


def _ticdc_frames(
    value_schema: dict[str, object] = TICDC_VALUE_SCHEMA,
) -> tuple[MemoryRegistry, bytes, bytes]:
    registry = MemoryRegistry()
    key_id = registry.register("tidb_shop_t1-key", json.dumps(TICDC_KEY_SCHEMA))
    value_id = registry.register("tidb_shop_t1-value", json.dumps(value_schema))
    key, value = io.BytesIO(), io.BytesIO()
    fastavro.schemaless_writer(key, fastavro.parse_schema(TICDC_KEY_SCHEMA), {"id": 7})
    record = {
        "id": 7,
        "mood": "not, really",
        "born": 19_723,
        "note": None,
        "_tidb_op": "u",
        "_tidb_commit_ts": 5 << 18,
        "_tidb_commit_physical_time": 5,
    }
    fastavro.schemaless_writer(value, fastavro.parse_schema(dict(value_schema)), record)
    frame = b"\x00%b"
    return (
        registry,
        frame % key_id.to_bytes(4, "big") + key.getvalue(),
        frame % value_id.to_bytes(4, "big") + value.getvalue(),
    )


@pytest.mark.parametrize("reference", [False, True])
def test_a_ticdc_row_reads_with_its_key_columns_marked(reference: bool) -> None:
    registry, key, value = _ticdc_frames()
    (row,) = AvroCodec(registry, reference_reader=reference).decode(key, value)
    assert isinstance(row, RowChange)
    assert (row.schema, row.table, row.op, row.commit_ts) == ("shop", "t1", Op.UPDATE, 5 << 18)
    # An ENUM member holding a comma (TiCDC writes it as "\,") is the second member; a DATE
    # under adaptive_time_microseconds is the days since 1970.
    assert row.new == {"id": 7, "mood": 2, "born": "2024-01-01", "note": None}
    assert row.columns["id"] == ColumnType(MySQLType.LONG, ColumnFlag.HANDLE_KEY)
    assert row.columns["mood"] == ColumnType(MySQLType.ENUM, ColumnFlag.NULLABLE)


def test_a_tombstone_is_a_delete_of_its_key_after_what_came_before() -> None:
    registry, key, value = _ticdc_frames()
    codec = AvroCodec(registry)
    codec.decode(key, value)
    assert codec.decode(key, b"") == [
        RowChange(
            (5 << 18) + 1,  # past its key's update at 5 << 18
            "shop",
            "t1",
            Op.DELETE,
            {"id": ColumnType(MySQLType.LONG, ColumnFlag.HANDLE_KEY)},
            None,
            {"id": 7},
        )
    ]
    codec.decode(None, b"\x02" + (9 << 18).to_bytes(8, "big"))
    (delete,) = codec.decode(key, b"")
    assert isinstance(delete, RowChange) and delete.commit_ts == (9 << 18) + 1


def test_a_codec_told_where_its_partition_stands_puts_a_first_delete_after_it() -> None:
    registry, key, _ = _ticdc_frames()
    codec = AvroCodec(registry)
    codec.follows(7 << 18)
    (delete,) = codec.decode(key, b"")
    assert isinstance(delete, RowChange) and delete.commit_ts == 7 << 18


def test_each_partitions_codec_keeps_its_own_place_and_shares_the_schemas() -> None:
    registry, key, value = _ticdc_frames()
    shared = AvroCodec(registry)
    first, second = shared.for_partition(), shared.for_partition()
    first.decode(key, value)
    second.follows(2 << 18)
    (after_row,) = first.decode(key, b"")
    (after_follows,) = second.decode(key, b"")
    assert isinstance(after_row, RowChange) and after_row.commit_ts == (5 << 18) + 1
    assert isinstance(after_follows, RowChange) and after_follows.commit_ts == 2 << 18
    assert second._records is first._records  # one plan per schema id, whichever reads it


def test_an_update_of_a_table_without_a_key_is_refused_and_its_insert_read() -> None:
    registry, _, value = _ticdc_frames()
    with pytest.raises(DecodeError, match="has no handle key"):
        AvroCodec(registry).decode(None, value)
    insert = value.replace(b"\x02u", b"\x02c")
    (row,) = AvroCodec(registry).decode(None, insert)
    assert isinstance(row, RowChange) and row.op is Op.INSERT
    assert not any(kind.is_key for kind in row.columns.values())


def test_rows_without_the_tidb_extension_are_refused_naming_the_setting() -> None:
    fields = TICDC_VALUE_SCHEMA["fields"][:4]  # type: ignore[index]
    registry, key, value = _ticdc_frames({**TICDC_VALUE_SCHEMA, "fields": fields})
    with pytest.raises(ConfigError, match="enable-tidb-extension=true"):
        AvroCodec(registry).decode(key, value)


def test_ddl_and_checkpoint_messages_in_ticdcs_framing() -> None:
    ddl = (
        b'\x01{"query":"CREATE TABLE t1 (id INT PRIMARY KEY)","type":3,"schema":"shop",'
        b'"table":"t1","commitTs":449000000000000000}'
    )
    codec = AvroCodec(MemoryRegistry())
    assert codec.decode(None, ddl) == [
        DDLEvent(449_000_000_000_000_000, "shop", "t1", "CREATE TABLE t1 (id INT PRIMARY KEY)", 3)
    ]
    assert codec.decode(None, b"\x02" + LAST_TSO.to_bytes(8, "big")) == [Resolved(LAST_TSO)]


# --- broken input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (None, b"\x00\x00\x00", "value of 3 bytes is shorter than Confluent's 5-byte header"),
        (None, b"\x07\x00\x00\x00\x01", "value starts with byte 7"),
        (b"\x01\x00\x00\x00\x01", b"", "key starts with byte 1, not Confluent's magic byte 0"),
        (b"\x00\x00", b"", "key of 2 bytes is shorter"),
        (None, b"", "neither key nor value"),
        (None, b"\x00\x00\x00\x00\x63\x02", "schema id 99 is unknown to the schema registry"),
        (None, b"\x02\x00\x01", "checkpoint message of 3 bytes"),
        (None, b"\x01{not json", "DDL message is not JSON"),
        (None, b'\x01{"query":"x","type":"3","schema":"","table":"","commitTs":1}', "'type'"),
    ],
)
def test_broken_frames_are_decode_errors_naming_where(
    key: bytes | None, value: bytes, match: str
) -> None:
    with pytest.raises(DecodeError, match=match):
        AvroCodec(MemoryRegistry()).decode(key, value)


@pytest.mark.parametrize("reference", [False, True])
def test_a_truncated_record_and_bytes_after_one_are_decode_errors(reference: bool) -> None:
    registry, key, value = _ticdc_frames()
    codec = AvroCodec(registry, reference_reader=reference)
    with pytest.raises(
        DecodeError, match=r"does not read as its schema's record|ends inside field '_tidb_"
    ):
        codec.decode(key, value[:-3])
    with pytest.raises(DecodeError, match="1 bytes after the value's record"):
        codec.decode(key, value + b"\x00")


def test_a_varint_longer_than_a_long_is_refused() -> None:
    registry, key, value = _ticdc_frames()
    overlong = value[:5] + b"\xff" * 10 + b"\x01" + value[6:]
    with pytest.raises(DecodeError, match="longer than 10 bytes at byte 16, at field 'id'"):
        AvroCodec(registry).decode(key, overlong)


@pytest.mark.parametrize("reference", [False, True])
def test_an_enum_value_outside_its_members_names_the_column(reference: bool) -> None:
    registry, key, value = _ticdc_frames()
    broken = value.replace(b"not, really", b"not, rEally")
    with pytest.raises(DecodeError, match="not one of its members, at field 'mood', at value"):
        AvroCodec(registry, reference_reader=reference).decode(key, broken)


def test_a_schema_ticdc_would_not_write_is_a_decode_error() -> None:
    registry = MemoryRegistry()
    plain = {"type": "record", "name": "t", "namespace": "default.db", "fields": []}
    plain["fields"] = [{"name": "a", "type": "string"}]
    schema_id = registry.register("s", json.dumps(plain))
    with pytest.raises(DecodeError, match=r"no connect\.parameters\.tidb_type"):
        AvroCodec(registry).decode(None, b"\x00" + schema_id.to_bytes(4, "big") + b"\x00")


@settings(max_examples=200, deadline=None)
@given(value=st.binary(max_size=64), reference=st.booleans())
def test_arbitrary_bytes_never_crash(value: bytes, reference: bool) -> None:
    registry, key, _ = _ticdc_frames()
    try:
        AvroCodec(registry, reference_reader=reference).decode(key, b"\x00\x00\x00\x00\x02" + value)
    except DecodeError as exc:
        assert exc.protocol == "avro"


# --- TiCDC's own schema ------------------------------------------------------------------------

# TiCDC's value schema of its every-type test table with the TiDB extension and the row checksum,
# in the string handling modes: `expectedSchemaWithExtensionEnableChecksum` of tiflow's
# pkg/sink/codec/avro/avro_test_data.go (commit 3d66d214), transcribed field for field (the
# non-null columns first, then the nullable ones, as TiCDC orders them by column id).
TICDC_SCHEMA = Path(__file__).parent / "data" / "avro_ticdc_checksum_schema.json"
TICDC_VALUES: dict[str, object] = {
    "tiny": -128,
    "short": 32767,
    "int24": -8388608,
    "long": 2147483647,
    "longlong": -(1 << 63),
    "tinyunsigned": 255,
    "shortunsigned": 65535,
    "int24unsigned": 16777215,
    "longunsigned": 4294967295,
    "longlongunsigned": "18446744073709551615",
    "float": 3.5,
    "double": -2.25e300,
    "bit": b"\x01",
    "decimal": "-12345678901234567890.123456789",
    "tinytext": "a",
    "mediumtext": "名前",
    "text": "",
    "longtext": "long",
    "varchar": "varchar",
    "varstring": "varstring",
    "string": "string",
    "tinyblob": b"\x00\xff",
    "mediumblob": b"m",
    "blob": b"",
    "longblob": b"l",
    "varbinary": b"\x89PNG",
    "varbinary1": b"1",
    "binary": b"b\x00",
    "enum": "b",
    "set": "a,b",
    "json": '{"key": [1, 2]}',
    "date": "2024-02-29",
    "datetime": "2024-02-29 23:59:59.999999",
    "timestamp": "1970-01-01 00:00:01",
    "time": "-838:59:59.000000",
    "year": 2155,
}
MODEL_VALUES: dict[str, object] = {
    **TICDC_VALUES,
    "longlongunsigned": (1 << 64) - 1,
    "bit": 1,
    "enum": 2,
    "set": 3,
}


@pytest.mark.parametrize("reference", [False, True])
def test_a_row_under_ticdcs_own_schema_reads_every_type(reference: bool) -> None:
    schema = json.loads(TICDC_SCHEMA.read_text())
    registry = MemoryRegistry()
    value_id = registry.register("tidb_testdb_rowtoavroschema-value", json.dumps(schema))
    record = {
        **TICDC_VALUES,
        **{f"{name}nullable": None for name in TICDC_VALUES},
        "_tidb_op": "c",
        "_tidb_commit_ts": 449_000_000_000_000_001,
        "_tidb_commit_physical_time": 449_000_000_000_000_001 >> 18,
        "_tidb_row_level_checksum": "3076451247",
        "_tidb_corrupted": False,
        "_tidb_checksum_version": 1,
    }
    record["tinytextnullable"] = "not null"
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    value = b"\x00" + value_id.to_bytes(4, "big") + out.getvalue()
    (row,) = AvroCodec(registry, reference_reader=reference).decode(None, value)
    assert isinstance(row, RowChange)
    assert (row.schema, row.table, row.op) == ("testdb", "rowtoavroschema", Op.INSERT)
    assert row.commit_ts == 449_000_000_000_000_001
    assert row.new == {
        **MODEL_VALUES,
        **{f"{name}nullable": None for name in TICDC_VALUES},
        "tinytextnullable": "not null",
    }
    kinds = row.columns
    assert kinds["tiny"] == ColumnType(MySQLType.LONG, 0)
    assert kinds["longunsigned"] == ColumnType(MySQLType.LONG, ColumnFlag.UNSIGNED)
    assert kinds["longlongunsigned"] == ColumnType(MySQLType.LONGLONG, ColumnFlag.UNSIGNED)
    assert kinds["varbinary"] == ColumnType(MySQLType.LONG_BLOB, ColumnFlag.BINARY)
    assert kinds["yearnullable"] == ColumnType(MySQLType.YEAR, ColumnFlag.NULLABLE)
    assert not any(name.startswith("_tidb") for name in kinds)
