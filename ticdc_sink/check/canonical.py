"""One text form per row, computed in SQL on either server, and its checksum per key range.

The form is :func:`ticdc_sink.truth.compared_expression`'s per column (binary as hex, BIT as a
number, FLOAT widened to DOUBLE, DECIMAL and times as text), each value written with its length
first and NULL apart from every text, so that no two different rows concatenate alike. Where the
two servers write one value in two texts (a DOUBLE's digits, JSON's spacing), the checksums
differ and the range's rows are compared in Python (:func:`row_texts`), which settles it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spark_sink.db.dialect import bindable, quote
from ticdc_sink.truth import compared_expression, compared_text


@dataclass(frozen=True, slots=True)
class Column:
    """A compared column: its name, its data type on this server, and whether it holds JSON
    (MariaDB's JSON is LONGTEXT with a check)."""

    name: str
    data_type: str
    is_json: bool = False

    @property
    def expression(self) -> str:
        return bindable(compared_expression(self.name, self.data_type))


def row_expression(columns: Sequence[Column]) -> str:
    """The SQL text of a row's canonical form."""
    parts = [f"IFNULL(CONCAT(LENGTH({e}), ':', {e}), 'N')" for e in (c.expression for c in columns)]
    return f"CONCAT_WS(',', {', '.join(parts)})"


@dataclass(frozen=True, slots=True)
class Checksum:
    """A range's rows, the sum of their CRC32 and the XOR of 64 bits of their MD5 (a sum and a
    XOR: two copies of one row do not cancel out)."""

    rows: int
    crc_sum: int
    md5_xor: int


def checksum_query(table: str, columns: Sequence[Column], where: str) -> str:
    """The statement that reads :class:`Checksum` of ``table``'s rows ``where`` selects."""
    return (
        "SELECT COUNT(*), COALESCE(SUM(CRC32(r)), 0), "
        "COALESCE(BIT_XOR(CAST(CONV(LEFT(MD5(r), 16), 16, 10) AS UNSIGNED)), 0) "
        f"FROM (SELECT {row_expression(columns)} AS r FROM {bindable(table)}{where}) AS c"
    )


def to_checksum(row: Sequence[Any]) -> Checksum:
    return Checksum(int(row[0]), int(row[1]), int(row[2]))


def row_texts(values: Sequence[Any], columns: Sequence[Column]) -> tuple[str | None, ...]:
    """A row read with :func:`select_list`'s compared expressions, in the form compared in
    Python (JSON parsed and written with sorted keys, floats by ``repr``)."""
    return tuple(compared_text(v, c.is_json) for v, c in zip(values, columns, strict=True))


def select_list(columns: Sequence[Column]) -> str:
    return ", ".join(c.expression for c in columns)


def names(columns: Sequence[Column]) -> str:
    return ", ".join(bindable(quote(c.name)) for c in columns)
