"""One table compared: its key ranges checksummed on both servers, and the rows of a range
whose checksums differ read from both and matched by key (a table without a key: as a
multiset), each difference counted, the first ones kept to show, every one written to the fix
file."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spark_sink.db.dialect import bindable
from ticdc_sink.check.canonical import (
    Column,
    checksum_query,
    names,
    row_texts,
    select_list,
    to_checksum,
)
from ticdc_sink.check.chunks import KeyRange, key_columns, key_ranges, order_by
from ticdc_sink.check.fix import FixSql
from ticdc_sink.check.snapshot import Session
from ticdc_sink.check.tables import TablePair, columns_of, qualified

Texts = tuple[str | None, ...]

# Kinds of difference.
DIFFERS = "differs"
MISSING = "missing downstream"
EXTRA = "extra downstream"


@dataclass(frozen=True, slots=True)
class Difference:
    """A row that is not the same on both sides: its key (None for a table without one) and
    the compared texts of the columns that differ (all of them for a missing or extra row)."""

    kind: str
    key: dict[str, str | None] | None
    upstream: dict[str, str | None] | None
    downstream: dict[str, str | None] | None


@dataclass
class TableResult:
    """What a table's comparison found."""

    name: str
    ts: int
    rows: int = 0
    downstream_rows: int = 0
    chunks: int = 0
    drilled: int = 0
    differences: int = 0
    shown: list[Difference] = field(default_factory=list)
    # Why the table could not be compared row by row (no such table downstream, other columns).
    problem: str | None = None

    @property
    def matched(self) -> bool:
        return self.problem is None and self.differences == 0

    def add(self, difference: Difference, show: int) -> None:
        self.differences += 1
        if len(self.shown) < show:
            self.shown.append(difference)


class RateLimit:
    """Rows read per second across every thread of a check (None: unbounded)."""

    def __init__(self, rows_per_second: int | None) -> None:
        self.rate = rows_per_second
        self._due = time.monotonic()
        self._lock = threading.Lock()

    def take(self, rows: int) -> None:
        """Count ``rows`` read, sleeping as long as reading them at the rate takes."""
        if not self.rate or not rows:
            return
        with self._lock:
            now = time.monotonic()
            self._due = max(self._due, now) + rows / self.rate
            wait = self._due - now
        time.sleep(max(0.0, wait))


@dataclass(frozen=True, slots=True)
class Options:
    chunk_rows: int
    show: int
    limit: RateLimit
    fix: FixSql | None


def compare_table(session: Session, pair: TablePair, options: Options) -> TableResult:
    result = TableResult(pair.name, session.ts)
    with (
        session.upstream.cursor() as up,
        session.upstream.cursor() as bounds,
        session.downstream.cursor() as down,
    ):
        up_columns = columns_of(up, pair.upstream)
        down_columns = {c.name: c for c in columns_of(down, pair.downstream)}
        if not down_columns:
            result.problem = f"no table {'.'.join(pair.downstream)} downstream"
            return result
        up_names = [c.name for c in up_columns]
        if set(up_names) != set(down_columns):
            only_up = sorted(set(up_names) - set(down_columns))
            only_down = sorted(set(down_columns) - set(up_names))
            result.problem = (
                f"the columns differ: upstream only {only_up}, downstream only {only_down}"
            )
            return result
        # The downstream's columns in the upstream's order, each with its own server's type.
        sides = (up_columns, [down_columns[n] for n in up_names])
        keys = key_columns(up, *pair.upstream)
        tables = (qualified(pair.upstream), qualified(pair.downstream))
        for key_range in key_ranges(bounds, tables[0], keys, options.chunk_rows):
            where, values = key_range.where(keys)
            sums = []
            for cursor, table, columns in zip((up, down), tables, sides, strict=True):
                cursor.execute(checksum_query(table, columns, where), values)
                sums.append(to_checksum(cursor.fetchone()))
            result.chunks += 1
            result.rows += sums[0].rows
            result.downstream_rows += sums[1].rows
            options.limit.take(sums[0].rows + sums[1].rows)
            if sums[0] != sums[1]:
                result.drilled += 1
                _drill(result, (up, down), tables, sides, keys, key_range, options)
    return result


