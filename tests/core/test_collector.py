"""The garbage collector's thresholds the worker and the sink raise."""

from __future__ import annotations

import gc

from core.collector import GC_THRESHOLDS, collect_rarely, raised_thresholds


def test_thresholds_are_raised_and_never_lowered() -> None:
    assert raised_thresholds((700, 10, 10)) == GC_THRESHOLDS
    higher = (GC_THRESHOLDS[0] * 2, 10, 10_000)
    assert raised_thresholds(higher) == (GC_THRESHOLDS[0] * 2, GC_THRESHOLDS[1], 10_000)


def test_the_process_collects_garbage_rarely_and_never_more_often_than_asked() -> None:
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        collect_rarely()
        assert gc.get_threshold() == GC_THRESHOLDS
        # A process already collecting more rarely keeps its own setting.
        gc.set_threshold(GC_THRESHOLDS[0] * 2, 10, 10_000)
        collect_rarely()
        assert gc.get_threshold() == (GC_THRESHOLDS[0] * 2, GC_THRESHOLDS[1], 10_000)
    finally:
        gc.set_threshold(*saved)
