"""Prometheus metrics of the workers (served by ``core.metrics.serve_metrics``).

Names follow Prometheus conventions: counters end in ``_total``, points in time are
``_timestamp_seconds`` (Unix seconds, the physical part of a TSO).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

EVENTS_DECODED = Counter(
    "ticdc_sink_events_decoded_total", "Events decoded, by kind", ["pipeline", "kind"]
)
ROWS_STAGED = Counter("ticdc_sink_rows_staged_total", "Row changes staged in Redis", ["pipeline"])
DEAD_LETTERS = Counter(
    "ticdc_sink_dead_letters_total", "Messages that did not decode", ["pipeline"]
)
DECODE_BUGS = Counter(
    "ticdc_sink_decode_bugs_total",
    "Messages dead-lettered by an exception no codec raises on purpose (a bug to report)",
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
