"""Craft messages breaking each rule of its grammar (streams/codecs/craft_grammar.py), naming the
workload's own table at one of its commit ts, sent between its two halves to every partition: the
worker and the sink never exit, each is one dead letter naming its rule, and the workload
replicates row-exact (no downstream row changed because of them)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from config.settings import Settings
from core.model import RowChange
from streams.codecs import KafkaMessage
from streams.codecs import craft_grammar as grammar
from streams.codecs.craft import CraftCodec
from tests.streams.codecs.structure.craft import write
from tests.ticdc_sink.pipelines import ON_EVERY_SERVER, assert_grammar_live_on_a_row

pytestmark = pytest.mark.integration


def _malformed(row: RowChange) -> list[tuple[str, KafkaMessage]]:
    """Each rule's examples as one message, its events naming ``row``'s table at its commit ts."""
    out = []
    for rule in grammar.RULES:
        for example in rule.examples:
            tree: dict[str, Any] = copy.deepcopy(example)
            for event in tree["events"]:
                if event.get("schema") == "db":
                    event["schema"] = row.schema
                if event.get("table") == "t":
                    event["table"] = row.table
                if event.get("ts") == 5:
                    event["ts"] = row.commit_ts
            out.append((rule.name, KafkaMessage(b"", write(tree))))
    return out


@ON_EVERY_SERVER
def test_messages_breaking_the_grammar_are_dead_letters_and_the_workload_replicates(
    pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    assert_grammar_live_on_a_row(
        pipeline, unique, tmp_path, "craft", CraftCodec(native=False), _malformed
    )
