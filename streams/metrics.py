"""Prometheus metrics of the workers (served when ``TICDC_SINK_METRICS_PORT`` is set)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, start_http_server

from config.settings import Settings

# TSOs carry physical milliseconds above 18 logical bits.
TSO_PHYSICAL_SHIFT = 18

EVENTS_DECODED = Counter(
    "ticdc_sink_events_decoded_total", "Events decoded, by kind", ["pipeline", "kind"]
)
ROWS_STAGED = Counter("ticdc_sink_rows_staged_total", "Row changes staged in Redis", ["pipeline"])
DEAD_LETTERS = Counter(
    "ticdc_sink_dead_letters_total", "Messages that did not decode", ["pipeline"]
)
PARTITION_WATERMARK = Gauge(
    "ticdc_sink_partition_watermark_seconds",
    "A partition's resolved ts (physical part, Unix seconds)",
    ["pipeline", "topic", "partition"],
)
GLOBAL_RESOLVED = Gauge(
    "ticdc_sink_global_resolved_ts_seconds",
    "The minimum watermark over all partitions (physical part, Unix seconds)",
    ["pipeline"],
)


def tso_seconds(ts: int) -> float:
    """The physical time of a TSO, for dashboards only (the pipeline never uses floats for ts)."""
    return (ts >> TSO_PHYSICAL_SHIFT) / 1000.0


def serve_metrics(settings: Settings) -> None:
    """Serve ``/metrics`` on 127.0.0.1 when ``TICDC_SINK_METRICS_PORT`` is set (0: off)."""
    if settings.metrics_port:
        start_http_server(settings.metrics_port, addr="127.0.0.1")
