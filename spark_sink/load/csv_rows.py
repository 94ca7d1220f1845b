"""The CSV a LOAD DATA LOCAL of the sink reads: a line per image, every cell quoted (a ``"``
inside doubled, no escape character), SQL NULL as a bare ``NULL``.

A binary column goes as hex: CSV is text, and the server unhexes the cell into the column. The
native ``csv_rows`` writes the CSV in one pass over the images (``str`` of a value, ``repr`` of
a float's value; a column holding any bytes value goes as hex too); without it, Arrow writes it
from a typed array per column (a column whose bytes are not UTF-8 goes as hex). Both read back
into the same values (tested), which MySQL parses into the column's type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.model import Value
from core.native import native_module
from spark_sink.db.tables import Column
from spark_sink.load.staged import arrow_column, cell

# Unquoted in the CSV, the word NULL is SQL NULL (a quoted "NULL" stays a string).
CSV_NULL = "NULL"


def csv_rows(
    images: list[dict[str, Value]],
    columns: Sequence[Column],
    flags: list[int] | None = None,
    native: bool = True,
) -> tuple[bytes, list[bool]]:
    """The CSV of ``images`` over ``columns`` (then a ``flags`` cell per line when given), and
    per column whether its cells went as hex."""
    module = native_module() if native else None
    if module is None:
        return arrow_csv_rows(images, columns, flags)
    names = [column.name for column in columns]
    binary = [column.binary for column in columns]
    data, hexed = module.csv_rows(images, names, binary, flags)
    return data, hexed


def arrow_csv_rows(
    images: list[dict[str, Value]], columns: Sequence[Column], flags: list[int] | None = None
) -> tuple[bytes, list[bool]]:
    """:func:`csv_rows` without the native module: Arrow arrays written as CSV in C."""
    import pyarrow as pa
    import pyarrow.csv as csv

    arrays: list[Any] = []
    hexed = []
    for column in columns:
        values = [image.get(column.name) for image in images]
        array = arrow_column(column, values)
        as_hex = pa.types.is_binary(array.type)
        if as_hex:
            # A text column's cells go as hex once any of them is bytes that are not UTF-8.
            cells = (cell(v, column) for v in values)
            array = pa.array([None if c is None else _hex(c) for c in cells], pa.string())
        arrays.append(array)
        hexed.append(as_hex)
    if flags is not None:
        arrays.append(pa.array(flags, pa.int32()))
    frame = pa.Table.from_arrays(arrays, names=[str(i) for i in range(len(arrays))])
    options = csv.WriteOptions(
        include_header=False, quoting_style="all_valid", null_string=CSV_NULL
    )
    rows = pa.BufferOutputStream()
    csv.write_csv(frame, rows, options)
    return rows.getvalue().to_pybytes(), hexed


def _hex(data: bytes | str) -> str:
    return (data if isinstance(data, bytes) else data.encode()).hex()
