"""The pipeline's topics as Kafka describes them: each one's partition count, recorded in staging.

The global resolved ts needs every partition's watermark, so it stays unknown until the count is
recorded; a topic Kafka does not know is a configuration error.
"""

from __future__ import annotations

from config.errors import ConfigError
from config.settings import Settings
from core.kafka_client import kafka_options
from core.staging import Staging


async def record_partition_counts(settings: Settings, staging: Staging) -> None:
    """The partition count of every topic, from the topic's own metadata."""
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
