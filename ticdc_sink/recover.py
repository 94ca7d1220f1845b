"""`ticdc-sink recover`: rebuild a pipeline's Redis staging from Kafka after Redis lost it.

The downstream checkpoint records, per partition, the Kafka offset from which a replay rebuilds
everything not yet applied. Recovery rewinds the consumer group to those offsets, clears what is
left of the pipeline's staging (partial and now inconsistent), and marks Redis as rebuilt; the
workers, started again, replay from there and the sink resumes from its checkpoint.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from config.errors import ConfigError, StagingError
from config.settings import Settings
from spark_sink.downstream import CheckpointTable, connect
from streams.kafka_client import kafka_options
from streams.redis_client import redis_client
from streams.staging import Staging

log = logging.getLogger("ticdc_sink.recover")

# Staging keys a recovery keeps: the dead letters are a record, not state to rebuild.
KEPT_KEYS = ("deadletters",)


@dataclass(frozen=True)
class Rewind:
    """Where one partition's replay starts, and what Kafka's retention already deleted."""

    field: str
    offset: int
    earliest: int

    @property
    def lost_to_retention(self) -> bool:
        return self.offset < self.earliest


def run_recover(settings: Settings) -> int:
    """Rewind the workers' consumer group to the checkpoint's replay offsets and reset staging."""
    if not settings.topics:
        raise ConfigError("TICDC_SINK_TOPICS is empty: name the topics the workers consume")
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        table = CheckpointTable(settings.meta_db, settings.group)
        table.create(cursor)
        checkpoint = table.read(cursor)
    offsets = checkpoint.offsets if checkpoint else {}
    rewinds = asyncio.run(_rewind_group(settings, offsets))
    client = redis_client(settings)
    staging = Staging(client, settings.group)
    cleared = _clear_staging(staging)
    if checkpoint is not None:
        # The next sink must lead with a newer epoch than the one the checkpoint recorded.
        client.set(staging.key("sink-leader:epoch"), checkpoint.epoch)
    staging.mark_lineage()
    at = f"checkpoint ts {checkpoint.resolved_ts}" if checkpoint else "no checkpoint yet"
    print(f"pipeline {settings.group}: {at}; cleared {cleared} staging keys")
    for rewind in rewinds:
        print(f"  {rewind.field}: replay from offset {rewind.offset}")
        if rewind.lost_to_retention:
            print(
                f"  WARNING {rewind.field}: offsets {rewind.offset}..{rewind.earliest - 1} were "
                "deleted by Kafka's retention; their changes cannot be replayed"
            )
    print("start the workers and the sink again to replay")
    return 0


async def _rewind_group(settings: Settings, offsets: dict[str, int]) -> list[Rewind]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as KafkaTP
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.structs import OffsetAndMetadata

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        (described,) = await admin.describe_consumer_groups([settings.group])
        members = described.groups[0][5]
        if members:
            raise StagingError(
                f"{len(members)} worker(s) still consume as group {settings.group!r}: "
                "stop every worker first, or they would stage on from where they are"
            )
        targets: dict[KafkaTP, int] = {}
        for topic in await admin.describe_topics(list(settings.topics)):
            if topic["error_code"]:
                raise ConfigError(f"TICDC_SINK_TOPICS: topic {topic['topic']!r} not found")
            for partition in topic["partitions"]:
                field = f"{topic['topic']}:{partition['partition']}"
                targets[KafkaTP(topic["topic"], partition["partition"])] = offsets.get(field, 0)
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(
        **kafka_options(settings, group_id=settings.group, enable_auto_commit=False)
    )
    await consumer.start()
    try:
        consumer.assign(list(targets))
        earliest = await consumer.beginning_offsets(list(targets))
        await consumer.commit({tp: OffsetAndMetadata(offset, "") for tp, offset in targets.items()})
    finally:
        await consumer.stop()
    return [
        Rewind(f"{tp.topic}:{tp.partition}", offset, earliest[tp])
        for tp, offset in sorted(targets.items())
    ]


def _clear_staging(staging: Staging) -> int:
    kept = {staging.key(name).encode() for name in KEPT_KEYS}
    doomed = [k for k in staging.client.scan_iter(f"{staging.prefix}*") if k not in kept]
    if doomed:
        staging.client.delete(*doomed)
    return len(doomed)
