"""The ``/metrics`` endpoint (served when ``TICDC_SINK_METRICS_PORT`` is set) and the counters both
the worker and the sink write.

Names follow Prometheus conventions: counters end in ``_total``, points in time are
``_timestamp_seconds`` (Unix seconds, the physical part of a TSO).
"""

from __future__ import annotations

from prometheus_client import Counter, start_http_server

from config.settings import Settings

# Both sides append to the pipeline's one dead-letter stream, so both trim it.
DEAD_LETTERS_TRIMMED = Counter(
    "ticdc_sink_dead_letters_trimmed_total",
    "Oldest dead letters deleted to keep TICDC_SINK_DEAD_LETTER_MAX_ENTRIES",
    ["pipeline"],
)


def serve_metrics(settings: Settings) -> None:
    """Serve ``/metrics`` on ``TICDC_SINK_METRICS_HOST`` when ``TICDC_SINK_METRICS_PORT`` is
    set (0: off)."""
    if settings.metrics.port:
        start_http_server(settings.metrics.port, addr=settings.metrics.host)
