"""`ticdc-sink status`: where every partition stands, and what holds the global resolved ts back."""

from __future__ import annotations

import time
from typing import Any

from config.settings import Settings
from core.kafka_client import kafka_options
from core.staging import Staging, TopicPartition
from core.tso import describe_tso, tso_fields


async def kafka_offsets(
    settings: Settings, partitions: list[TopicPartition]
) -> tuple[dict[TopicPartition, int | None], dict[TopicPartition, int]]:
    """The group's committed offset and the log end offset of each partition."""
    if not partitions:
        return {}, {}
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as KafkaTP
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        committed_raw = await admin.list_consumer_group_offsets(settings.group)
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(**kafka_options(settings))
    await consumer.start()
    try:
        ends = await consumer.end_offsets([KafkaTP(tp.topic, tp.partition) for tp in partitions])
    finally:
        await consumer.stop()
    committed = {
        tp: (meta.offset if (meta := committed_raw.get(KafkaTP(tp.topic, tp.partition))) else None)
        for tp in partitions
    }
    return committed, {tp: ends[KafkaTP(tp.topic, tp.partition)] for tp in partitions}


def snapshot(
    staging: Staging,
    committed: dict[TopicPartition, int | None],
    ends: dict[TopicPartition, int],
    checkpoint_ts: int | None,
    now: float | None = None,
) -> dict[str, Any]:
    """The status document (the ``--json`` form): every TSO with its UTC time and age at
    ``now`` (default: the clock), Kafka lag in messages."""
    now = time.time() if now is None else now
    marks = staging.watermarks()
    # Simple messages waiting for their table schema: each caps its partition's watermark.
    held: dict[TopicPartition, int] = {}
    for message in staging.held():
        held[message.tp] = held.get(message.tp, 0) + 1
    rows = []
    for tp, mark in marks.items():
        done = committed.get(tp)
        end = ends.get(tp)
        rows.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "owner": None,
                "watermark": mark,
                "watermark_time": tso_fields(mark, now)["time"],
                "staged_rows": staging.staged_rows(tp),
                "staged_offset": staging.staged_offset(tp),
                "held_messages": held.get(tp, 0),
                "committed_offset": done,
                "high_watermark": end,
                "lag_messages": None if end is None else end - (done or 0),
            }
        )
    resolved = staging.global_resolved_ts()
    # While any partition has no watermark, those partitions alone hold the pipeline back.
    unknown = [tp for tp, mark in marks.items() if mark is None]
    blocking = unknown or [tp for tp, mark in marks.items() if mark == resolved]
    staged_rows, staged_bytes = staging.staged_totals()
    resolved_at = tso_fields(resolved, now)
    checkpoint_at = tso_fields(checkpoint_ts, now)
    return {
        "pipeline": staging.pipeline,
        "global_resolved_ts": resolved,
        "global_resolved_time": resolved_at["time"],
        "global_resolved_age_seconds": resolved_at["age_seconds"],
        "checkpoint_ts": checkpoint_ts,
        "checkpoint_time": checkpoint_at["time"],
        # How far the downstream is behind the clock (grows while nothing is applied).
        "replication_lag_seconds": checkpoint_at["age_seconds"],
        "blocking_partitions": [tp.field for tp in blocking],
        "staged_rows": staged_rows,
        "staged_bytes": staged_bytes,
        "dead_letters": staging.dead_letters.count(),
        "partitions": rows,
    }


def render(document: dict[str, Any], now: float | None = None) -> str:
    """The human form of a status document (ages as of ``now``, default: the clock)."""
    checkpoint = document["checkpoint_ts"]
    lines = [
        f"pipeline {document['pipeline']}",
        f"  global resolved ts  {describe_tso(document['global_resolved_ts'], now)}",
        "  checkpoint ts       "
        + ("none recorded yet" if checkpoint is None else describe_tso(checkpoint, now)),
        f"  staged {document['staged_rows']} rows ({document['staged_bytes']} bytes), "
        f"dead letters {document['dead_letters']}",
        f"  blocking the global resolved ts: {', '.join(document['blocking_partitions']) or '-'}",
        "{:24} {:>24} {:>8} {:>6} {:>10} {:>10} {:>14}".format(
            "partition", "watermark (UTC)", "staged", "held", "committed", "end", "lag (messages)"
        ),
    ]
    for row in document["partitions"]:
        name = f"{row['topic']}:{row['partition']}"
        mark = row["watermark_time"] or "-"
        lines.append(
            f"{name:24} {mark:>24} {row['staged_rows']:>8} {row['held_messages']:>6} "
            f"{row['committed_offset']!s:>10} {row['high_watermark']!s:>10} "
            f"{row['lag_messages']!s:>14}"
        )
    return "\n".join(lines)
