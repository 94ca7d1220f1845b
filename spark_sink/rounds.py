"""Rounds read ahead: a thread releases and plans the changes up to each global resolved ts (a
round) while the loop applies the round before, and trims each round once it is applied.

The thread hands over a round's steps (planned batches and DDLs), then the round's end
(:class:`RoundEnd`). At that end the two meet (:class:`RoundGate`): the loop says the round is
applied (its checkpoint committed); the thread reads on at once when a new resolved ts is there
as the round's last step is handed over, else once the round is applied, and trims the applied
round off the loop's thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

from config.settings import Settings
from core.model import DDLEvent
from core.staging import Staging
from spark_sink.batches import FIRST_BATCH_ROWS, PlannedBatch, next_batch_rows, planned_batches
from spark_sink.read_ahead import read_ahead


@dataclass(frozen=True, slots=True)
class RoundEnd:
    """Every change of a round, up to ``resolved``, has been handed over before this."""

    resolved: int


class RoundGate:
    """Between the loop and the read-ahead thread at a round's end: the loop says the round is
    applied (its checkpoint committed); the thread decides whether to read on, at once when a
    new resolved ts is there as the round's last step is handed over, else once the round is
    applied (a resolved ts that moved meanwhile is read too); the loop can stop it instead."""

    def __init__(self) -> None:
        self._applied = threading.Event()
        self._decided = threading.Event()
        # The resolved ts of the last round the loop said is applied: the loop may take a round's
        # end while batches on other connections still commit (it waits for them before it
        # says the round is applied), so its taking the end is no proof of the commit.
        self._committed = 0
        self._stopped = False
        self._ended = False
        # An applied round's resolved ts the thread has not trimmed yet (it reads on first).
        self.untrimmed: int | None = None

    def applied(self, resolved: int) -> None:
        """The round up to ``resolved`` is applied: wait for the thread's decision (it has
        trimmed the round when it reads no further, and trims it itself while the next round
        applies)."""
        self._committed = max(self._committed, resolved)
        self._applied.set()
        self._decided.wait()
        if not self._ended:
            self._decided.clear()
        # Set for a thread that decided before the round was applied, and so never waited.
        self._applied.clear()

    def decided(self) -> None:
        self._decided.set()

    def ended(self) -> None:
        """The thread reads no more (it ended, failed or was closed): a loop at a round's end
        waits for no decision (the failure, if any, is the thread's next step)."""
        self._ended = True
        self._decided.set()

    def trimmable(self, resolved: int) -> bool:
        """Whether the round up to ``resolved`` is applied: it may be trimmed now."""
        return self._committed >= resolved

    def stop(self) -> None:
        self._stopped = True
        self._applied.set()

    def wait(self) -> bool:
        """Whether to read on: blocks until the round is applied or the reading stopped."""
        self._applied.wait()
        self._applied.clear()
        return not self._stopped


# The steps as the read-ahead thread hands them over: a round's, its end, the next round's.
Steps = Generator[PlannedBatch | DDLEvent | RoundEnd, None, None]


@dataclass(frozen=True, slots=True)
class Rounds:
    """Rounds read ahead by a thread, and the gate it waits at between them."""

    steps: Steps
    gate: RoundGate

    def close(self) -> None:
        self.gate.stop()
        self.steps.close()


@dataclass(frozen=True, slots=True)
class Ahead:
    """Rounds read ahead past a round's end: the next one is released after ``after``."""

    after: int
    rounds: Rounds


# How far the sink may apply now (spark_sink/topic_gate.py; the global resolved ts by default).
ResolvedTs = Callable[[], int | None]


def read_rounds(
    settings: Settings,
    staging: Staging,
    after: int,
    resolved: int,
    batch_rows: int,
    resolved_ts: ResolvedTs | None = None,
) -> Rounds:
    """Rounds from the one of the changes after ``after`` up to ``resolved``, read and planned
    by a thread while the loop applies (the apply mostly waits on the downstream): the batches
    being applied, one planned, one being read; each next round up to ``resolved_ts()``. One
    planned, however many connections apply: with more queued, the thread could hand over a
    round's end before the loop took the one before, and the gate between them (one decision a
    round) would lose its signal."""
    gate = RoundGate()
    planned = planned_rounds(settings, staging, after, resolved, batch_rows, gate, resolved_ts)
    steps = read_ahead(planned, limit=1, chunk=1, pipeline=settings.group)
    return Rounds(steps, gate)


def planned_rounds(
    settings: Settings,
    staging: Staging,
    after: int,
    resolved: int,
    batch_rows: int,
    gate: RoundGate,
    resolved_ts: ResolvedTs | None = None,
) -> Iterator[PlannedBatch | DDLEvent | RoundEnd]:
    """Planned rounds, each up to the global resolved ts when it starts, then its end; the
    rounds go on while a new resolved ts is there once a round's end is handed over, or
    else once the round is applied. A round read on at its predecessor's end starts with
    batches as big as that one's biggest, one read after a wait (the sink caught up) small
    again. Each applied round is trimmed here, off the loop's thread."""
    try:
        pipeline = settings.group
        configured = settings.sink.batch_rows
        next_resolved = staging.global_resolved_ts if resolved_ts is None else resolved_ts
        # The round before: trimmed here once the loop says it is applied (while the loop applies
        # this one), never before its checkpoint committed; one whose word comes only after the
        # next round's last step is trimmed with that round.
        applied: int | None = None
        first = FIRST_BATCH_ROWS
        while True:
            released = staging.release(after, resolved)
            largest = 0
            steps = planned_batches(
                released,
                batch_rows,
                resolved,
                first,
                pipeline,
                settings.sink.chunk_rows,
                settings.sink.chunk_bytes,
                settings.sink.batch_tables,
            )
            for step in steps:
                yield step
                if applied is not None and gate.trimmable(applied):
                    staging.trim(applied)
                    gate.untrimmed = applied = None
                if isinstance(step, PlannedBatch):
                    largest = max(largest, step.changes)
            yield RoundEnd(resolved)
            first = FIRST_BATCH_ROWS
            # Read on while the loop applies this round's last batch when a new resolved ts
            # is there already: the next round's first batch is then planned by the time the
            # loop wants it, and need not start small (the sink is behind: its batches' fixed
            # costs count, not how soon the first one starts). Trimmed once the loop says this
            # round is applied, at a step of the next one.
            upto = next_resolved()
            if upto is not None and upto > resolved:
                gate.untrimmed = applied = resolved
                gate.decided()
                first = max(FIRST_BATCH_ROWS, largest)
            else:
                if not gate.wait():
                    return
                try:
                    upto = next_resolved()
                    if upto is None or upto <= resolved:
                        staging.trim(resolved)
                        return
                    gate.untrimmed = applied = resolved
                finally:
                    gate.decided()
            after, resolved = resolved, upto
            # As the loop sizes the round after one that fitted; one that did not drops this.
            batch_rows = next_batch_rows(batch_rows, configured, False)
    finally:
        # Also when reading the next resolved ts fails after a round's end was handed over:
        # the loop at that end must not wait for a decision that never comes.
        gate.ended()
