"""`ticdc-sink decode`: its JSON lines are a public interface, and bad input exits 2."""

from __future__ import annotations

import base64
import gzip
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from core.model import ColumnFlag, DDLEvent, Op, Resolved, RowChange, column_type
from streams.codecs import codec_for


def _run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "ticdc_sink", "decode", *args],
        input=stdin,
        capture_output=True,
        check=False,
    )


def test_prints_one_object_per_event_with_exact_values(tmp_path: Path) -> None:
    columns = {
        "id": column_type(8, int(ColumnFlag.UNSIGNED | ColumnFlag.PRIMARY_KEY)),
        "bin": column_type(254, int(ColumnFlag.BINARY)),
        "f": column_type(5),
        "d": column_type(246),
        "e": column_type(247),
    }
    row = RowChange(
        (1 << 64) - 2,
        "db",
        "t",
        Op.UPDATE,
        columns,
        {"id": (1 << 64) - 1, "bin": b"\x00\xff", "f": 1.5, "d": "0.1", "e": 2},
        {"id": 1, "bin": None, "f": None, "d": None, "e": None},
    )
    ddl = DDLEvent(449_999_999_999_999_999, "db", None, "CREATE DATABASE db", 1)
    messages = codec_for("open").encode([row, ddl, Resolved(450_000_000_000_000_000)])
    lines: list[dict] = []
    for index, message in enumerate(messages):
        (tmp_path / f"k{index}").write_bytes(message.key or b"")
        (tmp_path / f"v{index}").write_bytes(message.value)
        result = _run(
            "--protocol", "open", "--key", str(tmp_path / f"k{index}"), str(tmp_path / f"v{index}")
        )
        assert result.returncode == 0, result.stderr
        lines += [json.loads(line) for line in result.stdout.splitlines()]
    assert lines == [
        {
            "type": "row",
            "commit_ts": (1 << 64) - 2,
            "schema": "db",
            "table": "t",
            "op": "update",
            "new": {
                "id": 18446744073709551615,
                "bin": {"base64": "AP8="},
                "f": 1.5,
                "d": "0.1",
                "e": 2,
            },
            "old": {"id": 1, "bin": None, "f": None, "d": None, "e": None},
        },
        {
            "type": "ddl",
            "commit_ts": 449999999999999999,
            "schema": "db",
            "table": None,
            "query": "CREATE DATABASE db",
            "ddl_type": 1,
        },
        {"type": "resolved", "commit_ts": 450000000000000000},
    ]
    # Integers above 2**53 are written as exact JSON integers, never floats.
    assert (
        b"18446744073709551615"
        in _run("--protocol", "open", "--key", str(tmp_path / "k0"), str(tmp_path / "v0")).stdout
    )


def test_reads_stdin_and_prints_bootstrap(tmp_path: Path) -> None:
    row = RowChange(7, "db", "t", Op.INSERT, {"a": column_type(3, 10)}, {"a": 1}, None)
    bootstrap, dml = codec_for("simple").encode([row])
    (tmp_path / "b").write_bytes(bootstrap.value)
    (tmp_path / "d").write_bytes(dml.value)
    result = _run("--protocol", "simple", str(tmp_path / "b"), str(tmp_path / "d"))
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"type": "bootstrap", "schema": "db", "table": "t"},
        {
            "type": "row",
            "commit_ts": 7,
            "schema": "db",
            "table": "t",
            "op": "insert",
            "new": {"a": 1},
            "old": None,
        },
    ]
    piped = _run(
        "--protocol", "craft", "-", stdin=codec_for("craft").encode([Resolved(9)])[0].value
    )
    assert piped.stdout == b'{"type":"resolved","commit_ts":9}\n'


def test_bad_input_exits_2_naming_protocol_event_and_offset(tmp_path: Path) -> None:
    key_json = b'{"ts":1,"scm":"a","tbl":"b","t":1}'
    key = struct.pack(">QQ", 1, len(key_json)) + key_json
    (tmp_path / "key").write_bytes(key)
    (tmp_path / "value").write_bytes(struct.pack(">Q", 99) + b"{}")
    result = _run("--protocol", "open", "--key", str(tmp_path / "key"), str(tmp_path / "value"))
    assert result.returncode == 2
    assert b"open:" in result.stderr and b"event 0" in result.stderr and b"byte 0" in result.stderr
    craft = _run("--protocol", "craft", "-", stdin=b"\x01\x02\x03")
    assert craft.returncode == 2 and b"craft:" in craft.stderr


