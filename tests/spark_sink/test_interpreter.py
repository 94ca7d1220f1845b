"""The interpreter's settings while the sink reads ahead, and as they were afterwards."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

from core.collector import GC_THRESHOLDS
from spark_sink.interpreter import SWITCH_INTERVAL_S
from spark_sink.read_ahead import read_ahead


def test_a_reader_runs_with_quick_gil_switches_and_rare_collections_then_restores_them() -> None:
    switch, thresholds = sys.getswitchinterval(), gc.get_threshold()
    seen = [
        (sys.getswitchinterval(), gc.get_threshold())
        for _ in read_ahead(iter(range(3)), limit=1, chunk=1)
    ]
    assert seen == [(SWITCH_INTERVAL_S, GC_THRESHOLDS)] * 3
    assert switch > SWITCH_INTERVAL_S and GC_THRESHOLDS[0] > thresholds[0]
    assert (sys.getswitchinterval(), gc.get_threshold()) == (switch, thresholds)


def test_settings_are_restored_when_the_reader_fails() -> None:
    switch, thresholds = sys.getswitchinterval(), gc.get_threshold()

    def failing() -> Iterator[int]:
        yield 1
        raise ConnectionError("Redis went away")

    with pytest.raises(ConnectionError):
        list(read_ahead(failing(), limit=1, chunk=1))
    assert (sys.getswitchinterval(), gc.get_threshold()) == (switch, thresholds)
