"""Merging one loaded staging table into its target, inside the batch's transaction: deletes
(by key, or by staged image for a table without one), then one upsert of every staged row (or,
for a table whose upserts load in place, the load of them straight into it: a LOAD DATA, or for
a few rows a statement with their values, sent with other tables' many to a round trip).

The dialect writes every statement; this module decides which run and in what order. Re-running
a batch is harmless: the upsert sets final states, and key-less deletes count copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spark_sink.db.dialect import Dialect
from spark_sink.load.loaders import load_in_place, run_statements, values_statement
from spark_sink.load.staged import DELETE_FLAG, StagedTable

# Keys per DELETE statement for tables with a key; staged images per DELETE ... IN list.
DELETE_CHUNK = 1_000
# Undoes a key-less table's quick delete when it removed more copies than the batch deletes.
_COPIES_SAVEPOINT = "tcs_copies"


def merge_tables(
    cursor: Any, dialect: Dialect, staged: Sequence[StagedTable], placed: Sequence[bool]
) -> int:
    """Apply the deletes and upserts of every table of a batch to its target (``placed``: its
    upserts load straight into it, nothing was staged for them); returns the rows changed. The
    few rows of small tables loaded in place go last, many tables' to a round trip: no other
    table's rows depend on theirs (no foreign key references, no trigger watches a table
    loaded in place)."""
    merged = 0
    statements: list[str] = []
    for item, place in zip(staged, placed, strict=True):
        merged += merge_deletes(cursor, dialect, item)
        if place and item.plan.upserts:
            merged += upsert_in_place(cursor, dialect, item, statements)
        elif item.plan.upserts:
            merged += upsert_from_staging(
                cursor, dialect, item.target, item.stage, staged_columns(item)
            )
    run_statements(cursor, dialect, statements)
    return merged


def upsert_in_place(cursor: Any, dialect: Dialect, item: StagedTable, statements: list[str]) -> int:
    """Load ``item``'s upserts straight into its target: by LOAD DATA now, or (a few rows) as a
    statement added to ``statements`` for :func:`~spark_sink.load.loaders.run_statements`;
    returns the rows."""
    statement = values_statement(cursor, item)
    if statement is None:
        return load_in_place(cursor, dialect, item)
    statements.append(statement)
    return len(item.images) - item.deletes


def merge_deletes(cursor: Any, dialect: Dialect, item: StagedTable) -> int:
    """Apply ``item``'s deletes to its target (by key, or by its staged delete images)."""
    plan = item.plan
    if plan.deletes and item.keyed:
        return _delete_by_key(cursor, dialect, item)
    if plan.deletes:
        present = {c.name for c in item.columns}
        keys = [k for k in plan.key_columns if k in present] or [c.name for c in item.columns]
        return _delete_images(cursor, dialect, item, keys)
    return 0


def staged_columns(item: StagedTable) -> list[str]:
    """The staging table's columns ``item``'s rows have (a row never sets the others)."""
    wanted = set(item.plan.columns)
    return [c.name for c in item.columns if c.name in wanted]


def upsert_from_staging(
    cursor: Any, dialect: Dialect, target: str, stage: str, columns: list[str]
) -> int:
    """Upsert every staged image to upsert (flag 0) of ``stage`` into ``target``."""
    return int(cursor.execute(dialect.upsert_staged(target, stage, columns, DELETE_FLAG)))


def _delete_images(cursor: Any, dialect: Dialect, item: StagedTable, keys: list[str]) -> int:
    """Delete the staged images (flags 1..n): all copies of each when the table has a key
    or when that removes exactly the copies the plan counts (the common case: no
    identical rows), else, for a key-less table, just that many copies of each image."""
    target, stage = item.target, item.stage
    plan = item.plan
    every = dialect.delete_staged(target, stage, keys, DELETE_FLAG, "> 0")
    if not plan.keyless:
        return int(cursor.execute(every))
    counts = [plan.copies[key] for key in plan.deletes]
    cursor.execute(dialect.savepoint(_COPIES_SAVEPOINT))
    deleted = int(cursor.execute(every))
    if deleted <= sum(counts):
        return deleted
    # Some image has more copies downstream than the batch deletes: count them, delete
    # every copy of the others, and just the counted copies of those (one scan each).
    cursor.execute(dialect.rollback_to(_COPIES_SAVEPOINT))
    cursor.execute(dialect.count_staged_copies(target, stage, keys, DELETE_FLAG))
    held = {int(n): int(copies) for n, copies in cursor.fetchall()}
    whole = [n for n, count in enumerate(counts, 1) if held.get(n, 0) <= count]
    deleted = 0
    for start in range(0, len(whole), DELETE_CHUNK):
        chunk = ", ".join(str(n) for n in whole[start : start + DELETE_CHUNK])
        deleted += cursor.execute(
            dialect.delete_staged(target, stage, keys, DELETE_FLAG, f"IN ({chunk})")
        )
    for n, count in enumerate(counts, 1):
        if held.get(n, 0) > count:
            deleted += cursor.execute(
                dialect.delete_copies(target, stage, keys, DELETE_FLAG, n, count)
            )
    return deleted


def _delete_by_key(cursor: Any, dialect: Dialect, item: StagedTable) -> int:
    """Delete the plan's keys with bound values, a chunk per statement: cheaper than staging
    them, and the key index finds each row (key columns are never NULL)."""
    keys = item.plan.key_columns
    pending = list(item.plan.deletes)
    deleted = 0
    for start in range(0, len(pending), DELETE_CHUNK):
        chunk = pending[start : start + DELETE_CHUNK]
        deleted += cursor.execute(
            dialect.delete_by_key(item.target, keys, len(chunk)),
            [value for key in chunk for value in key],
        )
    return deleted
