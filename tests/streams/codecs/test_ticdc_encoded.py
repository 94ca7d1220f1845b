"""Every message TiCDC's own encoders wrote (../shared/conformance/ticdc_encoded) decodes to the
events TiCDC handed its encoder (``oracle_<name>.events.jsonl.gz``): commit ts, table, op and every
column value, on each decoding path a protocol has (Python, native, native packed for staging).

The allowed differences, ``KNOWN_DIFFERENCES``, are losses in TiCDC's own encoders at this commit:
its Craft encoder corrupts FLOAT (see that folder's README), its Debezium encoder writes DECIMAL as
a double and a NULL of a column with a DEFAULT as that default. The Debezium stream holds no
watermarks: TiCDC's Debezium encoder at this commit writes no checkpoint messages.
"""

from __future__ import annotations

import base64
import gzip
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest

from core.model import DDLEvent, Event, Resolved, RowChange, Value
from core.packed import unpack_row
from streams.codecs import Codec, codec_for
from streams.codecs.craft import CraftCodec
from streams.codecs.open_protocol import OpenProtocolCodec
from streams.codecs.simple import SimpleJSONCodec

# Stream file stem -> the oracle file's name part.
ORACLES = {
    "open": "open",
    "craft": "craft",
    "canal-json": "canal",
    "simple": "simple",
    "simple-avro": "savro",
    "debezium": "dbz",
}


def _any_value(decoded: Value, expected: Any) -> bool:
    return True


def _same_double(decoded: Value, expected: Any) -> bool:
    return (
        isinstance(decoded, str)
        and isinstance(expected, str)
        and (float(decoded) == float(expected))
    )


def _null_as_default(decoded: Value, expected: Any) -> bool:
    return decoded == "dflt" and expected is None


# (stream, table, column) -> when its decoded value may differ from the oracle's, and why.
KNOWN_DIFFERENCES: dict[tuple[str, str, str], Callable[[Value, Any], bool]] = {
    # TiCDC's Craft encoder writes an 8-byte float into a 4-byte slot of a shared buffer, so
    # FLOAT arrives corrupted; TiCDC's own Craft decoder reads the same wrong values.
    ("craft", "t_types", "c_f"): _any_value,
    # TiCDC's Debezium encoder writes DECIMAL as strconv.ParseFloat of its text: only the
    # double is left (the codec shows it with the column's scale).
    ("debezium", "t_types", "c_dec"): _same_double,
    ("debezium", "t_types", "c_dec2"): _same_double,
    ("debezium", "t_comp", "n"): _same_double,
    ("debezium", "t_nokey", "c"): _same_double,
    # TiCDC's Debezium encoder writes a NULL of a column with a DEFAULT as the default
    # (`c_new VARCHAR(20) DEFAULT 'dflt'`): the NULL cannot be told from a real 'dflt'.
    ("debezium", "t_types", "c_new"): _null_as_default,
}
# Streams without watermarks: TiCDC's Debezium encoder at this commit writes no checkpoints.
NO_WATERMARKS = frozenset({"debezium"})
_PYTHON_ONLY: dict[str, Callable[[], Codec]] = {
    "open": lambda: OpenProtocolCodec(native=False),
    "craft": lambda: CraftCodec(native=False),
    "simple": lambda: SimpleJSONCodec(native=False),
}
# (stream, path): "python" is the reference codec, "native" the default codec with its native
# decoder, "packed" the native decoder's rows packed for staging, as the worker takes them.
PATHS = [(stream, "python") for stream in ORACLES]
PATHS += [(stream, "native") for stream in _PYTHON_ONLY]
PATHS += [("open", "packed"), ("craft", "packed")]


@dataclass
class Decoded:
    """One stream's events, per partition in message order."""

    rows: dict[int, list[RowChange]] = field(default_factory=lambda: defaultdict(list))
    ddl: dict[int, list[DDLEvent]] = field(default_factory=lambda: defaultdict(list))
    # Per partition, (rows seen before it, resolved ts), to check rows against watermarks.
    resolved: dict[int, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, partition: int, event: Event) -> None:
        if isinstance(event, RowChange):
            self.rows[partition].append(event)
        elif isinstance(event, DDLEvent):
            self.ddl[partition].append(event)
        elif isinstance(event, Resolved):
            self.resolved[partition].append((len(self.rows[partition]), event.commit_ts))


@cache
def _stream(folder: Path, name: str) -> list[tuple[int, bytes | None, bytes]]:
    messages = []
    with gzip.open(folder / f"{name}.jsonl.gz") as lines:
        for line in lines:
            item = orjson.loads(line)
            key = base64.b64decode(item["k"]) if item["k"] is not None else None
            messages.append((item["p"], key, base64.b64decode(item["v"])))
    return messages


@cache
def _oracle(folder: Path, name: str) -> list[dict[str, Any]]:
    with gzip.open(folder / f"oracle_{ORACLES[name]}.events.jsonl.gz") as lines:
        return [orjson.loads(line) for line in lines]


