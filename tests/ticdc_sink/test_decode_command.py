"""`ticdc-sink decode`: its JSON lines are a public interface, and bad input exits 2."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

from streams.codecs import codec_for
from streams.model import ColumnFlag, DDLEvent, Op, Resolved, RowChange, column_type


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
