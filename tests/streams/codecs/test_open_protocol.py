"""Open Protocol as TiCDC's encoder writes it: whole-number floats, and ``rid``, the row's
integer handle, on every decoding path (Python, native, natively packed)."""

from __future__ import annotations

import base64
import gzip
from pathlib import Path
from typing import Any

import orjson
import pytest

from core.model import RowChange
from core.packed import pack_row, row_reader, unpack_row
from streams.codecs.open_protocol import OpenProtocolCodec, split_frames


def _message(key: bytes, value: bytes) -> tuple[bytes, bytes]:
    framed_key = (1).to_bytes(8, "big") + len(key).to_bytes(8, "big") + key
    return framed_key, len(value).to_bytes(8, "big") + value


def _rows_on_every_path(key: bytes, value: bytes) -> list[RowChange]:
    """The row of (key, value) as the Python codec, the native codec and the packed path
    (read back natively and in Python) decode it; asserts they agree."""
    python = OpenProtocolCodec(native=False).decode(key, value)
    native_codec = OpenProtocolCodec()
    assert native_codec._native is not None
    native = native_codec._native.decode(key, value)
    assert native is not None, "the native decoder took the message"
    packed = native_codec.decode_packed(key, value)
    assert packed is not None
    ((commit_ts, data),) = packed.rows()
    assert data == pack_row(python[0])  # type: ignore[arg-type]
    read = [unpack_row(commit_ts, data), row_reader()(commit_ts, data)]
    rows = [*python, *native, *read]
    assert all(isinstance(row, RowChange) for row in rows)
    return rows  # type: ignore[return-value]


@pytest.mark.usefixtures("native")
@pytest.mark.parametrize(
    ("mysql_type", "written"), [(4, b"3"), (5, b"-7"), (5, b"100000000000000000000")]
)
def test_a_whole_number_float_is_a_float(mysql_type: int, written: bytes) -> None:
    # TiCDC's encoder marshals a FLOAT/DOUBLE column's Go float64 with encoding/json, which
    # writes 3.0 as `3` (and 1e20 in full); its own decoder reads FLOAT/DOUBLE back as float64
    # (internal.FormatColumn). An int here would reach the downstream as another value type.
    column = b'{"t":%d,"f":0,"v":%s}' % (mysql_type, written)
    key, value = _message(b'{"ts":5,"scm":"s","tbl":"t","t":1}', b'{"u":{"c":' + column + b"}}")
    for row in _rows_on_every_path(key, value):
        assert row.new is not None
        assert type(row.new["c"]) is float
        assert row.new["c"] == float(written)


@pytest.mark.usefixtures("native")
@pytest.mark.parametrize("rid", [5, -(1 << 63), (1 << 63) - 1])
def test_rid_is_the_row_id(rid: int) -> None:
    key, value = _message(
        b'{"ts":5,"scm":"s","tbl":"t","rid":%d,"t":1}' % rid, b'{"d":{"c":{"t":3,"f":0,"v":1}}}'
    )
    assert {row.row_id for row in _rows_on_every_path(key, value)} == {rid}


@pytest.mark.usefixtures("native")
@pytest.mark.parametrize("rid", [b'"5"', b"5.0", b"9223372036854775808", b"null"])
def test_a_rid_that_is_not_an_int64_is_no_row_id(rid: bytes) -> None:
    # As the partition id: TiCDC writes an int64; anything else is dropped, not an error.
    key, value = _message(
        b'{"ts":5,"scm":"s","tbl":"t","rid":' + rid + b',"t":1}', b'{"d":{"c":{"t":3,"v":1}}}'
    )
    (row,) = OpenProtocolCodec(native=False).decode(key, value)
    assert isinstance(row, RowChange) and row.row_id is None
    native = OpenProtocolCodec().decode(key, value)
    assert native == [row]


def test_a_row_id_survives_encoding() -> None:
    codec = OpenProtocolCodec(native=False)
    key, value = _message(b'{"ts":5,"scm":"s","tbl":"t","rid":42,"t":1}', b'{"d":{"c":{"t":3}}}')
    (row,) = codec.decode(key, value)
    (message,) = codec.encode([row])
    assert codec.decode(message.key, message.value) == [row]


def _keys(stream: Path) -> list[dict[str, Any]]:
    keys = []
    with gzip.open(stream) as lines:
        for line in lines:
            encoded = orjson.loads(line)["k"]
            if encoded is not None:
                keys += [orjson.loads(k) for k in split_frames(base64.b64decode(encoded), 8, "key")]
    return keys


def test_ticdc_writes_rid_for_integer_handles_only(conformance: Path) -> None:
    # What the conformance stream shows of TiCDC's MessageKey.RowID (`rid,omitempty`, set from
    # the row's handle when it is an int): t_nokey (no key: the hidden _tidb_rowid) and the
    # tables with an integer primary key carry it; t_comp, clustered on a composite key, not.
    rows = [k for k in _keys(conformance / "ticdc_encoded" / "open.jsonl.gz") if k["t"] == 1]
    with_rid = {k["tbl"] for k in rows if "rid" in k}
    assert "t_nokey" in with_rid
    assert "t_comp" not in with_rid
    assert all(isinstance(k["rid"], int) and k["rid"] > 0 for k in rows if "rid" in k)


def test_decoded_stream_rows_carry_their_rid(conformance: Path) -> None:
    stream = conformance / "ticdc_encoded" / "open.jsonl.gz"
    codecs: dict[int, OpenProtocolCodec] = {}
    ids: dict[str, set[int | None]] = {}
    with gzip.open(stream) as lines:
        for line in lines:
            item = orjson.loads(line)
            key = None if item["k"] is None else base64.b64decode(item["k"])
            codec = codecs.setdefault(item["p"], OpenProtocolCodec())
            for event in codec.decode(key, base64.b64decode(item["v"])):
                if isinstance(event, RowChange):
                    ids.setdefault(event.table, set()).add(event.row_id)
    assert None not in ids["t_nokey"] and len(ids["t_nokey"]) > 1
    assert ids["t_comp"] == {None}
