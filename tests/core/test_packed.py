"""Packed rows: what is packed reads back exactly, and the native reader the sink uses reads
every packed row as :func:`unpack_row` does (and hands it whatever it refuses)."""

from __future__ import annotations

import random
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.model import Op, RowChange, column_type
from core.packed import pack_row, row_reader, unpack_row
from tests.streams.codecs.strategies import NAMES, rows
from tests.streams.codecs.test_bad_input import _mutate, _sample_rows

FUZZ_INPUTS = 10_000


def _typed(row: RowChange) -> tuple[Any, ...]:
    """``row`` with each value's type beside it: 1, 1.0 and True are equal, and must not be."""

    def image(values: dict[str, Any] | None) -> Any:
        # Floats by their bits: a NaN equals itself there.
        return (
            None
            if values is None
            else [(k, type(v), v.hex() if isinstance(v, float) else v) for k, v in values.items()]
        )

    return (
        row.commit_ts,
        row.schema,
        row.table,
        row.op,
        list(row.columns.items()),
        image(row.new),
        image(row.old),
        (type(row.partition_id), row.partition_id),
        row.handle_key_only,
        row.row_id,
    )


def _outcome(read: Any, commit_ts: int, data: bytes) -> Any:
    try:
        return _typed(read(commit_ts, data))
    except Exception as error:
        return type(error)


@pytest.fixture(scope="module")
def native_reader(native: Any) -> Any:
    reader = row_reader()
    assert reader is not unpack_row
    return reader


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["open", "craft", "simple", "simple-avro", "canal-json"]).flatmap(
        lambda protocol: st.lists(rows(protocol, "db", "t"), min_size=1, max_size=4)
    ),
    NAMES,
)
def test_packed_rows_read_back_exactly(
    native_reader: Any, changes: list[RowChange], table: str
) -> None:
    for change in changes:
        for row in (change, RowChange(**{**vars_of(change), "table": table})):
            data = pack_row(row)
            assert _typed(unpack_row(row.commit_ts, data)) == _typed(row)
            assert _typed(native_reader(row.commit_ts, data)) == _typed(row)


def vars_of(row: RowChange) -> dict[str, Any]:
    return {name: getattr(row, name) for name in RowChange.__slots__}


def test_rows_of_tables_with_the_same_columns_keep_their_names(native_reader: Any) -> None:
    # The table layout cache is keyed by the packed schema, table and columns together.
    first = _sample_rows()[0]
    for schema, table in [("a", "t"), ("b", "t"), ("a", "u"), ("a", "t")]:
        row = RowChange(**{**vars_of(first), "schema": schema, "table": table})
        read = native_reader(row.commit_ts, pack_row(row))
        assert (read.schema, read.table) == (schema, table)
        assert _typed(read) == _typed(row)


def test_each_row_gets_its_own_columns(native_reader: Any) -> None:
    row = _sample_rows()[0]
    one, two = (native_reader(row.commit_ts, pack_row(row)) for _ in range(2))
    assert one.columns == two.columns and one.columns is not two.columns


@pytest.mark.parametrize(
    "fields",
    [
        # What Python reads and the native reader refuses, so hands back: a bytes image key, a
        # partition that is text, a key-only flag that is an int, nested values.
        [0, "db", "t", [["a", 3, 0]], {b"a": 1}, None, None, False],
        [0, "db", "t", [["a", 3, 0]], {"a": 1}, None, "p1", False],
        [0, "db", "t", [["a", 3, 0]], {"a": 1}, None, None, 1],
        [1, "db", "t", [["a", 245, 0]], {"a": [1, 2]}, {"a": {"k": None}}, None, True],
        # Floats in 32 bits, integers in every width, a column named twice.
        [2, "db", "t", [["a", 4, 0], ["a", 8, 0]], None, {"a": 1.5, "b": -(1 << 63)}, 7, False],
        # A row id that is not an int64.
        [0, "db", "t", [["a", 3, 0]], {"a": 1}, None, None, False, 1 << 63],
        [0, "db", "t", [["a", 3, 0]], {"a": 1}, None, None, False, "5"],
    ],
)
def test_what_the_native_reader_refuses_python_reads(native_reader: Any, fields: list[Any]) -> None:
    data = msgpack.packb(fields, use_bin_type=True)
    if fields[0] == 2:
        data = data.replace(msgpack.packb(1.5), b"\xca" + bytes.fromhex("3fc00000"))
    assert _outcome(native_reader, 5, data) == _outcome(unpack_row, 5, data)
    assert not isinstance(_outcome(unpack_row, 5, data), type)


def test_fuzzed_packed_rows_read_as_python_reads_them(native_reader: Any) -> None:
    rng = random.Random(7)
    samples = [pack_row(row) for row in _sample_rows()]
    samples.append(
        pack_row(
            RowChange(1, "s", "t", Op.INSERT, {"n": column_type(8, 0)}, {"n": (1 << 64) - 1}, None)
        )
    )
    samples.append(pack_row(RowChange(**{**vars_of(_sample_rows()[0]), "row_id": -(1 << 62)})))
    for _ in range(FUZZ_INPUTS):
        data = _mutate(rng, rng.choice(samples))
        assert _outcome(native_reader, 9, data) == _outcome(unpack_row, 9, data), data.hex()
