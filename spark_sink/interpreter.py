"""The interpreter's settings while the sink reads ahead of its apply: two threads share one GIL,
and a batch makes millions of objects that live until it is applied."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from core.collector import raised_thresholds

# The GIL switch interval, shorter than Python's default: the apply thread mostly waits on the
# downstream, and each reply it wakes to would otherwise wait up to a default interval for the
# reader (a batch makes a dozen round trips, each short next to it).
SWITCH_INTERVAL_S = 0.001


@contextmanager
def reading_ahead() -> Iterator[None]:
    """The switch interval and the collector's thresholds for a reader thread beside the apply,
    restored on leaving."""
    switch = sys.getswitchinterval()
    thresholds = gc.get_threshold()
    sys.setswitchinterval(min(switch, SWITCH_INTERVAL_S))
    gc.set_threshold(*raised_thresholds(thresholds))
    try:
        yield
    finally:
        sys.setswitchinterval(switch)
        gc.set_threshold(*thresholds)
