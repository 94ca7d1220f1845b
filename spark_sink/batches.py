"""Released changes cut into planned batches: at every DDL barrier, and by size between
transactions only (a reader never sees half of one)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from spark_sink.plan import TablePlan, plan_batch
from streams.model import DDLEvent, RowChange
from streams.staging import Barrier


@dataclass(frozen=True, slots=True)
class PlannedBatch:
    """A batch's final actions per table, and the resolved ts its commit advances to."""

    plans: list[TablePlan]
    changes: int
    upto: int


def planned_batches(
    released: Iterable[RowChange | Barrier], batch_rows: int, resolved: int
) -> Iterator[PlannedBatch | DDLEvent]:
    """``released`` (commit-ts order, up to ``resolved``) as planned batches of about
    ``batch_rows`` changes, each DDL in its place between them; the last batch ends at
    ``resolved`` (it may be empty: the checkpoint still moves)."""
    batch: list[RowChange] = []
    for item in released:
        if isinstance(item, Barrier):
            yield PlannedBatch(plan_batch(batch), len(batch), item.ddl.commit_ts)
            batch = []
            yield item.ddl
            continue
        if len(batch) >= batch_rows and item.commit_ts != batch[-1].commit_ts:
            yield PlannedBatch(plan_batch(batch), len(batch), batch[-1].commit_ts)
            batch = []
        batch.append(item)
    yield PlannedBatch(plan_batch(batch), len(batch), resolved)
