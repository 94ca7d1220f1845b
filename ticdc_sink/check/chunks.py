"""Key ranges: a table cut along its primary key (else a unique key of NOT NULL columns) into
ranges of about ``chunk_rows`` rows, bounds read from the upstream one range at a time so that
no table's keys are ever held whole. A table with neither key is one range."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from spark_sink.db.dialect import bindable, quote

Bound = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class KeyRange:
    """Keys above ``lower`` (None: from the first) up to ``upper`` included (None: to the
    last)."""

    lower: Bound | None
    upper: Bound | None

    def where(self, keys: Sequence[str]) -> tuple[str, list[Any]]:
        """The WHERE clause (with a leading space; empty for the whole table) and its values."""
        conditions = []
        values: list[Any] = []
        if keys and self.lower is not None:
            conditions.append(f"{_tuple(keys)} > {_marks(keys)}")
            values += self.lower
        if keys and self.upper is not None:
            conditions.append(f"{_tuple(keys)} <= {_marks(keys)}")
            values += self.upper
        return (" WHERE " + " AND ".join(conditions) if conditions else ""), values


def _tuple(keys: Sequence[str]) -> str:
    quoted = [bindable(quote(k)) for k in keys]
    return quoted[0] if len(quoted) == 1 else f"({', '.join(quoted)})"


def _marks(keys: Sequence[str]) -> str:
    return "%s" if len(keys) == 1 else f"({', '.join('%s' for _ in keys)})"


def order_by(keys: Sequence[str]) -> str:
    return ", ".join(bindable(quote(k)) for k in keys)


def key_columns(cursor: Any, schema: str, table: str) -> tuple[str, ...]:
    """The primary key's columns, else those of the first unique key of NOT NULL columns
    (by name), else none."""
    cursor.execute(
        "SELECT INDEX_NAME, COLUMN_NAME, NULLABLE FROM information_schema.STATISTICS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 "
        "ORDER BY INDEX_NAME, SEQ_IN_INDEX",
        (schema, table),
    )
    indexes: dict[str, list[tuple[str, bool]]] = {}
    for index, column, nullable in cursor.fetchall():
        indexes.setdefault(str(index), []).append((str(column), str(nullable or "") == "YES"))
    if "PRIMARY" in indexes:
        return tuple(c for c, _ in indexes["PRIMARY"])
    for index in sorted(indexes):
        if not any(nullable for _, nullable in indexes[index]):
            return tuple(c for c, _ in indexes[index])
    return ()


def key_ranges(cursor: Any, table: str, keys: Sequence[str], chunk_rows: int) -> Iterator[KeyRange]:
    """The ranges of ``table`` (quoted ``db.table``) read through ``cursor``: each upper bound
    is the key ``chunk_rows`` rows past the last, the final range open-ended (so that it also
    holds any key past the upstream's last)."""
    if not keys:
        yield KeyRange(None, None)
        return
    lower: Bound | None = None
    while True:
        where, values = KeyRange(lower, None).where(keys)
        cursor.execute(
            f"SELECT {order_by(keys)} FROM {bindable(table)}{where} "
            f"ORDER BY {order_by(keys)} LIMIT 1 OFFSET {chunk_rows - 1}",
            values,
        )
        found = cursor.fetchone()
        if found is None:
            yield KeyRange(lower, None)
            return
        upper = tuple(found)
        yield KeyRange(lower, upper)
        lower = upper
