"""The CSV a LOAD DATA LOCAL reads: the native writer's and Arrow's read back, as the server
reads them, into the values they were written from."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.model import Value
from core.native import native_module
from spark_sink.db.tables import Column
from spark_sink.load.csv_rows import CSV_NULL, arrow_csv_rows

# (column type, data type, its values): what the sink's images hold for such a column.
KINDS = {
    "bigint": st.integers(min_value=-(2**63), max_value=2**64 - 1),
    "varchar": st.text(),
    "varbinary": st.binary(max_size=8),
    "double": st.floats(allow_nan=False, allow_infinity=False),
    "decimal": st.decimals(allow_nan=False, allow_infinity=False, places=2).map(str),
}
# A value a column of another type may hold: text or bytes (a number of the wrong type is not
# in the images: the codecs type every value by its column).
ANY = st.one_of(st.text(), st.binary(max_size=8))


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[Column], list[dict[str, Value]]]:
    kinds = draw(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=4))
    columns = [Column(f"c{i}", kind, kind, False) for i, kind in enumerate(kinds)]
    # Mostly the column's own values, sometimes anything (a value the type does not take).
    cells = {c.name: st.one_of(st.none(), KINDS[c.data_type], ANY) for c in columns}
    images = draw(st.lists(st.fixed_dictionaries({}, optional=cells), max_size=12))
    return columns, images


def native_csv_rows() -> object:
    module = native_module()
    if module is None:
        pytest.fail("no native wheel built from these sources: rebuild it (make)")
    return module.csv_rows


@settings(max_examples=300, deadline=None)
@given(table=tables(), flagged=st.booleans())
def test_native_and_arrow_csv_read_back_into_the_same_values(
    table: tuple[list[Column], list[dict[str, Value]]], flagged: bool
) -> None:
    columns, images = table
    flags = list(range(len(images))) if flagged else None
    names = [c.name for c in columns]
    native, native_hex = native_csv_rows()(images, names, [c.binary for c in columns], flags)  # type: ignore[operator]
    arrow, arrow_hex = arrow_csv_rows(images, columns, flags)
    for column, as_hex in zip(columns, native_hex, strict=True):
        has_bytes = any(isinstance(image.get(column.name), bytes) for image in images)
        assert as_hex == (column.binary or has_bytes)
    assert all(arrow_hex[i] for i, c in enumerate(columns) if c.binary)
    read_native = server_reading(native.decode())
    read_arrow = server_reading(arrow.decode())
    assert len(read_native) == len(read_arrow) == len(images)
    for image, line, other, flag in zip(
        images, read_native, read_arrow, flags or [None] * len(images), strict=True
    ):
        if flag is not None:
            assert line[-1] == other[-1] == str(flag)
        for i, column in enumerate(columns):
            value = image.get(column.name)
            mine = stored(line[i], native_hex[i])
            theirs = stored(other[i], arrow_hex[i])
            if value is None:
                assert mine is None and theirs is None
            elif isinstance(value, (int, float)) and column.data_type == "double":
                # Arrow writes a double's shortest form, Python its repr: the same double.
                assert float(mine) == float(theirs) == value  # type: ignore[arg-type]
            else:
                expected = value if isinstance(value, bytes) else str(value).encode()
                assert mine == theirs == expected


def stored(cell: str | None, as_hex: bool) -> bytes | None:
    """The bytes the server stores for a cell (a hex cell unhexed)."""
    if cell is None:
        return None
    return bytes.fromhex(cell) if as_hex else cell.encode()


def server_reading(text: str) -> list[list[str | None]]:
    """The cells as LOAD DATA reads them with the sink's options: ``"`` encloses, ``""`` is a
    quote inside, a bare NULL is SQL NULL; ',' and newline end cells and lines."""
    lines: list[list[str | None]] = []
    cells: list[str | None] = []
    for found in re.finditer(r'(NULL|"((?:[^"]|"")*)")([,\n])', text, re.DOTALL):
        cells.append(None if found.group(1) == CSV_NULL else found.group(2).replace('""', '"'))
        if found.group(3) == "\n":
            lines.append(cells)
            cells = []
    assert not cells and "".join(m.group(0) for m in re.finditer(
        r'(NULL|"(?:[^"]|"")*")[,\n]', text, re.DOTALL
    )) == text, "the CSV is not made of cells only"  # fmt: skip
    return lines


def test_a_text_column_with_bytes_goes_as_hex_and_quotes_double() -> None:
    data, hexed = native_csv_rows()(  # type: ignore[operator]
        [{"a": 'say "hi"', "b": b"\xff", "c": 2**64 - 1}, {"a": None, "b": "x", "c": 1.5}],
        ["a", "b", "c"],
        [False, False, False],
        [0, 1],
    )
    assert hexed == [False, True, False]
    assert data == b'"say ""hi""","ff","18446744073709551615","0"\nNULL,"78","1.5","1"\n'
