"""Transactions larger than a chunk, applied in parts: against a model database, applying a
stream in parts of any size (each part's deletes at once, every part's images after the last
part, as :meth:`BatchApplier.apply_part` does) ends where applying it whole does, which is the
upstream's state."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.model import ColumnFlag, DDLEvent, Op, RowChange, column_type
from core.staging import Barrier
from spark_sink.batches import PlannedBatch, planned_batches
from spark_sink.plan import Key

PK = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
UNIQUE = int(ColumnFlag.UNIQUE_KEY)
KEYED = {"id": column_type(3, PK), "u": column_type(3, UNIQUE), "v": column_type(15, 64)}
KEYLESS = {"id": column_type(3, 64), "u": column_type(3, 64), "v": column_type(15, 64)}
Row = dict[str, Any]


@st.composite
def transactions(draw: st.DrawFn, keyless: bool) -> tuple[list[Row], list[RowChange]]:
    """Upstream transactions of several changes each, at most one per row and transaction (as
    TiCDC sends them), in no particular order within a transaction: inserts, deletes, updates
    that move the key or the unique value, swaps of unique values and of keys, and key moves
    TiCDC split into a delete and an insert. Returns the upstream's rows at the end."""
    columns = KEYLESS if keyless else KEYED
    rows: dict[int, Row] = {}  # by a hidden row identity
    serial = 0
    changes: list[RowChange] = []
    for ts in range(1, draw(st.integers(1, 5)) + 1):
        touched: set[int] = set()
        events: list[RowChange] = []

        def free(name: str, start: dict[int, Row] = rows) -> list[int]:
            held = {r[name] for r in start.values()}
            return [n for n in range(10) if keyless or n not in held]

        for _ in range(draw(st.integers(0, 14))):
            untouched = sorted(set(rows) - touched)
            choice = draw(st.sampled_from(["insert", "delete", "update", "swap u", "swap id"]))
            ids, us = free("id"), free("u")
            if choice == "insert" or not untouched:
                if not ids or not us:
                    continue
                serial += 1
                new = {"id": draw(st.sampled_from(ids)), "u": draw(st.sampled_from(us)), "v": "n"}
                rows[serial] = new
                touched.add(serial)
                events.append(RowChange(ts, "d", "t", Op.INSERT, columns, new, None))
            elif choice == "delete":
                rid = draw(st.sampled_from(untouched))
                touched.add(rid)
                events.append(RowChange(ts, "d", "t", Op.DELETE, columns, None, rows.pop(rid)))
            elif choice == "update":
                rid = draw(st.sampled_from(untouched))
                old = rows[rid]
                new = {
                    "id": draw(st.sampled_from([old["id"], *ids])),
                    "u": draw(st.sampled_from([old["u"], *us])),
                    "v": draw(st.sampled_from(["a", "b"])),
                }
                rows[rid] = new
                touched.add(rid)
                if new["id"] != old["id"] and draw(st.booleans()):
                    # TiCDC's split of a key-changing update.
                    events.append(RowChange(ts, "d", "t", Op.DELETE, columns, None, old))
                    events.append(RowChange(ts, "d", "t", Op.INSERT, columns, new, None))
                else:
                    events.append(RowChange(ts, "d", "t", Op.UPDATE, columns, new, old))
            elif len(untouched) >= 2:
                name = "u" if choice == "swap u" else "id"
                pair = st.lists(st.sampled_from(untouched), min_size=2, max_size=2, unique=True)
                a, b = draw(pair)
                old_a, old_b = rows[a], rows[b]
                rows[a], rows[b] = {**old_a, name: old_b[name]}, {**old_b, name: old_a[name]}
                touched |= {a, b}
                events.append(RowChange(ts, "d", "t", Op.UPDATE, columns, rows[a], old_a))
                events.append(RowChange(ts, "d", "t", Op.UPDATE, columns, rows[b], old_b))
        changes += draw(st.permutations(events))
    return list(rows.values()), changes


def _key(row: Row, keyless: bool) -> Key:
    return (row["id"], row["u"], row["v"]) if keyless else (row["id"],)


class Downstream:
    """A table as the merge changes it: by key (a unique value may not be duplicated), or a
    multiset of images for a key-less table (never more copies deleted than it holds)."""

    def __init__(self, keyless: bool) -> None:
        self.keyless = keyless
        self.rows: dict[Key, Row] = {}
        self.copies: dict[Key, int] = {}

    def delete(self, key: Key, copies: int) -> None:
        if self.keyless:
            assert self.copies.get(key, 0) >= copies, f"deletes {key} the table does not hold"
            self.copies[key] -= copies
        else:
            self.rows.pop(key, None)

    def upsert(self, key: Key, row: Row, copies: int) -> None:
        if self.keyless:
            self.copies[key] = self.copies.get(key, 0) + copies
            return
        clash = [k for k, r in self.rows.items() if r["u"] == row["u"] and k != key]
        assert not clash, f"upsert {row} collides on the unique key with {clash}"
        self.rows[key] = row

    def apply(self, steps: list[PlannedBatch]) -> None:
        """Whole batches: deletes, then upserts. Parts: each part's deletes at once, its images
        staged; the staged images upserted after the last part's deletes."""
        staged: list[tuple[Key, Row, int]] = []
        for step in steps:
            for plan in step.plans:
                for key in plan.deletes:
                    self.delete(key, plan.copies.get(key, 1))
                for key, row in plan.upserts.items():
                    staged.append((key, row, plan.copies.get(key, 1)))
            if not step.continued:
                for key, row, copies in staged:
                    self.upsert(key, row, copies)
                staged = []

    def table(self) -> list[Key]:
        if self.keyless:
            return sorted(key for key, n in self.copies.items() for _ in range(n))
        return sorted(self.rows)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), keyless=st.booleans())
