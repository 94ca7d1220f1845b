"""Reading ahead of the apply: while the downstream applies one batch, a thread reads the next
from Redis, unpacks and plans it (the apply mostly waits on the database)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator
from typing import TypeVar

from spark_sink.interpreter import reading_ahead
from spark_sink.stage_timing import WAIT, StageClock

T = TypeVar("T")

# Items handed over per queue operation by default: one per small item would cost more than it.
CHUNK = 1_000
# How often a blocked hand-over looks whether the reader is still wanted.
STOP_POLL_S = 0.1

_DONE = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def read_ahead(
    items: Iterator[T], limit: int, chunk: int = CHUNK, pipeline: str = ""
) -> Generator[T, None, None]:
    """``items`` in order, produced by a thread up to about ``limit`` items ahead of the caller,
    handed over ``chunk`` at a time.

    An error raised by ``items`` is raised here, in its place; a caller that stops early (or
    closes the generator) stops the thread (after the item it is producing). The time the
    caller waits for the thread is counted under ``pipeline``
    (``ticdc_sink_stage_seconds_total{stage="wait"}``).
    """
    chunks: queue.Queue[list[T] | object] = queue.Queue(max(1, limit // chunk))
    stop = threading.Event()

    def hand_over(value: list[T] | object) -> bool:
        while not stop.is_set():
            try:
                chunks.put(value, timeout=STOP_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        filling: list[T] = []
        try:
            for item in items:
                filling.append(item)
                if len(filling) >= chunk:
                    if not hand_over(filling):
                        return
                    filling = []
            end: object = _DONE
        except BaseException as error:  # handed to the caller, who raises it
            end = _Failed(error)
        if hand_over(filling):
            hand_over(end)

    thread = threading.Thread(target=produce, name="read-ahead", daemon=True)
    with reading_ahead():
        thread.start()
        clock = StageClock(pipeline)
        try:
            while True:
                clock.restart()
                got = chunks.get()
                # The caller idle until the reader hands over: the reading on its critical path.
                clock.lap(WAIT)
                if got is _DONE:
                    return
                if isinstance(got, _Failed):
                    raise got.error
                yield from got  # type: ignore[misc]
        finally:
            stop.set()
            # A generator left open (a sink's rounds read ahead) may be collected by the
            # collector in its own thread, which is ending then.
            if thread is not threading.current_thread():
                thread.join()
