"""The Debezium codec against TiCDC's own Debezium encoder: its test vectors
(conformance/debezium/codec_test_expected, from tiflow's codec_test.go) and the value encodings
of its ``writeDebeziumFieldValue``."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest

from config.errors import DecodeError
from core.model import ColumnFlag, DDLEvent, Op, Resolved, RowChange, column_type
from streams.codecs.debezium import DebeziumCodec
from streams.codecs.simple_schema import MemorySchemaStore


def _pair(folder: Path, key: str, value: str) -> tuple[bytes, bytes]:
    expected = folder / "debezium" / "codec_test_expected"
    return (expected / key).read_bytes(), (expected / value).read_bytes()


def test_reads_ticdcs_encoder_test_vectors(conformance: Path) -> None:
    codec = DebeziumCodec()
    # EncodeCheckpointEvent: op "m", the resolved ts in source.commit_ts.
    assert codec.decode(*_pair(conformance, "07_TestCheckPointEvent_L553.json",
                                "08_TestCheckPointEvent_L563.json")) == [Resolved(3)]  # fmt: skip
    ddl = [
        ("01_TestDDLEvent_L72.json", "02_TestDDLEvent_L91.json", "ALTER", "table1"),
        ("03_TestDDLEvent_L422.json", "04_TestDDLEvent_L428.json", "CREATE", "table1"),
        ("05_TestDDLEvent_L498.json", "06_TestDDLEvent_L504.json", "DROP", "table2"),
    ]
    for key, value, kind, table in ddl:
        (event,) = codec.decode(*_pair(conformance, key, value))
        assert isinstance(event, DDLEvent)
        assert (event.commit_ts, event.schema, event.table, event.ddl_type) == (
            1,
            "test",
            table,
            kind,
        )
    rows = [
        ("09_TestEncodeInsert_L749.json", "10_TestEncodeInsert_L758.json", Op.INSERT, 1, None),
        ("11_TestEncodeInsert_L794.json", "12_TestEncodeInsert_L816.json", Op.INSERT, 1, None),
        ("13_TestEncodeUpdate_L948.json", "14_TestEncodeUpdate_L958.json", Op.UPDATE, 1, 2),
        ("15_TestEncodeUpdate_L996.json", "16_TestEncodeUpdate_L1019.json", Op.UPDATE, 1, 2),
        # Without debezium-output-old-value an update has no "before".
        ("17_TestEncodeUpdate_L1126.json", "18_TestEncodeUpdate_L1137.json", Op.UPDATE, 1, None),
        ("19_TestEncodeDelete_L1194.json", "20_TestEncodeDelete_L1204.json", Op.DELETE, None, 2),
        ("21_TestEncodeDelete_L1241.json", "22_TestEncodeDelete_L1264.json", Op.DELETE, None, 2),
    ]
    for key, value, op, new, old in rows:
        (row,) = codec.decode(*_pair(conformance, key, value))
        assert isinstance(row, RowChange)
        assert (row.commit_ts, row.schema, row.table, row.op) == (1, "test", "table1", op)
        assert row.new == (None if new is None else {"tiny": new})
        assert row.old == (None if old is None else {"tiny": old})
        assert row.columns["tiny"].is_key  # the key message names the handle key


def _ddl_message(columns: list[dict]) -> bytes:
    table = {"defaultCharsetName": "utf8mb4", "primaryKeyColumnNames": ["id"], "columns": columns}
    payload = {
        "source": {"db": "d", "table": "t", "commit_ts": 10},
        "ddl": "CREATE TABLE d.t (...)",
        "tableChanges": [{"type": "CREATE", "id": '"d"."t"', "table": table}],
    }
    return orjson.dumps({"payload": payload})


def _column(name: str, type_name: str, **more: object) -> dict:
    return {"name": name, "typeName": type_name, "length": None, "scale": None, **more}


def test_values_as_ticdcs_write_debezium_field_value_writes_them() -> None:
    codec = DebeziumCodec()
    codec.decode(None, _ddl_message([
        _column("id", "BIGINT UNSIGNED"),
        _column("vb", "VARBINARY", length=16),
        _column("dec", "DECIMAL", length=10, scale=2),
        _column("bits", "BIT", length=64),
        _column("dt", "DATETIME", length=3),
        _column("tm", "TIME", length=2),
        _column("e", "ENUM", enumValues=["'a'", "'it''s'"]),
        _column("s", "SET", enumValues=["'x'", "'y'"]),
    ]))  # fmt: skip
    fields = [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "vb"},
        {"type": "double", "optional": True, "field": "dec"},
        {"type": "bytes", "optional": True, "name": "io.debezium.data.Bits", "field": "bits"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "field": "dt"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "field": "tm"},
        {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "field": "e"},
        {"type": "string", "optional": True, "name": "io.debezium.data.EnumSet", "field": "s"},
    ]
    after = {
        "id": -1,  # BIGINT UNSIGNED: TiCDC writes int64(v), 18446744073709551615 here
        "vb": base64.b64encode(b"\x00\xff").decode(),  # binary strings: base64 text
        "dec": 588.1,  # DECIMAL: strconv.ParseFloat of its text
        "bits": base64.b64encode((5).to_bytes(8, "little")).decode(),  # little-endian bytes
        "dt": 1_000,  # DATETIME(3): UnixMilli
        "tm": -3_600_120_000,  # TIME: microseconds, negative below zero
        "e": "it's",  # ENUM: the member's name
        "s": "x,y",  # SET: the members' names joined by ","
    }
    value = {
        "payload": {
            "source": {"db": "d", "table": "t", "commit_ts": (1 << 64) - 1},
            "op": "c",
            "before": None,
            "after": after,
        },
        "schema": {"fields": [{"field": "after", "type": "struct", "fields": fields}]},
    }
    key = orjson.dumps({"payload": {"id": -1}})
    (row,) = codec.decode(key, orjson.dumps(value))
    assert isinstance(row, RowChange)
    assert row.commit_ts == (1 << 64) - 1
    assert row.new == {
        "id": (1 << 64) - 1,
        "vb": b"\x00\xff",
        "dec": "588.10",
        "bits": 5,
        "dt": "1970-01-01 00:00:01.000",
        "tm": "-01:00:00.12",
        "e": 2,
        "s": 3,
    }
    key_flags = ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY | ColumnFlag.UNSIGNED
    assert row.columns["id"] == column_type(8, int(key_flags))
    assert row.columns["vb"].is_binary


def test_a_message_with_neither_op_nor_ddl_is_a_watermark() -> None:
    # TiCDC's own Debezium decoder (decoder.go HasNext) takes such a message as resolved.
    message = orjson.dumps({"payload": {"source": {"commit_ts": 42}}})
    assert DebeziumCodec().decode(None, message) == [Resolved(42)]


def test_unknown_op_is_named() -> None:
    message = orjson.dumps({"payload": {"op": "x", "source": {"commit_ts": 1}}})
    with pytest.raises(DecodeError, match="unknown op 'x'"):
        DebeziumCodec().decode(None, message)


def test_a_restarted_codec_types_rows_from_the_stored_ddl() -> None:
    # A worker restarted after a table's DDL sees rows only: the store (Redis in the worker)
    # still says the column is BIGINT UNSIGNED, which the row's schema ("int64") cannot.
    store = MemorySchemaStore()
    DebeziumCodec(store).decode(None, _ddl_message([_column("id", "BIGINT UNSIGNED")]))
    row = {
        "payload": {
            "source": {"db": "d", "table": "t", "commit_ts": 11},
            "op": "c",
            "after": {"id": -2},
        }
    }
    (restarted,) = DebeziumCodec(store).decode(None, orjson.dumps(row))
    assert isinstance(restarted, RowChange) and restarted.new == {"id": (1 << 64) - 2}
    (forgetful,) = DebeziumCodec().decode(None, orjson.dumps(row))
    assert isinstance(forgetful, RowChange) and forgetful.new == {"id": -2}


def test_a_row_schema_type_nested_deep_is_no_type_not_a_crash() -> None:
    deep = b"[" * 1_000 + b"]" * 1_000
    field = b'{"field":"v","optional":true,"type":' + deep + b',"name":' + deep + b"}"
    schema = b'{"type":"struct","fields":[{"field":"after","fields":[' + field + b"]}]}"
    payload = b'{"source":{"db":"d","table":"t","commit_ts":2},"op":"c","after":{"v":"x"}}'
    (row,) = DebeziumCodec().decode(None, b'{"payload":' + payload + b',"schema":' + schema + b"}")
    assert isinstance(row, RowChange)
    assert row.new == {"v": "x"}
