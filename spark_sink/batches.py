"""Released changes cut into planned batches: at every DDL barrier, and by size between
transactions only (a reader never sees half of one).

One upstream transaction larger than ``TICDC_SINK_CHUNK_ROWS`` is cut inside into parts of that
many changes (fewer once a part's values pass ``TICDC_SINK_CHUNK_BYTES``: wide rows), each planned
on its own, so the sink never holds more of it: the parts apply in ONE
downstream transaction, which commits with the last part and the checkpoint (see
:mod:`spark_sink.apply_batch`). What came before such a transaction in the batch is cut off as a
batch of its own first, so every part holds changes of one commit ts only.

A round's batches start small and double up to the configured size: the downstream starts on
the first batch while the read-ahead thread reads and plans the next, so one round's reading
overlaps its applying instead of preceding it (a round of one big batch overlaps nothing)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from core.model import DDLEvent, RowChange
from core.staging import Barrier
from spark_sink.plan import TablePlan, Unplannable, plan_batch
from spark_sink.stage_timing import PLAN, RELEASE, StageClock

# A round's first batch: big enough that a batch's fixed cost (a transaction, the checkpoint,
# emptying the staging tables) stays small per row, small enough to start at once.
FIRST_BATCH_ROWS = 5_000
# Each next batch of a round may be this many times the one before, up to the configured size.
BATCH_GROWTH = 2
# What a value other than text or bytes counts towards a part's bytes: a number, a date.
SCALAR_BYTES = 8
# A part's bytes are estimated from every this-many-th change of it (the last of each run of
# them stands for the run): measuring every change would cost planning a good share of its time.
BYTES_SAMPLE = 16
_VARIABLE = (str, bytes)


@dataclass(frozen=True, slots=True)
class PlannedBatch:
    """A batch's final actions per table, and the resolved ts its commit advances to."""

    plans: list[TablePlan]
    changes: int
    upto: int
    # Parts of one transaction larger than a chunk: the part's place in it (0 the first), and
    # whether parts follow (the downstream transaction then stays open: no checkpoint yet).
    part: int = 0
    continued: bool = False
    # The changes left out of ``plans`` as unplannable, each with its rule: the sink
    # dead-letters them before it applies the batch.
    unplannable: tuple[Unplannable, ...] = ()

    @property
    def joins(self) -> bool:
        """Whether this batch goes into the downstream transaction a part before it opened."""
        return self.part > 0

    @property
    def split(self) -> bool:
        """Whether this batch is a part of one transaction larger than a chunk."""
        return self.part > 0 or self.continued


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


def change_bytes(change: RowChange) -> int:
    """What ``change`` holds, as a part's bytes count it: its images' text and bytes values by
    their length, any other value as :data:`SCALAR_BYTES`."""
    size = 0
    for image in (change.new, change.old):
        if image:
            for value in image.values():
                size += len(value) if isinstance(value, _VARIABLE) else SCALAR_BYTES
    return size


