"""Seconds the sink spends in each stage of its loop that runs outside the apply, for operators:
with ``ticdc_sink_batch_duration_seconds`` (the apply) they say where a sink's time goes, and
``wait`` says how long the apply sat idle because the next batch was not read yet."""

from __future__ import annotations

import time

from prometheus_client import Counter

STAGE_SECONDS = Counter(
    "ticdc_sink_stage_seconds_total",
    "Seconds the sink spent per stage: release (read from Redis, merge the partitions by commit "
    "ts, unpack) and plan in the read-ahead thread; wait, the apply idle until the read-ahead "
    "hands it the next batch (the reading on the critical path)",
    ["pipeline", "stage"],
)
RELEASE = "release"
PLAN = "plan"
WAIT = "wait"


class StageClock:
    """Laps of one thread's time, each charged to the stage it was spent in."""

    def __init__(self, pipeline: str) -> None:
        self.pipeline = pipeline
        self.mark = time.perf_counter()

    def lap(self, stage: str) -> None:
        """Charge the time since the last lap (or restart) to ``stage``."""
        now = time.perf_counter()
        STAGE_SECONDS.labels(self.pipeline, stage).inc(now - self.mark)
        self.mark = now

    def restart(self) -> None:
        """Start the next lap now: the time since was spent elsewhere (a generator suspended)."""
        self.mark = time.perf_counter()
