"""The garbage collector's thresholds for the worker and the sink: both make objects by the
hundred thousand (Faust's events and records; a batch's rows) that hold no reference cycles.

At Python's default thresholds (700, 10, 10) the collections those allocations set off walk the
live objects again and again, a cost per row in both processes (docs/benchmarks.md has the
figures). Reference counting frees the objects once they are done with either way.
"""

from __future__ import annotations

import gc

# Collections rarer than Python's default, for processes that churn through acyclic objects.
GC_THRESHOLDS = (100_000, 50, 1_000)


def raised_thresholds(now: tuple[int, int, int]) -> tuple[int, int, int]:
    """``now`` (the collector's thresholds) raised to :data:`GC_THRESHOLDS`, never lowered."""
    first, second, third = (max(old, tuned) for old, tuned in zip(now, GC_THRESHOLDS, strict=True))
    return first, second, third


def collect_rarely() -> None:
    """Raise the collector's thresholds to :data:`GC_THRESHOLDS` (never lower them)."""
    gc.set_threshold(*raised_thresholds(gc.get_threshold()))
