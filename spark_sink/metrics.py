"""Prometheus metrics of the sink."""

from __future__ import annotations

import time

from prometheus_client import Counter, Gauge, Histogram

from streams.metrics import tso_seconds

ROWS_APPLIED = Counter("ticdc_sink_rows_applied_total", "Rows merged downstream", ["pipeline"])
CHECKPOINT = Gauge(
    "ticdc_sink_checkpoint_ts_seconds", "The applied resolved ts (physical part)", ["pipeline"]
)
LAG = Gauge(
    "ticdc_sink_replication_lag_seconds",
    "Wall clock minus the physical time of the applied resolved ts",
    ["pipeline"],
)
BATCH_ROWS = Histogram(
    "ticdc_sink_batch_rows",
    "Changes per applied batch",
    ["pipeline"],
    buckets=(1, 10, 100, 1_000, 10_000, 100_000, 1_000_000),
)
BATCH_SECONDS = Histogram("ticdc_sink_batch_seconds", "Time to apply one batch", ["pipeline"])


def record_batch(pipeline: str, changes: int, merged: int, seconds: float, checkpoint: int) -> None:
    ROWS_APPLIED.labels(pipeline).inc(merged)
    BATCH_ROWS.labels(pipeline).observe(changes)
    BATCH_SECONDS.labels(pipeline).observe(seconds)
    CHECKPOINT.labels(pipeline).set(tso_seconds(checkpoint))
    LAG.labels(pipeline).set(max(0.0, time.time() - tso_seconds(checkpoint)))


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