def planned_batches(
    released: Iterable[RowChange | Barrier],
    batch_rows: int,
    resolved: int,
    first: int = FIRST_BATCH_ROWS,
    pipeline: str = "",
    chunk_rows: int | None = None,
    chunk_bytes: int | None = None,
    batch_tables: int | None = None,
) -> Iterator[PlannedBatch | DDLEvent]:
    """``released`` (commit-ts order, up to ``resolved``) as planned batches of at most about
    ``batch_rows`` changes (the first ones smaller, from ``first``: see the module notes), each
    DDL in its place between them; the last batch ends at ``resolved`` (it may be empty: the
    checkpoint still moves). A batch also ends, between transactions, once its changes reach
    ``batch_tables`` tables. A transaction of more than ``chunk_rows`` changes comes in parts
    of ``chunk_rows``, or fewer once a part's values pass ``chunk_bytes`` (:func:`change_bytes`
    of every :data:`BYTES_SAMPLE`-th change, times that;
    :attr:`PlannedBatch.continued` on every part but its last). The time
    spent releasing and planning is counted under ``pipeline``
    (``ticdc_sink_stage_seconds_total``)."""
    chunk = chunk_rows or sys.maxsize
    # The current part's bytes as sampled so far, whether they passed ``chunk_bytes``, and the
    # changes until the next sample (0: bytes not counted). Plain ints and a flag: per row.
    sample = BYTES_SAMPLE if chunk_bytes else 0
    limit = chunk_bytes or 0
    part_bytes, full, countdown = 0, False, sample
    sizes = batch_sizes(batch_rows, first)
    size = next(sizes)
    most_tables = batch_tables or sys.maxsize
    batch: list[RowChange] = []
    # The tables of the batch's changes so far, and the last change's (changes come in runs
    # of one table: a set insert per run, not per change).
    tables: set[tuple[str, str]] = set()
    last_table: tuple[str, str] | None = None
    # Where the current commit ts starts in ``batch``, and the parts of it handed over so far.
    start = 0
    part = 0
    current: int | None = None
    # Per batch, not per row: the time between two cuts is the release's, the cut the plan's.
    clock = StageClock(pipeline)
    for item in released:
        if isinstance(item, Barrier):
            yield from _ending(batch, item.ddl.commit_ts, clock, part, current)
            clock.restart()
            batch, start, part, current = [], 0, 0, None
            tables, last_table = set(), None
            yield item.ddl
            clock.restart()
            continue
        ts = item.commit_ts
        if ts != current:
            if part:
                # The last part of a transaction larger than a chunk: it commits.
                yield _planned(batch, current or ts, clock, part)
                clock.restart()
                batch, part = [], 0
                tables, last_table = set(), None
                size = next(sizes)
            elif len(batch) >= size or len(tables) >= most_tables:
                yield _planned(batch, batch[-1].commit_ts, clock)
                clock.restart()
                batch = []
                tables, last_table = set(), None
                size = next(sizes)
            start, current = len(batch), ts
            part_bytes, full, countdown = 0, False, sample
        elif full or len(batch) - start >= chunk:
            if start:
                # What came before the big transaction commits on its own, whole.
                yield _planned(batch[:start], batch[start - 1].commit_ts, clock)
                clock.restart()
                batch, start = batch[start:], 0
            yield _planned(batch, ts, clock, part, continued=True)
            clock.restart()
            batch, part = [], part + 1
            part_bytes, full, countdown = 0, False, sample
        batch.append(item)
        if (item.schema, item.table) != last_table:
            last_table = (item.schema, item.table)
            tables.add(last_table)
        if countdown:
            countdown -= 1
            if not countdown:
                countdown = sample
                part_bytes += change_bytes(item) * sample
                full = part_bytes >= limit
    yield from _ending(batch, resolved, clock, part, current)


def _ending(
    batch: list[RowChange], upto: int, clock: StageClock, part: int, current: int | None
) -> Iterator[PlannedBatch]:
    """The batch that ends at ``upto`` (a DDL's ts, the round's resolved ts). The last part of
    a transaction larger than a chunk commits at its transaction's ts, the ts every part of it
    carries (the applier holds the parts of one downstream transaction to it): an empty batch
    then takes the checkpoint on to ``upto``."""
    if part and current is not None and current != upto:
        yield _planned(batch, current, clock, part)
        clock.restart()
        batch, part = [], 0
    yield _planned(batch, upto, clock, part)


def _planned(
    batch: list[RowChange], upto: int, clock: StageClock, part: int = 0, continued: bool = False
) -> PlannedBatch:
    clock.lap(RELEASE)
    unplannable: list[Unplannable] = []
    plans = plan_batch(batch, unplannable)
    planned = PlannedBatch(plans, len(batch), upto, part, continued, tuple(unplannable))
    clock.lap(PLAN)
    return planned
