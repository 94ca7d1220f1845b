"""The topics a pipeline consumes when ``TICDC_SINK_TOPICS_PATTERN`` names them: which of Kafka's
topics match (and the changefeed's default topic, ``TICDC_SINK_DEFAULT_TOPIC``), which of those
no worker has recorded yet, and where their partitions end.

A changefeed with a topic per table creates a topic when a table first needs one, while the
workers run. The global resolved ts is the minimum over the partitions the workers recorded
(the ``partitions`` hash), so a topic Kafka has and staging does not yet know must hold it back:
the worker records and subscribes it on its next look, the sink checks it before each advance
(spark_sink/topic_gate.py), ``status`` shows it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from config.settings import Settings
from core.kafka_client import kafka_options
from core.staging.keys import TopicPartition


def matching(pattern: str, counts: Mapping[str, int], default_topic: str = "") -> dict[str, int]:
    """The topics of ``counts`` (topic -> partition count) whose whole name ``pattern`` matches,
    as Kafka's own consumers match a subscription pattern, and ``default_topic`` (the
    changefeed's default topic, ``TICDC_SINK_DEFAULT_TOPIC``) whether it matches or not."""
    compiled = re.compile(pattern)
    return {
        topic: count
        for topic, count in counts.items()
        if topic == default_topic or compiled.fullmatch(topic)
    }


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
    """Every topic of the cluster that ``TICDC_SINK_TOPICS_PATTERN`` matches, and the default
    topic, with its partition count, from one metadata request (Kafka's internal topics left
    out)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        described = await admin.describe_topics(None)
    finally:
        await admin.close()
    kafka = settings.kafka
    return matching(kafka.topics_pattern, topic_counts(described), kafka.default_topic)


def topic_counts(described: list[dict[str, Any]]) -> dict[str, int]:
    """Topic -> partition count of a metadata response's topics, but internal ones and those
    it reports an error for (a topic being created or deleted)."""
    return {
        entry["topic"]: len(entry["partitions"])
        for entry in described
        if not entry["error_code"] and not entry.get("is_internal") and entry["partitions"]
    }


async def end_offsets(
    settings: Settings, partitions: Sequence[TopicPartition]
) -> dict[TopicPartition, int]:
    """Each partition's log-end offset (the offset its next message gets), from Kafka; none for
    a partition of a topic Kafka does not have (deleted: nothing more comes from it; asked for,
    the client would wait for it until its request timeout)."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as KafkaTP

    consumer = AIOKafkaConsumer(**kafka_options(settings))
    await consumer.start()
    try:
        present = await consumer.topics()
        asked = [tp for tp in partitions if tp.topic in present]
        ends = await consumer.end_offsets([KafkaTP(tp.topic, tp.partition) for tp in asked])
    finally:
        await consumer.stop()
    return {tp: ends[KafkaTP(tp.topic, tp.partition)] for tp in asked}
