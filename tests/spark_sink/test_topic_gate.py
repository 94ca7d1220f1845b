"""The sink's gate with a topic pattern, against real Kafka and Redis: a topic Kafka has and no
worker has recorded holds the resolved ts at the last one confirmed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from config.settings import Settings
from core.model import DDLEvent
from core.staging import Staging, TopicPartition
from core.topics import end_offsets, matched_topics
from spark_sink.topic_gate import ResolvedGate

pytestmark = pytest.mark.integration

TS = 449_000_000_000_000_100


async def visible(settings: Settings, topic: str) -> None:
    """Wait until a listing shows ``topic``: Kafka answers a creation before every broker's
    metadata has it, and TiCDC waits for this before it writes to a new topic."""
    deadline = time.monotonic() + 30
    while topic not in await matched_topics(settings):
        assert time.monotonic() < deadline, f"{topic} never listed"
        await asyncio.sleep(0.05)


async def test_a_topic_created_before_a_watermark_holds_the_sink_until_it_is_recorded(
    settings: Settings, staging: Staging, kafka_admin: Any, unique: str
) -> None:
    from aiokafka.admin import NewTopic

    first, second = f"{unique}_a", f"{unique}_b"
    await kafka_admin.create_topics([NewTopic(first, 1, 1)])
    try:
        configured = settings.updated({"topics_pattern": f"{unique}_.*"})
        gate = ResolvedGate(configured, staging)

        def resolved() -> Any:
            # The sink's threads call it; it lists Kafka's topics in a loop of its own.
            return asyncio.to_thread(gate.resolved)

        staging.set_partition_count(first, 1)
        a, b = TopicPartition(first, 0), TopicPartition(second, 0)
        staging.stage(a, 0, [], watermark=TS)
        assert await resolved() == TS

        # TiCDC: the new table's topic is made (and visible) before its CREATE TABLE is
        # written, and no watermark passes that DDL before it is written.
        await kafka_admin.create_topics([NewTopic(second, 1, 1)])
        await visible(configured, second)
        staging.stage(a, 1, [], watermark=TS + 10)
        assert staging.global_resolved_ts() == TS + 10  # what the staged watermarks alone say
        assert await resolved() == TS  # the last confirmed: the new topic is not recorded

        staging.set_partition_count(second, 1)  # a worker found it
        assert await resolved() is None  # counted now, with no watermark yet
        create = DDLEvent(TS + 5, unique, "b", f"CREATE TABLE {unique}.b (id INT)", 3)
        staging.stage(b, 0, [], ddls=[create], watermark=TS + 10)
        assert await resolved() == TS + 10
    finally:
        await kafka_admin.delete_topics([first, second])


def test_without_a_pattern_the_gate_is_the_global_resolved_ts(
    settings: Settings, staging: Staging, unique: str
) -> None:
    gate = ResolvedGate(settings.updated({"topics": (unique,)}), staging)
    staging.set_partition_count(unique, 1)
    assert gate.resolved() is None
    staging.stage(TopicPartition(unique, 0), 0, [], watermark=TS)
    assert gate.resolved() == TS


def test_while_kafka_is_away_the_sink_applies_nothing_past_what_it_confirmed(
    settings: Settings, staging: Staging, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    away = settings.updated({"topics_pattern": f"{unique}_.*", "kafka": "127.0.0.1:1"})
    gate = ResolvedGate(away, staging)
    staging.set_partition_count(f"{unique}_a", 1)
    staging.stage(TopicPartition(f"{unique}_a", 0), 0, [], watermark=TS)
    assert gate.resolved() is None
    assert gate.resolved() is None
    outages = [r for r in caplog.records if "Kafka unavailable since" in r.getMessage()]
    assert len(outages) == 1


async def test_a_dropped_tables_topic_leaves_the_resolved_ts_while_kafka_has_nothing_new_on_it(
    settings: Settings, staging: Staging, kafka_admin: Any, unique: str
) -> None:
    """A topic retired by its DROP TABLE (staged, every partition at its ts) stops holding the
    resolved ts; a message Kafka has on it and staging lacks (CREATE TABLE of the name again)
    holds it at the DROP until a worker stages it."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import NewTopic

    table, other = f"{unique}_t", f"{unique}_o"
    await kafka_admin.create_topics([NewTopic(table, 1, 1), NewTopic(other, 1, 1)])
    try:
        gate = ResolvedGate(settings.updated({"topics": (table, other)}), staging)

        def resolved() -> Any:
            return asyncio.to_thread(gate.resolved)

        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap)
        await producer.start()
        try:
            for topic in (table, other):
                staging.set_partition_count(topic, 1)
            t, o = TopicPartition(table, 0), TopicPartition(other, 0)
            drop = DDLEvent(TS + 5, unique, "t", f"DROP TABLE {unique}.t", 4)
            # As Kafka holds them: the DROP and its checkpoint on the table's topic.
            for _ in range(2):
                await producer.send_and_wait(table, b"m")
            staging.stage(t, 0, [], ddls=[drop])
            staging.stage(t, 1, [], watermark=TS + 5)
            staging.stage(o, 0, [], watermark=TS + 20)
            assert await resolved() == TS + 20
            staging.stage(o, 1, [], watermark=TS + 30)
            # The name created again: a message on the topic that no worker staged yet.
            await producer.send_and_wait(table, b"m")
            assert await resolved() == TS + 20  # confirmed before; nothing past it
            create = DDLEvent(TS + 25, unique, "t", f"CREATE TABLE {unique}.t (id INT)", 3)
            staging.stage(t, 2, [], ddls=[create])
            assert await resolved() == TS + 30
        finally:
            await producer.stop()
    finally:
        await kafka_admin.delete_topics([table, other])


async def test_the_ends_of_a_deleted_topic_are_none_at_once(
    settings: Settings, unique: str
) -> None:
    """A retired topic deleted from Kafka carries nothing more: it is left out, not waited for
    (the client would wait for its metadata until its request timeout)."""
    started = time.monotonic()
    assert await end_offsets(settings, [TopicPartition(f"{unique}_gone", 0)]) == {}
    assert time.monotonic() - started < 10
