"""Every real message in ../shared/conformance decodes to what its README and upstream tests say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config.errors import DecodeError
from core.model import DDLEvent, Op, Resolved, RowChange
from streams.codecs.canal_json import CanalJSONCodec
from streams.codecs.craft import CraftCodec
from streams.codecs.event_json import event_json
from streams.codecs.open_protocol import OpenProtocolCodec
from streams.codecs.simple_avro import SimpleAvroCodec, avro_schema

DATA = Path(__file__).parent / "data"


def _expected_open(item: dict) -> dict:
    key, value = item["key"], item["value"]
    if key["t"] == 3:
        return {"type": "resolved", "commit_ts": key["ts"]}
    if key["t"] == 2:
        return {
            "type": "ddl",
            "commit_ts": key["ts"],
            "schema": key.get("scm") or None,
            "table": key.get("tbl") or None,
            "query": value["q"],
            "ddl_type": value["t"],
        }
    image = {name: column["v"] for name, column in value["u"].items()}
    return {
        "type": "row",
        "commit_ts": key["ts"],
        "schema": key["scm"],
        "table": key["tbl"],
        "op": "insert",
        "new": image,
        "old": None,
    }


@pytest.mark.parametrize("folder", ["open_protocol_java_demo", "open_protocol_tibigdata"])
def test_open_protocol_vectors(conformance: Path, folder: str) -> None:
    expected = json.loads((conformance / folder / "expected_decoded.json").read_text())
    codec = OpenProtocolCodec()
    for name, items in expected.items():
        kind, index = name.split("_")
        if folder == "open_protocol_java_demo":
            key_file, value_file = f"{kind}_key_{index}.bin", f"{kind}_value_{index}.bin"
        else:
            key_file, value_file = f"key_{kind}_{index}", f"value_{kind}_{index}"
        key = (conformance / folder / key_file).read_bytes()
        value = (conformance / folder / value_file).read_bytes()
        events = codec.decode(key, value)
        assert [event_json(e) for e in events] == [_expected_open(i) for i in items], name
    partitioned = codec.decode(
        (conformance / "open_protocol_java_demo/row_key_1.bin").read_bytes(),
        (conformance / "open_protocol_java_demo/row_value_1.bin").read_bytes(),
    )[3]
    assert isinstance(partitioned, RowChange) and partitioned.partition_id == 6


def test_open_protocol_row_covering_every_type(conformance: Path) -> None:
    value = (conformance / "open_protocol_tibigdata/row.json").read_bytes()
    key = b'{"ts":423497695015731209,"scm":"a","tbl":"b","t":1}'
    frame = len(key).to_bytes(8, "big")
    events = OpenProtocolCodec().decode(
        (1).to_bytes(8, "big") + frame + key, len(value).to_bytes(8, "big") + value
    )
    (row,) = events
    assert isinstance(row, RowChange) and row.op is Op.INSERT
    new = row.new or {}
    assert new["c1"] == 1 and new["c3"] == 123 and new["c8"] == 123
    assert new["c4"] == 153.123 and new["c5"] == 153.123
    assert new["c6"] is None and new["c27"] is None
    assert new["c7"] == "1973-12-30 15:30:00" and new["c11"] == "23:59:59"
    assert new["c13"] == 1970 and new["c16"] == 81 and new["c19"] == 1 and new["c20"] == 3
    assert new["c17"] == '{"key1": "value1"}' and new["c18"] == "129012.1230000"
    # TEXT types are base64 on the wire whatever the charset; f=0 means text.
    assert new["c21"] == new["c24"] == "测试text"
    # f=0: not binary, so the escaped text is the value itself.
    assert new["c25"] == "\\x89PNG\\r\\n\\x1a\\n" and new["c26"] == "测试"
    # With "f" present the flags are authoritative; "h" is its deprecated shadow.
    assert all(kind.flags == 0 for kind in row.columns.values())


def test_open_protocol_without_flags_takes_the_handle_from_h(conformance: Path) -> None:
    key = b'{"ts":1,"scm":"a","tbl":"b","t":1}'
    value = b'{"d":{"id":{"t":3,"h":true,"v":1},"v":{"t":15,"v":"x"}}}'
    (row,) = OpenProtocolCodec().decode(
        (1).to_bytes(8, "big") + len(key).to_bytes(8, "big") + key,
        len(value).to_bytes(8, "big") + value,
    )
    assert isinstance(row, RowChange) and row.op is Op.DELETE and row.key_names() == ["id"]


def test_binary_varchar_is_go_unescaped() -> None:
    key = b'{"ts":1,"scm":"a","tbl":"b","t":1}'
    value = (
        rb'{"u":{"b":{"t":253,"f":1,"v":"\\x89PNG\\r\\n\\x1a\\n"},"t":{"t":252,"f":1,"v":"AP8="}}}'
    )
    (row,) = OpenProtocolCodec().decode(
        (1).to_bytes(8, "big") + len(key).to_bytes(8, "big") + key,
        len(value).to_bytes(8, "big") + value,
    )
    assert isinstance(row, RowChange)
    assert row.new == {"b": b"\x89PNG\r\n\x1a\n", "t": b"\x00\xff"}


def test_craft_vectors(conformance: Path) -> None:
    expected = json.loads((conformance / "craft_tibigdata/expected_decoded.json").read_text())
    codec = CraftCodec()
    for name, spec in expected.items():
        data = (conformance / "craft_tibigdata" / name).read_bytes()
        assert data.hex() == spec["hex"]
        events = codec.decode(b"", data)
        assert len(events) == len(spec["events"])
        for event, want in zip(events, spec["events"], strict=True):
            assert event.commit_ts == want["ts"]  # type: ignore[union-attr]
            if want["type"] == "ddl":
                assert isinstance(event, DDLEvent)
                assert (event.schema, event.table) == (want["schema"], want["table"])
                assert (event.query, event.ddl_type) == (want["query"], want["ddl_action_type"])
            elif want["type"] == "resolved":
                assert isinstance(event, Resolved)
            else:
                assert isinstance(event, RowChange)
                (group,) = want["column_groups"]
                assert event.new == {c["name"]: None for c in group["columns"]}
                assert {n: k.mysql_type for n, k in event.columns.items()} == {
                    c["name"]: c["mysql_type"] for c in group["columns"]
                }
        # Our encoder writes these messages byte for byte as TiCDC did.
        assert codec.encode(events)[0].value == data


@pytest.mark.parametrize("name", ["row", "ddl", "resolved"])
def test_craft_spec_hex_dumps_byte_for_byte(name: str) -> None:
    data = bytes.fromhex((DATA / f"craft_spec_{name}.hex").read_text())
    codec = CraftCodec()
    events = codec.decode(None, data)
    assert len(events) == 1
    [message] = codec.encode(events)
    assert message.value == data


def test_craft_spec_row_dump_decodes_to_the_documented_update() -> None:
    data = bytes.fromhex((DATA / "craft_spec_row.hex").read_text())
    (row,) = CraftCodec().decode(None, data)
    assert isinstance(row, RowChange)
    assert (row.commit_ts, row.schema, row.table, row.op) == (
        424316552636792833,
        "a",
        "b",
        Op.UPDATE,
    )
    assert row.new is not None and row.old is not None
    assert row.new["varchar"] == "varchar1" and row.old["varchar"] == "varchar0"
    assert row.new["long"] == 2000 and row.old["float"] == 1.0
    assert row.new["datetime"] == "2021/01/02 00:00:00"


def test_canal_json_vectors(conformance: Path) -> None:
    lines = (conformance / "canal_json/txn_decoder_test_encodedValue.jsonl").read_bytes()
    codec = CanalJSONCodec()
    decoded = [codec.decode(None, line) for line in lines.splitlines() if line.strip()]
    insert, update, delete = (events[0] for events in decoded)
    assert isinstance(insert, RowChange) and insert.op is Op.INSERT
    assert insert.new == {
        "FirstName": "Bob",
        "HireDate": "2014-06-04",
        "LastName": "Smith",
        "OfficeLocation": "New York",
        "id": 101,
    }
    assert insert.commit_ts == 0  # no _tidb extension: the commit ts is unknown
    assert insert.key_names() == ["id"]
    assert isinstance(update, RowChange) and update.op is Op.UPDATE
    assert update.old is not None and update.old["OfficeLocation"] == "New York"
    assert update.new is not None and update.new["OfficeLocation"] == "Los Angeles"
    assert isinstance(delete, RowChange) and delete.op is Op.DELETE and delete.new is None
    assert delete.old is not None and delete.old["HireDate"] == "2015-10-08"


def test_canal_json_tidb_extension() -> None:
    codec = CanalJSONCodec()
    (watermark,) = codec.decode(None, b'{"type":"TIDB_WATERMARK","_tidb":{"watermarkTs":4}}')
    assert watermark == Resolved(4)
    row = (
        b'{"database":"d","table":"t","pkNames":["id"],"isDdl":false,"type":"INSERT",'
        b'"mysqlType":{"id":"bigint unsigned","b":"varbinary"},'
        b'"data":[{"id":"18446744073709551615","b":"\xc3\xbf\\u0000"}],"old":null,'
        b'"_tidb":{"commitTs":449999999999999999}}'
    )
    (event,) = codec.decode(None, row)
    assert isinstance(event, RowChange)
    assert event.commit_ts == 449999999999999999
    assert event.new == {"id": 18446744073709551615, "b": b"\xff\x00"}


def test_simple_avro_schema_is_the_upstream_one(conformance: Path) -> None:
    for name in ("message.avsc.ticdc.json", "message.avsc.tiflow.json"):
        upstream = json.loads((conformance / "simple" / name).read_text())
        assert upstream[-1]["name"] == "Message"
    names = [record["name"] for record in avro_schema()]
    assert len(names) == 12
    assert names[11] == "com.pingcap.simple.avro.Message"


def test_simple_avro_writes_ticdcs_union_branch() -> None:
    """TiCDC's simple encoder (tiflow pkg/sink/codec/simple/avro.go) encodes with the whole
    top-level union as its schema, so each message starts with branch 11 (``Message``) as a
    zigzag varint, 0x16, before the ``MessageType`` enum; the decoder refuses other branches."""
    codec = SimpleAvroCodec()
    (message,) = codec.encode([Resolved(450153676800524374)])
    assert message.value[:2] == b"\x16\x00"  # branch 11, then WATERMARK (enum index 0)
    assert codec.decode(None, message.value) == [Resolved(450153676800524374)]
    with pytest.raises(DecodeError, match=r"branch is com\.pingcap\.simple\.avro\.Watermark,"):
        # Branch 5 (0x0a) is the bare Watermark record: TiCDC never writes it at the top.
        codec.decode(None, b"\x0a" + message.value[3:])
