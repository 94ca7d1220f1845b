"""`ticdc-sink recover`: rebuild a pipeline's Redis staging from Kafka after Redis lost it.

The downstream checkpoint records, per partition, the Kafka offset from which a replay rebuilds
everything not yet applied. Recovery rewinds the consumer group to those offsets, clears what is
left of the pipeline's staging (partial and now inconsistent), and marks Redis as rebuilt; the
workers, started again, replay from there and the sink resumes from its checkpoint.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass

from config.errors import ConfigError, StagingError
from config.settings import Settings
from core.kafka_client import kafka_options
from core.redis_client import redis_client
from core.staging import Staging
from core.topics import matched_topics
from core.tso import describe_tso
from spark_sink.db.checkpoint import CheckpointTable
from spark_sink.db.connection import connect

log = logging.getLogger("ticdc_sink.recover")


@dataclass(frozen=True)
class Rewind:
    """Where one partition's replay starts, and what Kafka's retention already deleted."""

    topic: str
    partition: int
    offset: int
    earliest: int

    @property
    def field(self) -> str:
        return f"{self.topic}:{self.partition}"

    @property
    def lost_to_retention(self) -> bool:
        return self.offset < self.earliest


def run_recover(settings: Settings, dry_run: bool = False, assume_yes: bool = False) -> int:
    """Rewind the workers' consumer group to the checkpoint's replay offsets and reset staging.

    ``dry_run`` shows what would change and changes nothing; otherwise the operator confirms
    (``assume_yes``, or a prompt on a terminal)."""
    if not settings.kafka.topics and not settings.kafka.topics_pattern:
        raise ConfigError(
            "neither TICDC_SINK_TOPICS nor TICDC_SINK_TOPICS_PATTERN is set: name the topics "
            "the workers consume, or the pattern they match"
        )
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        table = CheckpointTable(settings.downstream.meta_db, settings.group)
        table.create(cursor)
        checkpoint = table.read(cursor)
    offsets = checkpoint.offsets if checkpoint else {}
    rewinds = asyncio.run(_plan_rewind(settings, offsets))
    staging = Staging(redis_client(settings), settings.group)
    # The dead letters are a record, not state to rebuild: a recovery keeps them. So are the
    # schemas fetched from a registry: an id's schema never changes. And the retired topics: a
    # DROP or RENAME TABLE or DROP DATABASE at or below the checkpoint is not replayed, and its
    # topics would hold the resolved ts again (keeping one is always safe:
    # core/staging/retired.py).
    kept = frozenset(
        {
            staging.keys.dead_letters,
            staging.keys.registry_schemas,
            staging.keys.retired,
            staging.keys.dropped_databases,
        }
    )
    doomed = staging.stored_keys(keep=kept)
    at = f"checkpoint ts {describe_tso(checkpoint.resolved_ts)}" if checkpoint else "no checkpoint"
    print(f"pipeline {settings.group}: {at}")
    for rewind in rewinds:
        print(f"  {rewind.field}: replay from offset {rewind.offset}")
        if rewind.lost_to_retention:
            print(
                f"  WARNING {rewind.field}: offsets {rewind.offset}..{rewind.earliest - 1} were "
                "deleted by Kafka's retention; their changes cannot be replayed"
            )
    kept_names = "dead letters, registry schemas and retired topics are kept"
    print(f"  staging keys to clear: {len(doomed)} ({kept_names})")
    if dry_run:
        print("dry run: nothing changed")
        return 0
    if not _confirmed(settings.group, assume_yes):
        print("nothing changed")
        return 1
    asyncio.run(_commit_offsets(settings, rewinds))
    staging.delete_keys(doomed)
    if checkpoint is not None:
        # The next sink must lead with a newer epoch than the one the checkpoint recorded.
        staging.restore_leader_epoch(checkpoint.epoch)
    staging.mark_lineage()
    print(f"rewound the consumer group; cleared {len(doomed)} staging keys")
    print("start the workers and the sink again to replay")
    return 0


def _confirmed(pipeline: str, assume_yes: bool) -> bool:
    """Whether the operator agrees to rewind and clear (``--yes``, or "y" at a prompt)."""
    if assume_yes:
        return True
    if not sys.stdin.isatty():
        raise ConfigError(
            f"recover rewinds and clears pipeline {pipeline!r}: pass --yes to confirm "
            "(stdin is not a terminal), or --dry-run to only look"
        )
    answer = input(f"rewind the consumer group and clear the staging of {pipeline}? [y/N] ")
    return answer.strip().lower() in {"y", "yes"}


async def _plan_rewind(settings: Settings, offsets: dict[str, int]) -> list[Rewind]:
    """Where each partition's replay starts; refuses while a worker is in the group."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as KafkaTP
    from aiokafka.admin import AIOKafkaAdminClient

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
        # With a pattern, every topic it matches now (those the checkpoint lacks from the start).
        names = list(settings.kafka.topics) or sorted(await matched_topics(settings))
        for topic in await admin.describe_topics(names) if names else []:
            if topic["error_code"]:
                raise ConfigError(f"TICDC_SINK_TOPICS: topic {topic['topic']!r} not found")
            for partition in topic["partitions"]:
                field = f"{topic['topic']}:{partition['partition']}"
                targets[KafkaTP(topic["topic"], partition["partition"])] = offsets.get(field, 0)
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(**kafka_options(settings))
    await consumer.start()
    try:
        earliest = await consumer.beginning_offsets(list(targets))
    finally:
        await consumer.stop()
    return [
        Rewind(tp.topic, tp.partition, offset, earliest[tp])
        for tp, offset in sorted(targets.items())
    ]


async def _commit_offsets(settings: Settings, rewinds: list[Rewind]) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as KafkaTP
    from aiokafka.structs import OffsetAndMetadata

    targets = {KafkaTP(r.topic, r.partition): r.offset for r in rewinds}
    consumer = AIOKafkaConsumer(
        **kafka_options(settings, group_id=settings.group, enable_auto_commit=False)
    )
    await consumer.start()
    try:
        consumer.assign(list(targets))
        await consumer.commit({tp: OffsetAndMetadata(offset, "") for tp, offset in targets.items()})
    finally:
        await consumer.stop()
