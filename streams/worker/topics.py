"""The pipeline's topics as Kafka describes them: each one's partition count, recorded in staging.

The global resolved ts needs every partition's watermark, so it stays unknown until the count is
recorded; a topic Kafka does not know is a configuration error. With
``TICDC_SINK_TOPICS_PATTERN`` the topics are those Kafka has that match it, looked for again
every :data:`TOPICS_REFRESH_S` (core/topics.py says why the sink checks them too).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Sequence
from typing import Any

import redis
from aiokafka.errors import KafkaError

from config.errors import ConfigError
from config.settings import Settings
from config.signals import STOP_SIGNALS, stop_on_signals
from core.kafka_client import kafka_options
from core.outage import Outage
from core.staging import Staging
from core.topics import matched_topics, unrecorded

log = logging.getLogger("ticdc_sink.worker")

# How often a worker looks for new topics matching the pattern: a new table's topic is
# subscribed within this, the conductor's RESUBSCRIBE_S and a rebalance; until a worker has
# recorded it, the sink applies nothing past the last resolved ts it confirmed.
TOPICS_REFRESH_S = 2.0
# How long Faust's conductor waits before it subscribes topics added to it (its own default,
# 45 s, gathers the topics of agents starting together; here a new topic waits for nothing).
RESUBSCRIBE_S = 1.0
# What a look for topics meets while Kafka or Redis is away: waited out.
LOOK_FAILURES = (KafkaError, OSError, redis.RedisError)


async def record_partition_counts(settings: Settings, staging: Staging) -> None:
    """The partition count of every topic, from the topic's own metadata."""
    if settings.kafka.topics_pattern:
        await record_matched_topics(settings, staging)
        return
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        for description in await admin.describe_topics(list(settings.kafka.topics)):
            if description["error_code"]:
                raise ConfigError(f"TICDC_SINK_TOPICS: topic {description['topic']!r} not found")
            staging.set_partition_count(description["topic"], len(description["partitions"]))
    finally:
        await admin.close()


async def record_matched_topics(settings: Settings, staging: Staging) -> list[str]:
    """Every topic Kafka has that the pattern matches, its partition count recorded in staging
    when it is new (or its count changed); returns them, sorted."""
    listed = await matched_topics(settings)
    recorded = staging.partition_counts()
    for topic in unrecorded(recorded, listed):
        staging.set_partition_count(topic, listed[topic])
        log.info(
            "topic %s (%d partitions) matches TICDC_SINK_TOPICS_PATTERN: recorded",
            topic,
            listed[topic],
        )
    return sorted(listed)


def subscribe_new(app: Any, topics: Sequence[str]) -> list[str]:
    """Add to the app's conductor (what its consumer subscribes) the topics it lacks; returns
    them. The conductor subscribes them again after :data:`RESUBSCRIBE_S`, which rebalances the
    group: every worker looks for the same topics, and each gets its share of their partitions."""
    conductor = app.topics
    held = {name for channel in conductor for name in channel.topics}
    new = [topic for topic in topics if topic not in held]
    if new:
        conductor.add(app.topic(*new))
        log.info("subscribing %s", ", ".join(new))
    elif any(topic not in _subscribed(app, conductor) for topic in topics):
        # Faust drops a change flagged while the group rebalances (its conductor's
        # _subscriber): flagged again until the consumer's subscription holds every topic.
        conductor._flag_changes()
    return new


def _subscribed(app: Any, conductor: Any) -> set[str]:
    """The topics Kafka's client subscribes, or, before it has a consumer, the conductor's."""
    from faust.exceptions import ConsumerNotStarted

    try:
        return set(app.consumer._thread._ensure_consumer().subscription())
    except (AttributeError, ConsumerNotStarted):
        return set(conductor._topic_name_index)


def matched_at_start(settings: Settings, staging: Staging) -> list[str]:
    """The topics matching the pattern at start, once there is one (a changefeed creates its
    topics as it starts, maybe after its workers); [] when SIGTERM or SIGINT came first. The
    signals' handlers are given back after: Faust installs its own once it runs."""
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    stop = stop_on_signals(stop_timeout=settings.stop_timeout)
    try:
        topics = wait_for_matched_topics(settings, staging, stop)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return [] if stop.is_set() else topics


def wait_for_matched_topics(
    settings: Settings, staging: Staging, stop: threading.Event
) -> list[str]:
    """The topics matching the pattern, once there is one; [] once ``stop`` is set."""
    outage = Outage("Kafka or Redis", log)
    said = False
    while not stop.is_set():
        try:
            topics = asyncio.run(record_matched_topics(settings, staging))
        except LOOK_FAILURES as error:
            outage.failed(error, "looking for the topics TICDC_SINK_TOPICS_PATTERN matches")
        else:
            outage.answered()
            if topics:
                return topics
            if not said:
                log.info(
                    "no topic matches TICDC_SINK_TOPICS_PATTERN=%s yet: looking again every %.0f s",
                    settings.kafka.topics_pattern,
                    TOPICS_REFRESH_S,
                )
                said = True
        stop.wait(TOPICS_REFRESH_S)
    return []