def test_a_stream_applied_in_parts_of_any_size_equals_it_applied_whole(
    data: st.DataObject, keyless: bool
) -> None:
    upstream, changes = data.draw(transactions(keyless))
    batch_rows = data.draw(st.integers(1, 40), "batch_rows")
    chunk_rows = data.draw(st.integers(1, 20), "chunk_rows")
    # Past the last commit ts, as TiCDC's resolved events come; or at it.
    resolved = data.draw(st.sampled_from([5, 1_000]), "resolved")
    whole = list(planned_batches(iter(changes), 10**6, resolved))
    parts = list(planned_batches(iter(changes), batch_rows, resolved, 1, "", chunk_rows))
    assert all(isinstance(step, PlannedBatch) for step in [*whole, *parts])
    expected = sorted(_key(row, keyless) for row in upstream)
    for steps in (whole, parts):
        downstream = Downstream(keyless)
        downstream.apply(steps)  # type: ignore[arg-type]
        assert downstream.table() == expected
    # Every part holds one commit ts, no more than a chunk of it; the last commits.
    for step in parts:
        assert isinstance(step, PlannedBatch)
        if step.split:
            assert step.changes <= chunk_rows
            # Every part, the last included, carries its transaction's ts: what the applier
            # holds the parts of one downstream transaction to.
            assert {ts for plan in step.plans for ts in plan.commit_ts.values()} == {step.upto}
    assert not parts[-1].continued  # type: ignore[union-attr]
    # The checkpoint reaches the resolved ts, past a transaction in parts that ends the round.
    assert parts[-1].upto == resolved  # type: ignore[union-attr]
    if not keyless:
        final = {(row["id"],): row for row in upstream}
        downstream = Downstream(keyless)
        downstream.apply(parts)  # type: ignore[arg-type]
        assert downstream.rows == final


def test_a_transaction_larger_than_a_chunk_comes_in_parts_after_what_came_before() -> None:
    def insert(ts: int, n: int) -> RowChange:
        return RowChange(ts, "d", "t", Op.INSERT, KEYED, {"id": n, "u": n, "v": ""}, None)

    changes = [insert(1, 0), insert(2, 1), *(insert(3, n) for n in range(2, 9)), insert(4, 9)]
    steps = list(planned_batches(iter(changes), 100, 10, 100, "", chunk_rows=3))
    shape = [(s.changes, s.upto, s.part, s.continued) for s in steps]  # type: ignore[union-attr]
    # ts 1 and 2 commit on their own; ts 3's seven changes in parts of 3, 3, 1; ts 4 after.
    assert shape == [
        (2, 2, 0, False),
        (3, 3, 0, True),
        (3, 3, 1, True),
        (1, 3, 2, False),
        (1, 10, 0, False),
    ]


def test_a_transaction_in_parts_commits_at_its_ts_before_a_ddl_or_the_round_end() -> None:
    def insert(ts: int, n: int) -> RowChange:
        return RowChange(ts, "d", "t", Op.INSERT, KEYED, {"id": n, "u": n, "v": ""}, None)

    changes = [insert(1, 0), *(insert(3, n) for n in range(1, 8))]
    # The resolved ts past the big transaction, as TiCDC's resolved events always come.
    steps = list(planned_batches(iter(changes), 100, 10, 100, "", chunk_rows=3))
    shape = [(s.changes, s.upto, s.part, s.continued) for s in steps]  # type: ignore[union-attr]
    assert shape == [
        (1, 1, 0, False),
        (3, 3, 0, True),
        (3, 3, 1, True),
        (1, 3, 2, False),
        (0, 10, 0, False),
    ]
    # At the resolved ts itself, the last part ends the round.
    steps = list(planned_batches(iter(changes), 100, 3, 100, "", chunk_rows=3))
    assert [(s.upto, s.continued) for s in steps] == [  # type: ignore[union-attr]
        (1, False),
        (3, True),
        (3, True),
        (3, False),
    ]
    # A DDL right after it: the checkpoint moves on to the DDL's ts alone, then the DDL.
    ddl = DDLEvent(5, "d", "t", "TRUNCATE TABLE t", 11)
    steps = list(planned_batches(iter([*changes, Barrier(ddl)]), 100, 10, 100, "", chunk_rows=3))
    assert [
        (s.changes, s.upto, s.continued) if isinstance(s, PlannedBatch) else s for s in steps
    ] == [
        (1, 1, False),
        (3, 3, True),
        (3, 3, True),
        (1, 3, False),
        (0, 5, False),
        ddl,
        (0, 10, False),
    ]
