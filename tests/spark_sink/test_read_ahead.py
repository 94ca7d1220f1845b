"""read_ahead: the same items in the same order, errors in their place, and a reader that stops."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from spark_sink.read_ahead import CHUNK, read_ahead


@settings(max_examples=40, deadline=None)
@given(count=st.integers(0, 5 * CHUNK + 3), limit=st.integers(0, 3 * CHUNK))
def test_items_come_out_as_they_went_in(count: int, limit: int) -> None:
    assert list(read_ahead(iter(range(count)), limit)) == list(range(count))


def test_an_error_is_raised_after_the_items_before_it() -> None:
    def items() -> Iterator[int]:
        yield from range(CHUNK + 5)
        raise ConnectionError("Redis went away")

    seen: list[int] = []
    with pytest.raises(ConnectionError, match="Redis went away"):
        for item in read_ahead(items(), CHUNK):
            seen.append(item)
    assert seen == list(range(CHUNK + 5))


def test_a_caller_that_stops_early_stops_the_reader_within_its_limit() -> None:
    produced: list[int] = []

    def items() -> Iterator[int]:
        for item in range(100 * CHUNK):
            produced.append(item)
            yield item

    reader = read_ahead(items(), 2 * CHUNK)
    assert [next(reader) for _ in range(10)] == list(range(10))
    reader.close()
    assert not any(t.name == "read-ahead" for t in threading.enumerate())
    # Two chunks queued, one being filled, one taken by the caller, and the item in hand.
    assert len(produced) <= 4 * CHUNK + 1


def test_the_time_the_caller_waits_for_the_reader_is_counted() -> None:
    def slow() -> Iterator[int]:
        for item in range(3):
            time.sleep(0.1)
            yield item

    def waited() -> float:
        found = REGISTRY.get_sample_value(
            "ticdc_sink_stage_seconds_total", {"pipeline": "timed", "stage": "wait"}
        )
        return found or 0.0

    before = waited()
    for _ in read_ahead(slow(), limit=1, chunk=1, pipeline="timed"):
        time.sleep(0.2)  # the caller busy: the reader is ahead, the next item waits for it
    # The first item is waited for in full; the others were read while the caller worked.
    assert 0.09 <= waited() - before < 0.3


def test_a_reader_left_open_and_collected_in_its_own_thread_ends_quietly() -> None:
    import gc
    import sys

    errors: list[object] = []
    hook, sys.unraisablehook = sys.unraisablehook, errors.append
    try:
        taken, collected = threading.Event(), threading.Event()

        def items() -> Iterator[int]:
            yield 1
            # Once the consumer is suspended, drop its last reference here, in the reader's
            # thread: it is collected (and closed) in this thread.
            taken.wait(5)
            holder.clear()
            gc.collect()
            collected.set()
            yield 2

        holder = [read_ahead(items(), limit=1, chunk=1)]
        assert next(holder[0]) == 1
        taken.set()
        assert collected.wait(5)
    finally:
        sys.unraisablehook = hook
    assert errors == []
