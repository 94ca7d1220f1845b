"""Debezium messages breaking each rule of TiCDC's Debezium grammar
(streams/codecs/debezium_grammar.py), naming the workload's own table at one of its commit ts,
sent between its two halves to every partition: the worker and the sink never exit, each is one
dead letter naming its rule, and the workload replicates row-exact (no downstream row changed
because of them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config.settings import Settings
from core.model import RowChange
from streams.codecs import KafkaMessage
from streams.codecs import debezium_grammar as grammar
from streams.codecs.debezium import DebeziumCodec
from tests.ticdc_sink.pipelines import ON_EVERY_SERVER, assert_grammar_live_on_a_row

pytestmark = pytest.mark.integration


def _malformed(row: RowChange) -> list[tuple[str, KafkaMessage]]:
    """Each rule's examples as one message, naming ``row``'s table at its commit ts."""
    out = []
    for rule in grammar.RULES:
        for key, value in rule.examples:
            message = json.loads(value)
            payload = message.get("payload") if isinstance(message, dict) else None
            source = payload.get("source") if isinstance(payload, dict) else None
            if isinstance(source, dict):
                for name, example, found in (("db", "db", row.schema), ("table", "t", row.table)):
                    if source.get(name) == example:
                        source[name] = found
                if source.get("commit_ts") == 5:
                    source["commit_ts"] = row.commit_ts
            data = json.dumps(message).encode()
            out.append((rule.name, KafkaMessage(key.encode() or None, data)))
    return out


@ON_EVERY_SERVER
def test_messages_breaking_the_grammar_are_dead_letters_and_the_workload_replicates(
    pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    assert_grammar_live_on_a_row(
        pipeline, unique, tmp_path, "debezium", DebeziumCodec(), _malformed
    )
