"""`ticdc-sink status`: where every partition stands, and what holds the global resolved ts back."""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Any

from config.settings import Settings
from core.kafka_client import kafka_options
from core.staging import Staging, TopicPartition, past_retired
from core.topics import matched_topics, unrecorded
from core.tso import describe_tso, tso_fields

# A partition's owner when Kafka cannot say (a rebalance under way, the group not readable).
UNKNOWN_OWNER = "unknown"


@dataclass(frozen=True)
class KafkaView:
    """What Kafka says of the pipeline's partitions: the group's committed offsets, the log end
    offsets, and which member of the group holds each partition (None: the group has none)."""

    committed: dict[TopicPartition, int | None]
    ends: dict[TopicPartition, int]
    owners: dict[TopicPartition, str | None]


async def kafka_offsets(
    settings: Settings, partitions: list[TopicPartition]
) -> tuple[dict[TopicPartition, int | None], dict[TopicPartition, int]]:
    """The group's committed offset and the log end offset of each partition."""
    view = await kafka_view(settings, partitions)
    return view.committed, view.ends


async def kafka_view(settings: Settings, partitions: list[TopicPartition]) -> KafkaView:
    """Offsets and owners of ``partitions`` (see :class:`KafkaView`)."""
    if not partitions:
        return KafkaView({}, {}, {})
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as KafkaTP
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        committed_raw = await admin.list_consumer_group_offsets(settings.group)
        try:
            described = await admin.describe_consumer_groups([settings.group])
            groups = [group for response in described for group in response.to_object()["groups"]]
        except KafkaError:
            groups = []
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
    return KafkaView(
        committed,
        {tp: ends[KafkaTP(tp.topic, tp.partition)] for tp in partitions},
        partition_owners(groups[0] if groups else None, partitions),
    )


async def pattern_topics(settings: Settings) -> dict[str, int] | None:
    """The topics ``TICDC_SINK_TOPICS_PATTERN`` matches in Kafka, with their partition counts
    (None without a pattern)."""
    return await matched_topics(settings) if settings.kafka.topics_pattern else None


def partition_owners(
    group: dict[str, Any] | None, partitions: list[TopicPartition]
) -> dict[TopicPartition, str | None]:
    """Each partition's owner, as ``client id@host``, from the group's DescribeGroups entry:
    None when the group has no member, :data:`UNKNOWN_OWNER` when members hold it but Kafka
    does not say which (a rebalance under way, an assignment it cannot read, no entry)."""
    if group is not None and not group["members"]:
        return dict.fromkeys(partitions)
    held: dict[TopicPartition, str] = {}
    for member in group["members"] if group is not None else []:
        owner = f"{member['client_id']}@{member['client_host'].lstrip('/')}"
        for tp in assigned(member["member_assignment"]):
            held[tp] = owner
    return {tp: held.get(tp, UNKNOWN_OWNER) for tp in partitions}


def assigned(assignment: bytes) -> list[TopicPartition]:
    """The partitions of a consumer-protocol member assignment (none while it is empty or not
    of that protocol)."""
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

    try:
        decoded = ConsumerProtocolMemberAssignment.decode(assignment)
    except (ValueError, struct.error, UnicodeDecodeError):
        return []
    return [
        TopicPartition(topic, partition)
        for topic, partitions in decoded.assignment
        for partition in partitions
    ]


def snapshot(
    staging: Staging,
    committed: dict[TopicPartition, int | None],
    ends: dict[TopicPartition, int],
    checkpoint_ts: int | None,
    now: float | None = None,
    owners: dict[TopicPartition, str | None] | None = None,
    matched: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The status document (the ``--json`` form): every TSO with its UTC time and age at
    ``now`` (default: the clock), Kafka lag in messages, each partition's owner in ``owners``
    (:data:`UNKNOWN_OWNER` for one it lacks; None: no member of the group holds it), and the
    topics: those ``TICDC_SINK_TOPICS_PATTERN`` ``matched`` in Kafka (topic -> partitions), each
    recorded in staging or not yet, or without a pattern those recorded."""
    now = time.time() if now is None else now
    recorded = staging.partition_counts()
    listed = recorded if matched is None else matched
    waiting = unrecorded(recorded, listed)
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
                "owner": UNKNOWN_OWNER if owners is None else owners.get(tp, UNKNOWN_OWNER),
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
    resolved, retired = past_retired(staging.standing(), ends)
    # While any partition has no watermark, those partitions alone hold the pipeline back.
    unknown = [tp for tp, mark in marks.items() if mark is None]
    blocking = unknown or [
        tp for tp, mark in marks.items() if mark == resolved and tp.topic not in retired
    ]
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
        # Topics whose table was dropped or renamed away: left out of the global resolved ts.
        "retired_topics": retired,
        # Matched in Kafka, not yet recorded by a worker: the sink applies nothing new until.
        "blocking_topics": waiting,
        "topics": [
            {"topic": topic, "partitions": count, "recorded": topic not in waiting}
            for topic, count in sorted(listed.items())
        ],
        "staged_rows": staged_rows,
        "staged_bytes": staged_bytes,
        "dead_letters": staging.dead_letters.count(),
        "redis": staging.placement(),
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
        *(
            [f"  left out (table or database dropped, or table renamed): {', '.join(retired)}"]
            if (retired := document.get("retired_topics"))
            else []
        ),
        "  topics              "
        + (", ".join(_topic_cell(topic) for topic in document["topics"]) or "-"),
        _placement(document.get("redis")),
        "{:24} {:>24} {:>8} {:>6} {:>10} {:>10} {:>14}  {}".format(
            "partition",
            "watermark (UTC)",
            "staged",
            "held",
            "committed",
            "end",
            "lag (messages)",
            "owner",
        ),
    ]
    for row in document["partitions"]:
        name = f"{row['topic']}:{row['partition']}"
        cells = [
            _cell(row[field])
            for field in (
                "watermark_time",
                "staged_rows",
                "held_messages",
                "committed_offset",
                "high_watermark",
            )
        ]
        lines.append(
            f"{name:24} {cells[0]:>24} {cells[1]:>8} {cells[2]:>6} {cells[3]:>10} {cells[4]:>10} "
            f"{_cell(row['lag_messages']):>14}  {_cell(row['owner'], none='none')}"
        )
    return "\n".join(lines)


def _topic_cell(topic: dict[str, Any]) -> str:
    recorded = "" if topic["recorded"] else ", not recorded yet: holds the sink"
    count = topic["partitions"]
    return f"{topic['topic']} ({count} partition{'' if count == 1 else 's'}{recorded})"


def _cell(value: object, none: str = "-") -> str:
    """A value of the table: ``none`` for a value Kafka or Redis does not have."""
    return none if value is None else str(value)


def _placement(placement: dict[str, Any] | None) -> str:
    """Where the pipeline's keys live, as the status shows it."""
    if not placement:
        return "  redis: -"
    replicas = placement["replicas"]
    online = "unknown" if replicas is None else ", ".join(replicas) or "none"
    if placement["slot"] is None:
        return f"  redis: one server, replicas online: {online}"
    return (
        f"  redis: slot {placement['slot']} on master {placement['master']}, "
        f"replicas online: {online}"
    )
