"""Cutting released changes into planned batches: order, DDL places, transaction boundaries."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from core.model import DDLEvent, Op, RowChange, column_type
from core.staging import Barrier, ReleaseSource
from spark_sink.batches import (
    BYTES_SAMPLE,
    PlannedBatch,
    change_bytes,
    next_batch_rows,
    planned_batches,
)

TS = 449_000_000_000_000_000
COLUMNS = {"id": column_type(3, 11)}  # the primary key: each row its own final action


@st.composite
def released(draw: st.DrawFn) -> list[RowChange | Barrier]:
    """Rows in commit-ts order (several to a transaction) with DDL barriers between them."""
    items: list[RowChange | Barrier] = []
    ts = TS
    for step in draw(st.lists(st.sampled_from(["row", "same ts", "ddl"]), max_size=60)):
        if step != "same ts" or not items:
            ts += draw(st.integers(1, 3))
        if step == "ddl":
            items.append(Barrier(DDLEvent(ts, "db", "t", "ALTER TABLE t ADD c INT", 5)))
        else:
            image = {"id": len(items)}
            items.append(RowChange(ts, "db", "t", Op.INSERT, COLUMNS, image, None))
    return items


def _ids(batch: PlannedBatch) -> list[int]:
    return [int(image["id"]) for plan in batch.plans for image in plan.upserts.values()]  # type: ignore[arg-type]


@given(items=released(), batch_rows=st.integers(1, 8), first=st.integers(1, 8))
def test_batches_keep_order_ddl_places_and_whole_transactions(
    items: list[RowChange | Barrier], batch_rows: int, first: int
) -> None:
    resolved = TS + 1_000
    steps = list(planned_batches(iter(items), batch_rows, resolved, first))
    # A round's size cuts start at ``first`` and double up to ``batch_rows``.
    cuts = 0
    # Everything in its order, each DDL where its barrier was.
    flat: list[object] = []
    for step in steps:
        flat += _ids(step) if isinstance(step, PlannedBatch) else [step]
    assert flat == [i.ddl if isinstance(i, Barrier) else int(i.new["id"]) for i in items]  # type: ignore[index, arg-type]
    ts_of = {int(i.new["id"]): i.commit_ts for i in items if isinstance(i, RowChange)}  # type: ignore[index, arg-type]
    assert isinstance(steps[-1], PlannedBatch) and steps[-1].upto == resolved
    for step, after in itertools.pairwise(steps):
        if not isinstance(step, PlannedBatch):
            continue
        ids = _ids(step)
        assert step.changes == len(ids)
        if isinstance(after, DDLEvent):
            assert step.upto == after.commit_ts
            continue
        # Cut by size: only between transactions, and no more than one transaction past the size.
        assert isinstance(after, PlannedBatch)
        last = ts_of[ids[-1]]
        assert step.upto == last
        assert all(ts_of[i] > last for i in _ids(after))
        size = min(first * 2**cuts, batch_rows)
        cuts += 1
        assert len(ids) >= size
        assert len([i for i in ids if ts_of[i] != last]) < size


@st.composite
def over_tables(draw: st.DrawFn) -> list[RowChange | Barrier]:
    """Transactions of rows over a few tables, in commit-ts order."""
    items: list[RowChange | Barrier] = []
    ts = TS
    for size in draw(st.lists(st.integers(1, 4), max_size=30)):
        ts += 1
        for _ in range(size):
            table = f"t{draw(st.integers(0, 6))}"
            image = {"id": len(items)}
            items.append(RowChange(ts, "db", table, Op.INSERT, COLUMNS, image, None))
    return items


def _tables(batch: PlannedBatch) -> set[str]:
    return {plan.table for plan in batch.plans}


@given(items=over_tables(), batch_tables=st.integers(1, 5))
def test_a_batch_ends_between_transactions_once_it_reaches_the_table_limit(
    items: list[RowChange | Barrier], batch_tables: int
) -> None:
    steps = list(planned_batches(iter(items), 10**6, TS + 1_000, 10**6, batch_tables=batch_tables))
    batches = [s for s in steps if isinstance(s, PlannedBatch)]
    # Every change once, in its order from batch to batch (a batch's plans group by table).
    assert [i for b in batches for i in sorted(_ids(b))] == list(range(len(items)))
    ts_of = {int(i.new["id"]): i.commit_ts for i in items if isinstance(i, RowChange)}  # type: ignore[index, arg-type]
    for batch, after in itertools.pairwise(batches):
        ids = _ids(batch)
        last = ts_of[ids[-1]]
        # Whole transactions only.
        assert all(ts_of[i] > last for i in _ids(after))
        # Cut at the first transaction end where the batch's tables reached the limit.
        assert len(_tables(batch)) >= batch_tables
        tables = {
            item.table
            for item in items
            if ts_of[int(item.new["id"])] < last and int(item.new["id"]) in ids
        }  # type: ignore[union-attr, index, arg-type]
        assert len(tables) < batch_tables


def test_a_round_starts_small_and_grows_to_the_batch_size() -> None:
    # One row per transaction: each batch is cut at exactly its size.
    items: list[RowChange | Barrier] = [
        RowChange(TS + i, "db", "t", Op.INSERT, COLUMNS, {"id": i}, None) for i in range(100)
    ]
    steps = list(planned_batches(iter(items), 20, TS + 1_000, first=3))
    assert [s.changes for s in steps if isinstance(s, PlannedBatch)] == [3, 6, 12, 20, 20, 20, 19]


def _stage_seconds(stage: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "ticdc_sink_stage_seconds_total", {"pipeline": "timed", "stage": stage}
        )
        or 0.0
    )


def test_the_time_between_cuts_is_charged_to_the_release_and_the_cut_to_the_plan() -> None:
    def slow_release() -> Iterator[RowChange | Barrier]:
        for i in range(4):
            time.sleep(0.05)  # a Redis page being read
            yield RowChange(TS + i, "db", "t", Op.INSERT, COLUMNS, {"id": i}, None)

    release, plan = _stage_seconds("release"), _stage_seconds("plan")
    steps = planned_batches(slow_release(), 2, TS + 10, first=2, pipeline="timed")
    next(steps)
    time.sleep(0.3)  # the consumer applying: charged to neither
    rest = list(steps)
    assert [s.changes for s in rest if isinstance(s, PlannedBatch)] == [2]
    assert 0.2 <= _stage_seconds("release") - release < 0.45
    assert 0 < _stage_seconds("plan") - plan < 0.1


class MemoryReleases:
    """An in-memory :class:`~core.staging.ReleaseSource`: staged changes, released as Redis
    releases them (``after < commit_ts <= upto``, in commit-ts order)."""

    def __init__(self, items: list[RowChange | Barrier], resolved: int) -> None:
        self.items = items
        self.resolved = resolved

    def global_resolved_ts(self) -> int | None:
        return self.resolved

    def has_ddl_at(self, ts: int) -> bool:
        return any(isinstance(i, Barrier) and i.ddl.commit_ts == ts for i in self.items)

    def release(self, after: int, upto: int) -> Iterator[RowChange | Barrier]:
        for item in self.items:
            ts = item.ddl.commit_ts if isinstance(item, Barrier) else item.commit_ts
            if after < ts <= upto:
                yield item


@given(items=released(), cut=st.integers(0, 199), batch_rows=st.integers(1, 8))
def test_batches_planned_from_a_release_source_stay_within_its_resolved_ts(
    items: list[RowChange | Barrier], cut: int, batch_rows: int
) -> None:
    # The sink plans from (checkpoint, global resolved ts]: nothing at or before the checkpoint,
    # nothing past the resolved ts, even with more staged beyond it.
    source: ReleaseSource = MemoryReleases(items, TS + 100)
    after = TS + cut // 2
    resolved = source.global_resolved_ts()
    assert resolved is not None
    steps = list(planned_batches(source.release(after, resolved), batch_rows, resolved))
    planned = [s.commit_ts if isinstance(s, DDLEvent) else s.upto for s in steps]
    assert all(after < ts <= resolved for ts in planned)
    ddls = [s for s in steps if isinstance(s, DDLEvent)]
    assert all(source.has_ddl_at(ddl.commit_ts) for ddl in ddls)
    expected = [i for i in items if after < (i.ddl if isinstance(i, Barrier) else i).commit_ts]
    expected = [
        i for i in expected if (i.ddl if isinstance(i, Barrier) else i).commit_ts <= resolved
    ]
    assert sum(s.changes for s in steps if isinstance(s, PlannedBatch)) == sum(
        isinstance(i, RowChange) for i in expected
    )
    assert [d.commit_ts for d in ddls] == [
        i.ddl.commit_ts for i in expected if isinstance(i, Barrier)
    ]


def test_batches_halve_when_too_large_and_grow_back() -> None:
    configured = 200_000
    sizes = [configured]
    for _ in range(3):
        sizes.append(next_batch_rows(sizes[-1], configured, too_large=True))
    assert sizes == [200_000, 100_000, 50_000, 25_000]
    assert next_batch_rows(1, configured, too_large=True) == 1
    grown = [next_batch_rows(25_000, configured, too_large=False)]
    while grown[-1] < configured:
        grown.append(next_batch_rows(grown[-1], configured, too_large=False))
    assert grown == [50_000, 100_000, 200_000]
    assert next_batch_rows(configured, configured, too_large=False) == configured


WIDE = {"id": column_type(3, 11), "v": column_type(15, 64)}


@given(
    widths=st.lists(st.integers(0, 300), min_size=1, max_size=200),
    chunk_rows=st.integers(1, 100),
    chunk_bytes=st.integers(1, 2_000),
)
def test_a_part_also_ends_once_its_values_pass_the_chunk_bytes(
    widths: list[int], chunk_rows: int, chunk_bytes: int
) -> None:
    rows = [
        RowChange(TS, "db", "t", Op.INSERT, WIDE, {"id": n, "v": "x" * width}, None)
        for n, width in enumerate(widths)
    ]
    steps = list(planned_batches(iter(rows), 10**6, TS + 1, 10**6, "", chunk_rows, chunk_bytes))
    batches = [step for step in steps if isinstance(step, PlannedBatch)]
    # Every change once, in order, one commit ts to a part.
    assert [i for batch in batches for i in sorted(_ids(batch))] == list(range(len(rows)))
    start = 0
    for batch in batches:
        part = rows[start : start + batch.changes]
        start += batch.changes
        # Every BYTES_SAMPLE-th change of a part stands for the run it ends.
        sizes = [
            change_bytes(change) * BYTES_SAMPLE if n % BYTES_SAMPLE == 0 else 0
            for n, change in enumerate(part, 1)
        ]
        assert batch.changes <= chunk_rows
        # A part ends at the first change that takes its values past the bytes, no later.
        assert sum(sizes[:-1]) < chunk_bytes
        if batch.continued:
            assert batch.changes == chunk_rows or sum(sizes) >= chunk_bytes
    assert sum(batch.split for batch in batches) != 1


def test_rows_of_1_mb_come_in_parts_of_64_by_default_bytes() -> None:
    value = "x" * (1 << 20)
    rows = [
        RowChange(TS, "db", "t", Op.INSERT, WIDE, {"id": n, "v": value}, None) for n in range(200)
    ]
    steps = planned_batches(iter(rows), 200_000, TS, 200_000, "", 50_000, 64 << 20)
    assert [step.changes for step in steps if isinstance(step, PlannedBatch)] == [64, 64, 64, 8]
