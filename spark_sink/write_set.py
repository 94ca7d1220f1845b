"""What a batch writes downstream, to tell before it runs whether it may run beside others.

Two batches whose write sets are disjoint touch no common row and no common unique value, so
the later one can execute while the earlier one is uncommitted without waiting on its locks, and
the earlier one never waits on the later one's: no deadlock between them is possible, whatever
order their statements reach the server in. A write set holds, per downstream table (after
routes), the key of every row the batch deletes or upserts (old and new images alike: an update
that moves a key deletes the old one), and per column that is part of a unique key upstream
(``UNIQUE_KEY`` flag) every value of it the batch's images hold, so a row that takes over a
unique value another batch frees waits for that batch. A table keyed by all its columns (no
primary or unique key) is keyed by its images: a batch deletes rows of an image and adds rows of
another, never touching a row of an image it does not name, so two batches whose images differ
touch no common row either (the server's own gap locks aside: :mod:`spark_sink.in_order`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from core.model import ColumnFlag, Value
from spark_sink.plan import Key, TablePlan
from spark_sink.routing import Router

_UNIQUE = int(ColumnFlag.UNIQUE_KEY)
Table = tuple[str, str]


@dataclass(frozen=True, slots=True)
class WriteSet:
    """The rows and unique values a batch writes. ``keys`` maps each downstream table to its
    rows' keys (a key-less table's: their images); ``unique`` maps (table, column) to the
    values the batch's images hold in that column."""

    keys: dict[Table, frozenset[Key]] = field(default_factory=dict)
    unique: dict[tuple[Table, str], frozenset[Value]] = field(default_factory=dict)

    def meets(self, other: WriteSet) -> bool:
        """Whether the two batches may touch a common row or unique value."""
        small, large = (self, other) if len(self.keys) <= len(other.keys) else (other, self)
        for table, keys in small.keys.items():
            theirs = large.keys.get(table)
            if theirs is not None and not keys.isdisjoint(theirs):
                return True
        small_u, large_u = (
            (self.unique, other.unique)
            if len(self.unique) <= len(other.unique)
            else (other.unique, self.unique)
        )
        return any(
            column in large_u and not values.isdisjoint(large_u[column])
            for column, values in small_u.items()
        )


def write_set(plans: Sequence[TablePlan], router: Router) -> WriteSet:
    """The write set of a batch of ``plans`` (upstream names, routed here as the load routes
    them; a skipped table writes nothing)."""
    keys: dict[Table, frozenset[Key]] = {}
    unique: dict[tuple[Table, str], frozenset[Value]] = {}
    for plan in plans:
        table = router.route(plan.schema, plan.table)
        if table is None:
            continue
        rows = frozenset(plan.deletes.keys() | plan.upserts.keys())
        keys[table] = keys.get(table, frozenset()) | rows
        if plan.keyless or not plan.has_key:
            continue
        for column in _unique_columns(plan):
            values = _values(column, plan.deletes.values(), plan.upserts.values())
            if values:
                unique[table, column] = unique.get((table, column), frozenset()) | values
    return WriteSet(keys, unique)


def _unique_columns(plan: TablePlan) -> list[str]:
    """The columns of a unique key other than the one the plan keys rows by."""
    return [
        name
        for name, kind in plan.columns.items()
        if kind.flags & _UNIQUE and name not in plan.key_columns
    ]


def _values(column: str, *images: Iterable[dict[str, Value]]) -> frozenset[Value]:
    """The non-NULL values of ``column`` in ``images`` (NULL never collides in a unique key)."""
    found = set()
    for group in images:
        for image in group:
            value = image.get(column)
            if value is not None:
                found.add(value)
    return frozenset(found)
