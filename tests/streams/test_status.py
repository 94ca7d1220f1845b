"""The status document and its human form: TSOs with UTC times and ages, lag in messages."""

from __future__ import annotations

import pytest

from config.settings import OnError
from core.model import Resolved
from core.staging import Staging, TopicPartition
from streams.codecs import codec_for
from streams.schema_store import RedisSchemaStore
from streams.status import render, snapshot
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
            }
        ],
    }
    text = render(document, now=NOW)
    assert f"global resolved ts  {TS} (2024-04-11T01:31:12.265Z, 10.0 s ago)" in text
    assert "checkpoint ts       none recorded yet" in text
    assert "lag (messages)" in text
    assert text.splitlines()[-1].split() == [
        "t:0",
        "2024-04-11T01:31:12.265Z",
        "3",
        "2",
        "1",
        "5",
        "4",
    ]
