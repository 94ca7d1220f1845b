"""The topics a pipeline consumes when ``TICDC_SINK_TOPICS_PATTERN`` names them: which of Kafka's
topics match, and which of those no worker has recorded yet.

A changefeed with a topic per table creates a topic when a table first needs one, while the
workers run. The global resolved ts is the minimum over the partitions the workers recorded
(the ``partitions`` hash), so a topic Kafka has and staging does not yet know must hold it back:
the worker records and subscribes it on its next look, the sink checks it before each advance
(spark_sink/topic_gate.py), ``status`` shows it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from config.settings import Settings
from core.kafka_client import kafka_options


def matching(pattern: str, counts: Mapping[str, int]) -> dict[str, int]:
    """The topics of ``counts`` (topic -> partition count) whose whole name ``pattern`` matches,
    as Kafka's own consumers match a subscription pattern."""
    compiled = re.compile(pattern)
    return {topic: count for topic, count in counts.items() if compiled.fullmatch(topic)}


def unrecorded(recorded: Mapping[str, int], listed: Mapping[str, int]) -> list[str]:
    """The listed topics (topic -> partition count, as Kafka has them) that ``recorded`` (as
    staging has them) lacks or counts otherwise: the global resolved ts read over ``recorded``
    leaves out some of their partitions."""
    return sorted(topic for topic, count in listed.items() if recorded.get(topic) != count)


def gated_resolved(
    resolved: int | None, recorded: Mapping[str, int], listed: Mapping[str, int]
) -> int | None:
    """How far the sink may apply: ``resolved``, the minimum watermark over the partitions of
    ``recorded``, when Kafka's listing, taken after those watermarks were read, holds no topic
    beyond them; None while it does (a topic created before the watermark that passed its first
    event was sent)."""
    if resolved is None or unrecorded(recorded, listed):
        return None
    return resolved


async def matched_topics(settings: Settings) -> dict[str, int]:
    """Every topic of the cluster that ``TICDC_SINK_TOPICS_PATTERN`` matches, with its partition
    count, from one metadata request (Kafka's internal topics left out)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        described = await admin.describe_topics(None)
    finally:
        await admin.close()
    return matching(settings.kafka.topics_pattern, topic_counts(described))


def topic_counts(described: list[dict[str, Any]]) -> dict[str, int]:
    """Topic -> partition count of a metadata response's topics, but internal ones and those
    it reports an error for (a topic being created or deleted)."""
    return {
        entry["topic"]: len(entry["partitions"])
        for entry in described
        if not entry["error_code"] and not entry.get("is_internal") and entry["partitions"]
    }
