"""Kafka topics a benchmark made, deleted once it has measured."""

from __future__ import annotations

from config.settings import Settings
from core.kafka_client import kafka_options


async def delete_topics(settings: Settings, topics: list[str]) -> None:
    """Delete ``topics`` (a benchmark's, once measured: Kafka would keep every byte of them, and a
    broker restarted after a crash reads all of its logs back)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        await admin.delete_topics(topics)
    finally:
        await admin.close()
