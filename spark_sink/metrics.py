"""Prometheus metrics of the sink (names by Prometheus conventions: ``_total`` counters,
``_timestamp_seconds`` for points in time, ``_seconds`` for durations)."""

from __future__ import annotations

import time

from prometheus_client import Counter, Gauge, Histogram

from core.tso import tso_seconds

CHANGES_APPLIED = Counter(
    "ticdc_sink_changes_applied_total",
    "Row changes applied downstream (before coalescing per key; not affected rows)",
    ["pipeline"],
)
BATCHES_APPLIED = Counter(
    "ticdc_sink_batches_applied_total", "Batches applied downstream", ["pipeline"]
)
CHECKPOINT = Gauge(
    "ticdc_sink_checkpoint_timestamp_seconds",
    "Physical time of the applied resolved ts (Unix seconds)",
    ["pipeline"],
)
LAG = Gauge(
    "ticdc_sink_replication_lag_seconds",
    "Now minus the physical time of the applied resolved ts, computed when scraped "
    "(grows while nothing is applied)",
    ["pipeline"],
)
BATCH_CHANGES = Histogram(
    "ticdc_sink_batch_changes",
    "Row changes per applied batch",
    ["pipeline"],
    buckets=(1, 10, 100, 1_000, 10_000, 100_000, 1_000_000),
)
BATCH_SECONDS = Histogram(
    "ticdc_sink_batch_duration_seconds", "Time to apply one batch", ["pipeline"]
)


def lag_seconds(checkpoint_seconds: float, now: float) -> float:
    """How far the downstream is behind ``now`` (never negative: clocks drift a little)."""
    return max(0.0, now - checkpoint_seconds)


def record_checkpoint(pipeline: str, checkpoint: int) -> None:
    """The applied resolved ts, and the lag computed from it at each scrape."""
    if not checkpoint:
        return  # nothing applied yet: no time to measure the lag from
    seconds = tso_seconds(checkpoint)
    CHECKPOINT.labels(pipeline).set(seconds)
    LAG.labels(pipeline).set_function(lambda: lag_seconds(seconds, time.time()))


def record_batch(pipeline: str, changes: int, seconds: float, checkpoint: int) -> None:
    CHANGES_APPLIED.labels(pipeline).inc(changes)
    BATCHES_APPLIED.labels(pipeline).inc()
    BATCH_CHANGES.labels(pipeline).observe(changes)
    BATCH_SECONDS.labels(pipeline).observe(seconds)
    record_checkpoint(pipeline, checkpoint)


DDL_SKIPPED = Counter(
    "ticdc_sink_ddl_skipped_total",
    "DDL not run downstream: refused under TICDC_SINK_ON_DDL_ERROR=skip, or by `skip-ddl`",
    ["pipeline", "reason"],
)
SCHEMA_DRIFT_DROPPED = Counter(
    "ticdc_sink_schema_drift_dropped_total",
    "Values dropped under TICDC_SINK_ON_SCHEMA_DRIFT=ignore: one per row and missing column "
    "(column '' for rows of a missing table)",
    ["pipeline", "table", "column"],
)
