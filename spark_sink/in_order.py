"""Batches applied on several downstream connections at once, committed in upstream order.

Each batch of a round runs on a connection of its own as soon as one is free and its write set
(:mod:`spark_sink.write_set`) meets no batch still in flight; it executes everything up to its
commit, then waits for its :class:`Turn`: the batch before it committed. So commits reach the
downstream in commit-ts order, each with its own checkpoint, and a reader of the downstream only
ever sees a prefix of the upstream's transactions, as with one connection.

A batch whose attempt fails (a lost connection, a lock wait, a row refused) first rolls back
every later batch in flight (their turns are cancelled), so none of them can hold a lock it is
about to wait for; it is then retried or raised as with one connection. The batches rolled back
are read again from the checkpoint by the loop's next round (:class:`~config.errors.
BatchAbandonedError`). Nothing here knows SQL: ``run`` applies a batch on a connection's
applier and waits for its turn before it records the checkpoint.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from config.errors import BatchAbandonedError
from spark_sink.write_set import WriteSet

log = logging.getLogger("ticdc_sink.sink")
Lane = TypeVar("Lane")


class Turn:
    """A batch's place in the commit order: :meth:`wait` returns once the batch before it has
    committed, or raises :class:`BatchAbandonedError` once that one failed or this one was
    cancelled (an earlier batch's attempt failed: this one must let go of its locks now)."""

    def __init__(
        self,
        before: Turn | None,
        upto: int,
        changed: threading.Condition,
        failed: Callable[[Turn], None] | None = None,
    ) -> None:
        self.upto = upto
        self._before = before
        self._changed = changed
        self._failed = failed
        self._done = False
        self._committed = False
        self._cancelled = False
        # Whether this batch's writes into the downstream's tables are done (or it is).
        self._written = False

    def wait(self) -> None:
        """Return once the batch before has committed: this one may record its checkpoint
        and commit."""
        before = self._before
        with self._changed:
            self._changed.wait_for(lambda: self._cancelled or before is None or before._done)
            if before is not None and not before._committed:
                self._cancelled = True
            self._check()
        # Dropped: a long round must not keep every turn before this one alive.
        self._before = None

    def wait_to_write(self) -> None:
        """Return once the batch before has written the downstream's tables (it only commits
        from then on, so it never waits on a lock this one takes)."""
        before = self._before
        with self._changed:
            self._changed.wait_for(
                lambda: self._cancelled or before is None or before._written or before._done
            )
            if before is not None and before._done and not before._committed:
                self._cancelled = True
            self._check()

    def written(self) -> None:
        with self._changed:
            self._written = True
            self._changed.notify_all()

    def _check(self) -> None:
        if self._cancelled:
            raise BatchAbandonedError(
                f"the batch up to {self.upto} was rolled back: a batch before it failed; it "
                "is read again from the checkpoint"
            )

    def cancel(self) -> None:
        """Called with the condition held."""
        self._cancelled = True
        self._changed.notify_all()

    def failed(self) -> None:
        """An attempt of this batch failed: every later batch in flight is rolled back (and
        its next attempt writes anew: the batches after it wait for that)."""
        with self._changed:
            self._written = False
        if self._failed is not None:
            self._failed(self)

    def finish(self, committed: bool) -> None:
        with self._changed:
            self._committed = committed
            self._done = True
            self._changed.notify_all()


@dataclass
class _InFlight(Generic[Lane]):
    turn: Turn
    writes: WriteSet
    future: Future[int]
    lane: Lane


@dataclass
class _State(Generic[Lane]):
    in_flight: list[_InFlight[Lane]] = field(default_factory=list)
    free: list[Lane] = field(default_factory=list)


class InOrder(Generic[Lane]):
    """Batches applied over ``lanes`` (one connection's applier each), committed in the order
    :meth:`submit` was called. ``run(lane, turn)`` applies one batch and returns its rows."""

    def __init__(self, lanes: list[Lane]) -> None:
        self._lanes = lanes
        self._pool = ThreadPoolExecutor(len(lanes), thread_name_prefix="sink-apply")
        self._changed = threading.Condition()
        self._state: _State[Lane] = _State(free=list(lanes))
        self._last: Turn | None = None
        # Set by the first failed attempt: no batch is started after it until drained.
        self._broken = False
        # The resolved ts of the last batch committed.
        self.committed_upto: int | None = None
        # How the batches since the last summary went: started, the most in flight at once, and
        # how many waited for one they meet (what the connections bought, and what held them);
        # and the most in flight at once ever.
        self.started = 0
        self._round_most = 0
        self.met = 0
        self.most_in_flight = 0
        # The error of the first batch that did not commit, raised by drain().
        self._error: BaseException | None = None

    @property
    def busy(self) -> bool:
        return bool(self._state.in_flight)

    def _attempt_failed(self, turn: Turn) -> None:
        """An attempt of ``turn``'s batch failed: roll back every batch after it."""
        with self._changed:
            self._broken = True
            later = False
            for item in self._state.in_flight:
                if later:
                    item.turn.cancel()
                later = later or item.turn is turn

    def submit(self, writes: WriteSet, upto: int, run: Callable[[Lane, Turn], int]) -> None:
        """Start a batch writing ``writes`` that commits up to ``upto``, once a connection is
        free and no batch in flight meets it. After a failed attempt nothing starts until every
        batch in flight is done: this raises the first error among them (a batch rolled back
        for an earlier one's failed attempt raises :class:`BatchAbandonedError`)."""
        counted = False
        while True:
            with self._changed:
                self._reap()
                state = self._state
                if not self._broken:
                    meets = any(i.writes.meets(writes) for i in state.in_flight)
                    if meets and not counted:
                        self.met, counted = self.met + 1, True
                    if state.free and not meets:
                        lane = state.free.pop()
                        turn = Turn(self._last, upto, self._changed, self._attempt_failed)
                        self._last = turn
                        future = self._pool.submit(self._run, run, lane, turn)
                        state.in_flight.append(_InFlight(turn, writes, future, lane))
                        self.started += 1
                        self._round_most = max(self._round_most, len(state.in_flight))
                        self.most_in_flight = max(self.most_in_flight, self._round_most)
                        # Woken once the future is done, not only once the turn is.
                        future.add_done_callback(self._notify)
                        return
                    self._changed.wait()
                    continue
            self.drain()

    def summary(self) -> str | None:
        """How the batches since the last call went, in a few words (None: none started)."""
        if not self.started:
            return None
        said = (
            f"{self.started} batches over {len(self._lanes)} connections, at most "
            f"{self._round_most} at once, {self.met} waited for one writing the same rows"
        )
        self.started = self._round_most = self.met = 0
        return said

    def drain(self) -> int | None:
        """Wait for every batch in flight; raise the error of the first that did not commit
        (:class:`BatchAbandonedError` when it was only rolled back for an earlier one), else
        return how far the last commit took the checkpoint."""
        with self._changed:
            while self._state.in_flight:
                self._reap()
                if self._state.in_flight:
                    self._changed.wait()
            self._broken = False
            self._last = None
            error, self._error = self._error, None
        if error is not None:
            raise error
        return self.committed_upto

    def close(self) -> None:
        """Cancel every batch not yet committed, wait for them, and stop the threads."""
        with self._changed:
            self._broken = True
            for item in self._state.in_flight:
                item.turn.cancel()
        try:
            self.drain()
        except BaseException as error:
            log.info("batches in flight rolled back on close: %s", error)
        self._pool.shutdown(wait=True)

    def _run(self, run: Callable[[Lane, Turn], int], lane: Lane, turn: Turn) -> int:
        committed = False
        try:
            rows = run(lane, turn)
            committed = True
            return rows
        finally:
            turn.finish(committed)

    def _notify(self, _: Future[int]) -> None:
        with self._changed:
            self._changed.notify_all()

    def _reap(self) -> None:
        """Take the finished batches at the head of the order off the in-flight list, their
        connections back (a later batch that finished first keeps its connection until those
        before it are done); the first error is kept for :meth:`drain`."""
        state = self._state
        keep = []
        head = True
        for item in state.in_flight:
            if head and item.future.done():
                state.free.append(item.lane)
                error = item.future.exception()
                if error is None:
                    self.committed_upto = item.turn.upto
                elif self._error is None:
                    self._error = error
                    self._broken = True
                continue
            head = False
            keep.append(item)
        state.in_flight = keep
