"""Prometheus metrics of the workers (served when ``TICDC_SINK_METRICS_PORT`` is set).

Names follow Prometheus conventions: counters end in ``_total``, points in time are
``_timestamp_seconds`` (Unix seconds, the physical part of a TSO).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, start_http_server

from config.settings import Settings
from streams.tso import TSO_PHYSICAL_SHIFT, tso_seconds

__all__ = ["TSO_PHYSICAL_SHIFT", "serve_metrics", "tso_seconds"]

EVENTS_DECODED = Counter(
    "ticdc_sink_events_decoded_total", "Events decoded, by kind", ["pipeline", "kind"]
)
ROWS_STAGED = Counter("ticdc_sink_rows_staged_total", "Row changes staged in Redis", ["pipeline"])
DEAD_LETTERS = Counter(
    "ticdc_sink_dead_letters_total", "Messages that did not decode", ["pipeline"]
)
DEAD_LETTERS_TRIMMED = Counter(
    "ticdc_sink_dead_letters_trimmed_total",
    "Oldest dead letters deleted to keep TICDC_SINK_DEAD_LETTER_MAX_ENTRIES",
    ["pipeline"],
)
PARTITION_WATERMARK = Gauge(
    "ticdc_sink_partition_watermark_timestamp_seconds",
    "Physical time of a partition's resolved ts (Unix seconds)",
    ["pipeline", "topic", "partition"],
)
GLOBAL_RESOLVED = Gauge(
    "ticdc_sink_global_resolved_timestamp_seconds",
    "Physical time of the minimum watermark over all partitions (Unix seconds)",
    ["pipeline"],
)


def serve_metrics(settings: Settings) -> None:
    """Serve ``/metrics`` on ``TICDC_SINK_METRICS_HOST`` when ``TICDC_SINK_METRICS_PORT`` is
    set (0: off)."""
    if settings.metrics.port:
        start_http_server(settings.metrics.port, addr=settings.metrics.host)