@dataclass
class _Rows:
    """A range's rows on one side by key: compared texts and the values as read."""

    texts: dict[Texts, Texts] = field(default_factory=dict)
    values: dict[Texts, Sequence[Any]] = field(default_factory=dict)
    multiset: Counter[Texts] = field(default_factory=Counter)


def _read(
    cursor: Any,
    table: str,
    columns: Sequence[Column],
    keys: Sequence[str],
    key_range: KeyRange,
) -> _Rows:
    where, values = key_range.where(keys)
    order = f" ORDER BY {order_by(keys)}" if keys else ""
    cursor.execute(
        f"SELECT {select_list(columns)}, {names(columns)} FROM {bindable(table)}{where}{order}",
        values,
    )
    width = len(columns)
    positions = [i for i, c in enumerate(columns) if c.name in keys]
    positions.sort(key=lambda i: keys.index(columns[i].name))
    found = _Rows()
    for row in cursor.fetchall():
        texts = row_texts(row[:width], columns)
        key = tuple(texts[i] for i in positions) if keys else texts
        found.texts[key] = texts
        found.values[key] = row[width:]
        found.multiset[texts] += 1
    return found


def _drill(
    result: TableResult,
    cursors: tuple[Any, Any],
    tables: tuple[str, str],
    sides: tuple[Sequence[Column], Sequence[Column]],
    keys: Sequence[str],
    key_range: KeyRange,
    options: Options,
) -> None:
    """Match a range's rows by key and count what differs."""
    up = _read(cursors[0], tables[0], sides[0], keys, key_range)
    down = _read(cursors[1], tables[1], sides[1], keys, key_range)
    options.limit.take(len(up.values) + len(down.values))
    columns = [c.name for c in sides[0]]
    if not keys:
        _drill_multiset(result, up, down, columns, options)
        return
    for key, texts in up.texts.items():
        theirs = down.texts.get(key)
        if theirs == texts:
            continue
        shown_key = dict(zip(keys, key, strict=True))
        if theirs is None:
            result.add(
                Difference(MISSING, shown_key, dict(zip(columns, texts, strict=False)), None),
                options.show,
            )
        else:
            differing = [i for i, (a, b) in enumerate(zip(texts, theirs, strict=False)) if a != b]
            result.add(
                Difference(
                    DIFFERS,
                    shown_key,
                    {columns[i]: texts[i] for i in differing},
                    {columns[i]: theirs[i] for i in differing},
                ),
                options.show,
            )
        if options.fix is not None:
            options.fix.replace(tables[1], columns, up.values[key])
    for key, texts in down.texts.items():
        if key in up.texts:
            continue
        shown_key = dict(zip(keys, key, strict=True))
        result.add(
            Difference(EXTRA, shown_key, None, dict(zip(columns, texts, strict=False))),
            options.show,
        )
        if options.fix is not None:
            values = down.values[key]
            options.fix.delete(tables[1], keys, [values[columns.index(k)] for k in keys])


def _drill_multiset(
    result: TableResult, up: _Rows, down: _Rows, columns: list[str], options: Options
) -> None:
    """A table without a key: rows one side has more copies of than the other."""
    for texts, count in (up.multiset - down.multiset).items():
        for _ in range(count):
            result.add(
                Difference(MISSING, None, dict(zip(columns, texts, strict=False)), None),
                options.show,
            )
    for texts, count in (down.multiset - up.multiset).items():
        for _ in range(count):
            result.add(
                Difference(EXTRA, None, None, dict(zip(columns, texts, strict=False))), options.show
            )
    if options.fix is not None and (up.multiset != down.multiset):
        options.fix.note(f"{result.name} has no key: its rows cannot be replaced one by one")
