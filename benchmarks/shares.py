"""Timing a baseline written over N connections at once: a process each (one Python thread per
connection would share one core's GIL), all started together."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from typing import Any


def timed_shares(write: Callable[..., None], shares: Sequence[tuple[Any, ...]]) -> float:
    """Seconds from the moment every process of ``shares`` is ready until the last is done;
    each calls ``write(*share, start)`` and waits at ``start`` (a barrier) before writing."""
    context = multiprocessing.get_context("fork")
    start = context.Barrier(len(shares) + 1)
    workers = [context.Process(target=write, args=(*share, start)) for share in shares]
    for worker in workers:
        worker.start()
    start.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    if any(worker.exitcode for worker in workers):
        raise RuntimeError("a raw upsert process failed")
    return time.perf_counter() - started