def test_pairs_each_key_file_with_its_value_file(tmp_path: Path) -> None:
    # Open Protocol carries the commit ts and table in the key: each value needs its own.
    rows = [
        RowChange(ts, "db", table, Op.INSERT, {"id": column_type(3)}, {"id": ts}, None)
        for ts, table in ((100, "a"), (200, "b"))
    ]
    args = ["--protocol", "open"]
    for index, row in enumerate(rows):
        (message,) = codec_for("open").encode([row])
        (tmp_path / f"k{index}").write_bytes(message.key or b"")
        (tmp_path / f"v{index}").write_bytes(message.value)
        args += ["--key", str(tmp_path / f"k{index}")]
    result = _run(*args, str(tmp_path / "v0"), str(tmp_path / "v1"))
    assert result.returncode == 0, result.stderr
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["commit_ts"], e["table"], e["new"]) for e in printed] == [
        (100, "a", {"id": 100}),
        (200, "b", {"id": 200}),
    ]
    mismatched = _run(*args[:4], str(tmp_path / "v0"), str(tmp_path / "v1"))
    assert mismatched.returncode == 2
    assert b"1 --key files for 2 value files" in mismatched.stderr


def test_stream_file_decodes_a_codec_per_partition(tmp_path: Path) -> None:
    row = RowChange(300, "db", "t", Op.DELETE, {"id": column_type(3)}, None, {"id": 7})
    lines = []
    for partition in (1, 0):
        for message in codec_for("open").encode([row, Resolved(400 + partition)]):
            key = base64.b64encode(message.key).decode() if message.key is not None else None
            value = base64.b64encode(message.value).decode()
            lines.append(json.dumps({"p": partition, "k": key, "v": value}))
    (tmp_path / "s.jsonl.gz").write_bytes(gzip.compress("\n".join(lines).encode()))
    result = _run("--protocol", "open", "--stream", str(tmp_path / "s.jsonl.gz"))
    assert result.returncode == 0, result.stderr
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["partition"], e["type"], e["commit_ts"]) for e in printed] == [
        (1, "row", 300),
        (1, "resolved", 401),
        (0, "row", 300),
        (0, "resolved", 400),
    ]
    (tmp_path / "bad.jsonl").write_text(lines[0] + "\n{}\n")
    bad = _run("--protocol", "open", "--stream", str(tmp_path / "bad.jsonl"))
    assert bad.returncode == 2
    assert b"line 2 is not a {p, k, v} object" in bad.stderr


def test_a_stream_lines_null_value_is_a_tombstone(tmp_path: Path) -> None:
    from ticdc_sink.decode_command import _stream

    path = tmp_path / "s.jsonl"
    path.write_text('{"p": 3, "k": "AAAAAOEG", "v": null}\n{"p": 0, "k": null, "v": "AQ=="}\n')
    assert list(_stream(str(path))) == [(1, 3, b"\0\0\0\0\xe1\x06", b""), (2, 0, None, b"\1")]


@pytest.mark.parametrize(
    "name", ["open", "craft", "canal-json", "simple", "simple-avro", "debezium"]
)
def test_prints_every_message_of_ticdcs_own_streams(conformance: Path, name: str) -> None:
    stream = conformance / "ticdc_encoded" / f"{name}.jsonl.gz"
    meta = json.loads((conformance / "ticdc_encoded" / f"{name}.meta.json").read_text())
    result = _run("--protocol", name, "--stream", str(stream))
    assert result.returncode == 0, result.stderr[-2000:]
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    assert sum(e["type"] == "row" for e in printed) == meta["row_events"]
    resolved = [e["commit_ts"] for e in printed if e["type"] == "resolved"]
    # TiCDC's Debezium encoder at this commit writes no checkpoint messages.
    final = None if name == "debezium" else meta["final_resolved_ts"]
    assert max(resolved, default=None) == final
