"""Released changes cut into planned batches: at every DDL barrier, and by size between
transactions only (a reader never sees half of one).

A round's batches start small and double up to the configured size: the downstream starts on
the first batch while the read-ahead thread reads and plans the next, so one round's reading
overlaps its applying instead of preceding it (a round of one big batch overlaps nothing)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from spark_sink.plan import TablePlan, plan_batch
from streams.model import DDLEvent, RowChange
from streams.staging import Barrier

# A round's first batch: big enough that a batch's fixed cost (~3 ms: a transaction, the
# checkpoint, emptying the staging tables) stays small per row, small enough to start at once.
FIRST_BATCH_ROWS = 5_000
# Each next batch of a round may be this many times the one before, up to the configured size.
BATCH_GROWTH = 2


@dataclass(frozen=True, slots=True)
class PlannedBatch:
    """A batch's final actions per table, and the resolved ts its commit advances to."""

    plans: list[TablePlan]
    changes: int
    upto: int


def batch_sizes(batch_rows: int, first: int = FIRST_BATCH_ROWS) -> Iterator[int]:
    """The size at which each batch of a round is cut: ``first``, doubling, then ``batch_rows``."""
    size = max(1, min(first, batch_rows))
    while True:
        yield size
        size = min(size * BATCH_GROWTH, batch_rows)


def planned_batches(
    released: Iterable[RowChange | Barrier],
    batch_rows: int,
    resolved: int,
    first: int = FIRST_BATCH_ROWS,
) -> Iterator[PlannedBatch | DDLEvent]:
    """``released`` (commit-ts order, up to ``resolved``) as planned batches of at most about
    ``batch_rows`` changes (the first ones smaller, from ``first``: see the module notes), each
    DDL in its place between them; the last batch ends at ``resolved`` (it may be empty: the
    checkpoint still moves)."""
    sizes = batch_sizes(batch_rows, first)
    size = next(sizes)
    batch: list[RowChange] = []
    for item in released:
        if isinstance(item, Barrier):
            yield PlannedBatch(plan_batch(batch), len(batch), item.ddl.commit_ts)
            batch = []
            yield item.ddl
            continue
        if len(batch) >= size and item.commit_ts != batch[-1].commit_ts:
            yield PlannedBatch(plan_batch(batch), len(batch), batch[-1].commit_ts)
            batch = []
            size = next(sizes)
        batch.append(item)
    yield PlannedBatch(plan_batch(batch), len(batch), resolved)
