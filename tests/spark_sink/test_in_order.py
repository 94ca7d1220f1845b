"""Batches on several connections: started as their write sets allow, committed in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from config.errors import BatchAbandonedError
from spark_sink.in_order import InOrder, Turn
from spark_sink.write_set import WriteSet


def writes(*keys: int) -> WriteSet:
    return WriteSet({("db", "t"): frozenset((k,) for k in keys)})


class Log:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.lock = threading.Lock()

    def add(self, event: str) -> None:
        with self.lock:
            self.events.append(event)


def batch(log: Log, name: str, work_s: float) -> Callable[[int, Turn], int]:
    def run(lane: int, turn: Turn) -> int:
        log.add(f"start {name}")
        time.sleep(work_s)
        turn.wait()
        log.add(f"commit {name}")
        return 1

    return run


def test_batches_run_at_once_and_commit_in_the_order_given() -> None:
    log = Log()
    in_order = InOrder([0, 1, 2])
    for upto, (name, work) in enumerate([("a", 0.3), ("b", 0.1), ("c", 0.0)], 1):
        in_order.submit(writes(upto), upto, batch(log, name, work))
    assert in_order.drain() == 3
    in_order.close()
    assert sorted(log.events[:3]) == ["start a", "start b", "start c"]
    assert [e for e in log.events if e.startswith("commit")] == ["commit a", "commit b", "commit c"]


def test_a_batch_whose_keys_meet_one_in_flight_starts_after_it_committed() -> None:
    log = Log()
    in_order = InOrder([0, 1])
    in_order.submit(writes(1, 2), 1, batch(log, "a", 0.2))
    in_order.submit(writes(2, 3), 2, batch(log, "b", 0.0))
    in_order.drain()
    in_order.close()
    assert log.events == ["start a", "commit a", "start b", "commit b"]


def test_more_batches_than_connections_wait_for_a_free_one() -> None:
    log = Log()
    in_order = InOrder([0])
    in_order.submit(writes(1), 1, batch(log, "a", 0.1))
    in_order.submit(writes(2), 2, batch(log, "b", 0.0))
    assert in_order.drain() == 2
    in_order.close()
    assert log.events == ["start a", "commit a", "start b", "commit b"]


def test_a_failed_attempt_rolls_back_the_batches_after_it_which_drain_reports() -> None:
    log = Log()
    in_order = InOrder([0, 1, 2])
    second_waiting = threading.Event()

    def first(lane: int, turn: Turn) -> int:
        second_waiting.wait(5)
        time.sleep(0.05)
        turn.failed()  # a lock wait, say: the later batches must let go of their locks
        turn.wait()
        log.add("commit a")
        return 1

    def second(lane: int, turn: Turn) -> int:
        second_waiting.set()
        try:
            turn.wait()
        except BatchAbandonedError:
            log.add("abandoned b")
            raise
        log.add("commit b")
        return 1

    in_order.submit(writes(1), 1, first)
    in_order.submit(writes(2), 2, second)
    with pytest.raises(BatchAbandonedError):
        in_order.drain()
    assert log.events == ["abandoned b", "commit a"] or log.events == ["commit a", "abandoned b"]
    assert in_order.committed_upto == 1
    # Drained, it takes batches again.
    in_order.submit(writes(2), 2, batch(log, "b", 0.0))
    assert in_order.drain() == 2
    in_order.close()


def test_the_first_error_is_raised_and_nothing_after_it_commits() -> None:
    log = Log()
    in_order = InOrder([0, 1])

    def fails(lane: int, turn: Turn) -> int:
        time.sleep(0.1)
        raise RuntimeError("refused")

    in_order.submit(writes(1), 1, fails)
    in_order.submit(writes(2), 2, batch(log, "b", 0.0))
    with pytest.raises(RuntimeError, match="refused"):
        in_order.drain()
    in_order.close()
    assert log.events == ["start b"]
    assert in_order.committed_upto is None


def test_where_the_server_locks_gaps_a_batch_writes_after_the_one_before_has_written() -> None:
    log = Log()
    in_order = InOrder([0, 1])

    def first(lane: int, turn: Turn) -> int:
        log.add("load a")
        time.sleep(0.2)
        turn.wait_to_write()
        log.add("write a")
        turn.written()
        time.sleep(0.1)
        turn.wait()
        log.add("commit a")
        return 1

    def second(lane: int, turn: Turn) -> int:
        log.add("load b")
        turn.wait_to_write()
        log.add("write b")
        turn.written()
        turn.wait()
        log.add("commit b")
        return 1

    in_order.submit(writes(1), 1, first)
    in_order.submit(writes(2), 2, second)
    in_order.drain()
    in_order.close()
    # Loaded at once; b writes once a has written (while a is still to commit).
    assert sorted(log.events[:2]) == ["load a", "load b"]
    assert log.events[2:] == ["write a", "write b", "commit a", "commit b"]
