"""How far the sink may apply: the global resolved ts, held back while Kafka has a topic that
``TICDC_SINK_TOPICS_PATTERN`` matches and no worker has recorded yet.

TiCDC creates a table's topic (and waits until Kafka shows it) when it first writes to it, the
table's CREATE TABLE, and writes no watermark past that DDL before the DDL is written. So
when the watermarks are read first and Kafka's topics listed after, a topic missing from the
partitions those watermarks were read over was created, at the latest, before the watermark
that would pass its first event: the advance waits until a worker records the topic (its
partitions then count, with no watermark until their messages are staged). An advance confirmed
once stays safe; one not confirmed (Kafka away, a topic unrecorded) leaves the sink at the last
confirmed one. See docs/architecture.md, "Topics created while the pipeline runs".
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from aiokafka.errors import KafkaError

from config.settings import Settings
from core.outage import Outage
from core.staging import Staging
from core.topics import gated_resolved, matched_topics, unrecorded

log = logging.getLogger("ticdc_sink.sink")

# Lists the matched topics with their partition counts (Kafka's metadata, or a test's).
Lister = Callable[[Settings], Coroutine[Any, Any, dict[str, int]]]


class ResolvedGate:
    """The global resolved ts the sink applies up to (:meth:`resolved`), read by the loop and
    by its read-ahead thread."""

    def __init__(self, settings: Settings, staging: Staging, lister: Lister = matched_topics):
        self._settings = settings
        self._staging = staging
        self._lister = lister
        self._lock = threading.Lock()
        # The highest resolved ts a listing taken after its watermarks confirmed.
        self._confirmed: int | None = None
        self._waiting: list[str] = []
        self._kafka_outage = Outage("Kafka", log)

    def resolved(self) -> int | None:
        """The global resolved ts, or the last confirmed one while a topic Kafka has is not
        recorded yet (None: nothing confirmed)."""
        if not self._settings.kafka.topics_pattern:
            return self._staging.global_resolved_ts()
        resolved, recorded = self._staging.resolved_over()
        with self._lock:
            confirmed = self._confirmed
            if resolved is None or (confirmed is not None and resolved <= confirmed):
                # Safe already: everything up to a confirmed ts was staged when it was.
                return resolved
            try:
                listed = asyncio.run(self._lister(self._settings))
            except (KafkaError, OSError) as error:
                self._kafka_outage.failed(error, "listing the topics the pattern matches")
                return confirmed
            self._kafka_outage.answered()
            if gated_resolved(resolved, recorded, listed) is None:
                self._say_waiting(unrecorded(recorded, listed))
                return confirmed
            self._say_waiting([])
            self._confirmed = resolved
            return resolved

    def _say_waiting(self, topics: list[str]) -> None:
        """One line when the set of topics the sink waits for changes."""
        if topics != self._waiting and topics:
            log.info(
                "waiting for a worker to record %s (matched by TICDC_SINK_TOPICS_PATTERN, new "
                "in Kafka): nothing past %s is applied until then",
                ", ".join(topics),
                "what is applied" if self._confirmed is None else f"ts {self._confirmed}",
            )
        self._waiting = topics