def _decode(folder: Path, name: str, path: str) -> Decoded:
    """Decodes with one codec per partition, as each partition's consumer would."""
    codecs: dict[int, Codec] = {}
    decoded = Decoded()
    for partition, key, value in _stream(folder, name):
        if partition not in codecs:
            python_only = _PYTHON_ONLY.get(name) if path == "python" else None
            codecs[partition] = python_only() if python_only else codec_for(name)
        codec = codecs[partition]
        if path == "packed":
            (packed,) = codec.decode_packed_many([(key, value)])
            if packed is not None:
                for commit_ts, row in packed.rows():
                    decoded.add(partition, unpack_row(commit_ts, row))
                for resolved_ts in packed.resolved:
                    decoded.add(partition, Resolved(resolved_ts))
                continue
        for event in codec.decode(key, value):
            decoded.add(partition, event)
    return decoded


def _same(value: Value, expected: Any) -> bool:
    """Whether a decoded value is the oracle's: the oracle holds text and binary data as
    ``{"hex": ...}`` of the bytes, everything else as TiCDC's text (integers exactly, floats as
    numbers that parse to the same double, DECIMAL, dates, times and JSON as exact strings)."""
    if expected is None or value is None:
        return expected is None and value is None
    if isinstance(expected, dict):
        data = value.encode() if isinstance(value, str) else value
        return bool(data == bytes.fromhex(expected["hex"]))
    if isinstance(value, float):
        number = float(expected)
        return bool(number == value or (math.isnan(number) and math.isnan(value)))
    if isinstance(value, int):
        return str(value) == expected
    return value == expected


def _differences(name: str, row: RowChange, expected: dict[str, Any]) -> list[str]:
    out = []
    for side, image in (("new", row.new), ("old", row.old)):
        wanted = expected[side]
        if image is None or wanted is None:
            if (image is None) != (wanted is None):
                out.append(f"{side}: {image!r} against {wanted!r}")
            continue
        if set(image) != set(wanted):
            out.append(f"{side} columns {sorted(image)} against {sorted(wanted)}")
        for column in set(image) & set(wanted):
            if _same(image[column], wanted[column]):
                continue
            allowed = KNOWN_DIFFERENCES.get((name, row.table, column))
            if allowed is None or not allowed(image[column], wanted[column]):
                out.append(f"{side}.{column}: {image[column]!r} against {wanted[column]!r}")
    return out


@pytest.mark.parametrize(("name", "path"), PATHS)
def test_stream_decodes_to_the_oracle(
    conformance: Path, request: pytest.FixtureRequest, name: str, path: str
) -> None:
    if path != "python":
        request.getfixturevalue("native")
    folder = conformance / "ticdc_encoded"
    meta = orjson.loads((folder / f"{name}.meta.json").read_bytes())
    oracle = _oracle(folder, name)
    decoded = _decode(folder, name, path)

    # Rows: each decoded row is one oracle row (same commit ts, table, op and values), every
    # oracle row is decoded once. Between two watermarks TiCDC's order is its own (a later
    # transaction's row may come first, even of one table): only the watermarks bound it, below.
    candidates: dict[tuple[int, str, str], list[int]] = defaultdict(list)
    for index, event in enumerate(oracle):
        if "op" in event:
            candidates[(event["ts"], event["table"], event["op"])].append(index)
    for partition, rows in decoded.rows.items():
        for row in rows:
            found = candidates[(row.commit_ts, f"{row.schema}.{row.table}", row.op.value)]
            where = f"partition {partition}, {row.table} at {row.commit_ts}"
            assert found, f"{where}: no oracle row"
            diffs = {i: _differences(name, row, oracle[i]) for i in found}
            match = next((i for i in found if not diffs[i]), None)
            assert match is not None, f"{where}: {diffs[found[0]]}"
            found.remove(match)
    assert not [i for left in candidates.values() for i in left], "oracle rows never decoded"
    assert sum(map(len, decoded.rows.values())) == meta["row_events"]

    # DDL: every oracle DDL (query and commit ts) arrives, and nothing else.
    ddl = Counter((e.commit_ts, e.query) for events in decoded.ddl.values() for e in events)
    assert set(ddl) == {(e["ts"], e["ddl"]) for e in oracle if "ddl" in e}

    # Watermarks: each partition's rise and end at the final one, and no row follows a
    # watermark at or past its commit ts.
    if name in NO_WATERMARKS:
        assert not decoded.resolved
        return
    assert sorted(decoded.resolved) == list(range(meta["partitions"]))
    for partition, marks in decoded.resolved.items():
        stamps = [ts for _, ts in marks]
        assert stamps == sorted(stamps)
        assert stamps[-1] == meta["final_resolved_ts"]
        rows = decoded.rows[partition]
        for seen, ts in marks:
            assert all(row.commit_ts > ts for row in rows[seen:]), (partition, ts)
