"""The dead-letter stream over the real Redis: the cap trims the oldest and counts them."""

from __future__ import annotations

import base64

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
    assert first.error.startswith("open:")
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
