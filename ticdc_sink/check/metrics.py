"""``--metrics-file``: the last check as Prometheus metrics in a text file, for a scheduled check
(cron, a Kubernetes CronJob) whose process is gone before any scrape: node_exporter's textfile
collector, or any file-reading exporter, serves it. Written whole and renamed into place."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from core.tso import tso_seconds
from ticdc_sink.check.record import LastCheck


def write_metrics(path: Path, pipeline: str, check: LastCheck) -> None:
    registry = CollectorRegistry()

    def gauge(name: str, text: str, value: float) -> None:
        Gauge(name, text, ["pipeline"], registry=registry).labels(pipeline).set(value)

    gauge(
        "ticdc_sink_check_timestamp_seconds",
        "When the last check ran (Unix seconds)",
        check.checked_at.timestamp(),
    )
    gauge(
        "ticdc_sink_check_checkpoint_timestamp_seconds",
        "Physical time of the checkpoint ts the last check compared at (Unix seconds)",
        tso_seconds(check.ts),
    )
    gauge("ticdc_sink_check_match", "1 when the last check found no difference", check.matched)
    gauge(
        "ticdc_sink_check_differences",
        "Rows (and tables) the last check found different",
        check.differences,
    )
    gauge("ticdc_sink_check_rows", "Upstream rows the last check compared", check.rows)
    gauge("ticdc_sink_check_duration_seconds", "How long the last check took", check.seconds)
    write_to_textfile(str(path), registry)
