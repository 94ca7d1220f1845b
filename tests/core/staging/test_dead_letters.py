"""The dead-letter stream over the real Redis: the cap trims the oldest and counts them."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from prometheus_client import REGISTRY

from config.settings import OnError
from core.staging import Staging, TopicPartition
from streams.codecs import codec_for
from streams.worker.stager import MessageStager
from tests.streams.worker.records import stage_batch

pytestmark = pytest.mark.integration

TP = TopicPartition("topic", 0)


def test_the_stream_keeps_the_newest_entries_and_counts_what_it_trimmed(
    staging: Staging,
) -> None:
    stager = MessageStager(staging, codec_for("open"), OnError.DEADLETTER, dead_letter_max=3)
    stage_batch(stager, [(TP, offset, b"\x00" * 8, b"junk %d" % offset) for offset in range(5)])
    store = staging.dead_letters
    assert store.count() == 3
    assert [letter.offset for letter in store.entries()] == [2, 3, 4]
    trimmed = REGISTRY.get_sample_value(
        "ticdc_sink_dead_letters_trimmed_total", {"pipeline": staging.pipeline}
    )
    assert trimmed == 2


def test_entries_read_back_whole_and_go_one_by_one_or_all(staging: Staging) -> None:
    stager = MessageStager(staging, codec_for("open"), OnError.DEADLETTER)
    stage_batch(stager, [(TP, 7, b"\x01\x02", b"\xff junk"), (TP, 8, None, b"more junk")])
    store = staging.dead_letters
    first, _ = store.entries()
    assert (first.tp, first.offset, first.key, first.value) == (TP, 7, b"\x01\x02", b"\xff junk")
    assert first.error.startswith("DecodeError: open:")
    assert first.time.endswith("Z")
    assert store.get(first.id) == first
    document = first.document()
    assert base64.b64decode(document["value"]) == b"\xff junk"
    assert document["topic"] == "topic" and document["partition"] == 0
    assert store.entries(limit=1) == [first]
    assert store.delete([first.id]) == 1
    assert store.get(first.id) is None
    assert store.purge() == 1
    assert store.count() == 0


def test_both_kinds_read_back_from_one_stream(staging: Staging, redis_client: Any) -> None:
    from core.staging import LetterKind, MessageLetter, RowLetter

    store = staging.dead_letters
    stager = MessageStager(staging, codec_for("open"), OnError.DEADLETTER)
    stage_batch(stager, [(TP, 7, b"k", b"junk")])
    row = {"kind": "row", "table": "shop.t", "key": '{"id":1}', "column": "f", "commit_ts": "42"}
    row |= {"error": "1264 Out of range", "row": '{"id":1,"f":1e39}', "target": "`shop`.`t`"}
    store.add_entries([row, {**row, "before": "null"}], 10)
    # A message letter of an earlier version, without its kind.
    redis_client.xadd(store.key, {"topic": "topic", "partition": 0, "offset": 9, "error": "e"})
    message, unrecorded, recorded, legacy = store.entries()
    assert isinstance(message, MessageLetter) and message.kind is LetterKind.MESSAGE
    assert isinstance(legacy, MessageLetter) and legacy.offset == 9
    assert isinstance(unrecorded, RowLetter) and unrecorded.kind is LetterKind.ROW
    assert (unrecorded.table, unrecorded.commit_ts, unrecorded.before) == ("shop.t", 42, None)
    assert isinstance(recorded, RowLetter) and recorded.before == "null"
    document = recorded.document()
    assert document["kind"] == "row" and document["row"] == {"id": 1, "f": 1e39}
    assert document["key"] == {"id": 1} and document["before"] is None
    assert "before" not in unrecorded.document()
    assert message.document()["kind"] == "message"
