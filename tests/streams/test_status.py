"""The status document and its human form: TSOs with UTC times and ages, lag in messages."""

from __future__ import annotations

import pytest

from config.settings import OnError
from core.model import DDLEvent, Resolved
from core.staging import Staging, TopicPartition
from streams.codecs import codec_for
from streams.schema_store import RedisSchemaStore
from streams.status import UNKNOWN_OWNER, partition_owners, render, snapshot
from streams.worker.stager import MessageStager
from tests.streams.worker.records import simple_messages, stage_batch

# 2024-04-11T01:31:12.265Z and ten seconds later.
TS = 1_712_799_072_265 << 18
NOW = 1_712_799_082.265


@pytest.mark.integration
def test_the_document_gives_every_tso_its_time_and_the_lag_in_messages(
    staging: Staging,
) -> None:
    staging.set_partition_count("t", 2)
    stager = MessageStager(staging, codec_for("open"), OnError.DEADLETTER)
    (mark,) = codec_for("open").encode([Resolved(TS)])
    stage_batch(stager, [(TopicPartition("t", 0), 0, mark.key, mark.value)])
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    document = snapshot(staging, {tp0: 1, tp1: None}, {tp0: 5, tp1: 3}, TS - (2000 << 18), NOW)
    assert document["global_resolved_ts"] is None
    assert document["blocking_partitions"] == ["t:1"]
    assert document["checkpoint_time"] == "2024-04-11T01:31:10.265Z"
    assert document["replication_lag_seconds"] == 12.0
    first, second = document["partitions"]
    assert first["watermark_time"] == "2024-04-11T01:31:12.265Z"
    assert (first["lag_messages"], second["lag_messages"]) == (4, 3)
    assert second["watermark_time"] is None
    assert (first["held_messages"], second["held_messages"]) == (0, 0)


@pytest.mark.integration
def test_the_document_counts_held_messages_per_partition(staging: Staging) -> None:
    staging.set_partition_count("t", 2)
    _, dml, _, _ = simple_messages()
    schemas = RedisSchemaStore(staging.schemas())
    stager = MessageStager(staging, codec_for("simple", schemas), OnError.DEADLETTER)
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    stage_batch(stager, [(tp1, 0, None, dml.value), (tp1, 1, None, dml.value)])
    stage_batch(stager, [(tp0, 0, None, dml.value)])
    document = snapshot(staging, {}, {}, None, NOW)
    held = {(p["partition"], p["held_messages"]) for p in document["partitions"]}
    assert held == {(0, 1), (1, 2)}


def test_the_human_form_shows_times_ages_and_says_when_there_is_no_checkpoint() -> None:
    document = {
        "pipeline": "shop",
        "global_resolved_ts": TS,
        "checkpoint_ts": None,
        "staged_rows": 3,
        "staged_bytes": 90,
        "dead_letters": 0,
        "blocking_partitions": ["t:0"],
        "redis": {"slot": 866, "master": "10.0.0.5:7001", "replicas": ["10.0.0.6:7004"]},
        "blocking_topics": ["u"],
        "topics": [
            {"topic": "t", "partitions": 2, "recorded": True},
            {"topic": "u", "partitions": 1, "recorded": False},
        ],
        "partitions": [
            {
                "topic": "t",
                "partition": 0,
                "watermark": TS,
                "watermark_time": "2024-04-11T01:31:12.265Z",
                "staged_rows": 3,
                "held_messages": 2,
                "committed_offset": 1,
                "high_watermark": 5,
                "lag_messages": 4,
                "owner": "faust-0.15.3@10.0.0.7",
            },
            {
                "topic": "t",
                "partition": 1,
                "watermark": None,
                "watermark_time": None,
                "staged_rows": 0,
                "held_messages": 0,
                "committed_offset": None,
                "high_watermark": 0,
                "lag_messages": 0,
                "owner": None,
            },
        ],
    }
    text = render(document, now=NOW)
    assert f"global resolved ts  {TS} (2024-04-11T01:31:12.265Z, 10.0 s ago)" in text
    assert "checkpoint ts       none recorded yet" in text
    assert "lag (messages)" in text
    assert "  redis: slot 866 on master 10.0.0.5:7001, replicas online: 10.0.0.6:7004" in text
    assert "topics              t (2 partitions), u (1 partition, not recorded yet" in text
    held, free = text.splitlines()[-2:]
    assert held.split() == [
        "t:0", "2024-04-11T01:31:12.265Z", "3", "2", "1", "5", "4", "faust-0.15.3@10.0.0.7"
    ]  # fmt: skip
    assert free.split() == ["t:1", "-", "0", "0", "-", "0", "0", "none"]
    assert "None" not in text


def _member(client: str, host: str, assignment: bytes) -> dict[str, object]:
    return {"client_id": client, "client_host": host, "member_assignment": assignment}


def _assignment(topic: str, *partitions: int) -> bytes:
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

    return ConsumerProtocolMemberAssignment(4, [(topic, list(partitions))], b"faust").encode()


def test_each_partition_is_owned_by_the_member_kafka_assigned_it_to() -> None:
    tps = [TopicPartition("t", n) for n in range(3)]
    group = {
        "state": "Stable",
        "members": [
            _member("faust-0.15.3", "/10.0.0.7", _assignment("t", 0, 2)),
            _member("faust-0.15.3", "/10.0.0.8", _assignment("t", 1)),
        ],
    }
    assert partition_owners(group, tps) == {
        tps[0]: "faust-0.15.3@10.0.0.7",
        tps[1]: "faust-0.15.3@10.0.0.8",
        tps[2]: "faust-0.15.3@10.0.0.7",
    }


def test_an_owner_kafka_cannot_name_is_unknown_and_no_member_is_none() -> None:
    tps = [TopicPartition("t", 0)]
    rebalancing = {"state": "CompletingRebalance", "members": [_member("c", "/h", b"")]}
    assert partition_owners(rebalancing, tps) == {tps[0]: UNKNOWN_OWNER}
    assert partition_owners(None, tps) == {tps[0]: UNKNOWN_OWNER}
    assert partition_owners({"state": "Empty", "members": []}, tps) == {tps[0]: None}


@pytest.mark.integration
def test_a_topic_whose_table_went_away_is_left_out_while_kafka_has_nothing_new_on_it(
    staging: Staging,
) -> None:
    staging.set_partition_count("t", 1)
    staging.set_partition_count("u", 1)
    t, u = TopicPartition("t", 0), TopicPartition("u", 0)
    staging.stage(t, 0, [], [DDLEvent(TS, "db", "t", "DROP TABLE `db`.`t`", 4)])
    staging.stage(t, 1, [], watermark=TS)
    staging.stage(u, 0, [], watermark=TS + 9)
    document = snapshot(staging, {}, {t: 2, u: 1}, None, NOW)
    assert document["global_resolved_ts"] == TS + 9
    assert (document["retired_topics"], document["blocking_partitions"]) == (["t"], ["u:0"])
    assert "  left out (table or database dropped, or table renamed): t" in render(
        document, now=NOW
    )
    # A message on it not staged yet (the table made again): it holds at the DROP.
    document = snapshot(staging, {}, {t: 3, u: 1}, None, NOW)
    assert (document["global_resolved_ts"], document["retired_topics"]) == (TS, [])
