"""Released changes cut into planned batches: at every DDL barrier, and by size between
transactions only (a reader never sees half of one).

A round's batches start small and double up to the configured size: the downstream starts on
the first batch while the read-ahead thread reads and plans the next, so one round's reading
overlaps its applying instead of preceding it (a round of one big batch overlaps nothing)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from core.model import DDLEvent, RowChange
from core.staging import Barrier
from spark_sink.plan import TablePlan, plan_batch
from spark_sink.stage_timing import PLAN, RELEASE, StageClock

# A round's first batch: big enough that a batch's fixed cost (a transaction, the checkpoint,
# emptying the staging tables) stays small per row, small enough to start at once.
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


def next_batch_rows(current: int, configured: int, too_large: bool) -> int:
    """The batch size of the next round: half after a batch outgrew the downstream's
    transaction limit, back up by doubling (never past ``configured``) after a round that
    fitted. Batches are cut between upstream transactions only, so each stays atomic with its
    checkpoint however small."""
    if too_large:
        return max(1, current // 2)
    return min(configured, current * 2)


def planned_batches(
    released: Iterable[RowChange | Barrier],
    batch_rows: int,
    resolved: int,
    first: int = FIRST_BATCH_ROWS,
    pipeline: str = "",
) -> Iterator[PlannedBatch | DDLEvent]:
    """``released`` (commit-ts order, up to ``resolved``) as planned batches of at most about
    ``batch_rows`` changes (the first ones smaller, from ``first``: see the module notes), each
    DDL in its place between them; the last batch ends at ``resolved`` (it may be empty: the
    checkpoint still moves). The time spent releasing and planning is counted under ``pipeline``
    (``ticdc_sink_stage_seconds_total``)."""
    sizes = batch_sizes(batch_rows, first)
    size = next(sizes)
    batch: list[RowChange] = []
    # Per batch, not per row: the time between two cuts is the release's, the cut the plan's.
    clock = StageClock(pipeline)
    for item in released:
        if isinstance(item, Barrier):
            yield _planned(batch, item.ddl.commit_ts, clock)
            clock.restart()
            batch = []
            yield item.ddl
            clock.restart()
            continue
        if len(batch) >= size and item.commit_ts != batch[-1].commit_ts:
            yield _planned(batch, batch[-1].commit_ts, clock)
            clock.restart()
            batch = []
            size = next(sizes)
        batch.append(item)
    yield _planned(batch, resolved, clock)


def _planned(batch: list[RowChange], upto: int, clock: StageClock) -> PlannedBatch:
    clock.lap(RELEASE)
    planned = PlannedBatch(plan_batch(batch), len(batch), upto)
    clock.lap(PLAN)
    return planned
