"""How far the sink may apply: the global resolved ts, held back while Kafka has a topic that
``TICDC_SINK_TOPICS_PATTERN`` matches and no worker has recorded yet, and with the partitions of
topics whose table went away left out while Kafka holds nothing unstaged on them.

TiCDC creates a table's topic (and waits until Kafka shows it) when it first writes to it, the
table's CREATE TABLE, and writes no watermark past that DDL before the DDL is written. So
when the watermarks are read first and Kafka's topics listed after, a topic missing from the
partitions those watermarks were read over was created, at the latest, before the watermark
that would pass its first event: the advance waits until a worker records the topic (its
partitions then count, with no watermark until their messages are staged). An advance confirmed
once stays safe; one not confirmed (Kafka away, a topic unrecorded) leaves the sink at the last
confirmed one. See docs/architecture.md, "Topics created while the pipeline runs".

A topic whose table was dropped or renamed away gets no checkpoint after that DDL
(core/staging/retired.py): its partitions leave the minimum once each stands at the DDL's ts and
Kafka's log-end offsets, read after the watermarks, show nothing past what is staged on them (a
message written after that was written after every checkpoint read: its commit ts is above).
See docs/architecture.md, "Topics whose table went away".
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from aiokafka.errors import KafkaError

from config.settings import Settings
from core.outage import Outage
from core.staging import Staging, Standing, TopicPartition, past_retired
from core.topics import end_offsets, gated_resolved, matched_topics, unrecorded

log = logging.getLogger("ticdc_sink.sink")

# Lists the matched topics with their partition counts (Kafka's metadata, or a test's).
Lister = Callable[[Settings], Coroutine[Any, Any, dict[str, int]]]
# Reads partitions' log-end offsets (Kafka's, or a test's).
Ender = Callable[
    [Settings, Sequence[TopicPartition]], Coroutine[Any, Any, dict[TopicPartition, int]]
]


class ResolvedGate:
    """The global resolved ts the sink applies up to (:meth:`resolved`), read by the loop and
    by its read-ahead thread."""

    def __init__(
        self,
        settings: Settings,
        staging: Staging,
        lister: Lister = matched_topics,
        ender: Ender = end_offsets,
    ):
        self._settings = settings
        self._staging = staging
        self._lister = lister
        self._ender = ender
        self._lock = threading.Lock()
        # The highest resolved ts a listing taken after its watermarks confirmed.
        self._confirmed: int | None = None
        self._waiting: list[str] = []
        # The retired topics whose partitions were last left out (logged when it changes).
        self._left_out: set[str] = set()
        self._kafka_outage = Outage("Kafka", log)

    def resolved(self) -> int | None:
        """The global resolved ts, or the last confirmed one while a topic Kafka has is not
        recorded yet (None: nothing confirmed)."""
        pattern = self._settings.kafka.topics_pattern
        standing = self._staging.standing()
        resolved = standing.resolved
        if not pattern and not standing.leaving:
            return resolved
        with self._lock:
            confirmed = self._confirmed
            if resolved is None or (confirmed is not None and resolved <= confirmed):
                # Safe already: everything up to a confirmed ts was staged when it was.
                return resolved
            try:
                listed, ends = asyncio.run(self._kafka_view(bool(pattern), standing))
            except (KafkaError, OSError) as error:
                self._kafka_outage.failed(error, "listing the pipeline's topics and their ends")
                return confirmed
            self._kafka_outage.answered()
            if listed is not None and gated_resolved(resolved, standing.counts, listed) is None:
                self._say_waiting(unrecorded(standing.counts, listed))
                return confirmed
            self._say_waiting([])
            resolved = self._with_unstaged(resolved, standing, ends)
            if confirmed is not None and resolved <= confirmed:
                return confirmed
            self._confirmed = resolved
            return resolved

    async def _kafka_view(
        self, pattern: bool, standing: Standing
    ) -> tuple[dict[str, int] | None, dict[TopicPartition, int]]:
        """The matched topics (None without a pattern) and the leaving partitions' ends."""
        listed = await self._lister(self._settings) if pattern else None
        ends = await self._ender(self._settings, list(standing.leaving)) if standing.leaving else {}
        return listed, ends

    def _with_unstaged(
        self, resolved: int, standing: Standing, ends: dict[TopicPartition, int]
    ) -> int:
        """``resolved``, lowered to the watermark of each leaving partition on which Kafka holds
        a message not staged yet (a CREATE TABLE of the name again: it counts until staged)."""
        lowered, left_out = past_retired(standing, ends)
        if set(left_out) - self._left_out:
            log.info(
                "%s: its table went away (DROP TABLE, RENAME TABLE or DROP DATABASE, applied in "
                "commit-ts order); its partitions no longer hold the resolved ts",
                ", ".join(f"topic {topic}" for topic in sorted(set(left_out) - self._left_out)),
            )
        self._left_out = set(left_out)
        return resolved if lowered is None else lowered

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
