"""Debezium messages breaking each rule of TiCDC's Debezium grammar
(streams/codecs/debezium_grammar.py), naming the workload's own table at one of its commit ts,
sent between its two halves to every partition: the worker and the sink never exit, each is one
dead letter naming its rule, and the workload replicates row-exact (no downstream row changed
because of them)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from config.settings import Settings
from core.model import RowChange
from streams.codecs import KafkaMessage
from streams.codecs import debezium_grammar as grammar
from streams.codecs.debezium import DebeziumCodec
from tests.ticdc_sink.pipelines import ON_EVERY_SERVER, assert_grammar_live
from ticdc_sink.produce import expected_state, scenario_messages
from ticdc_sink.scenario import Scenario

pytestmark = pytest.mark.integration

PARTITIONS = 2


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
    scenario = Scenario(seed=40, transactions=80, schema=unique)
    messages, final = scenario_messages(scenario, "debezium", PARTITIONS, seed=40)
    codec = DebeziumCodec()
    row = next(
        event
        for _, message in messages[: len(messages) // 2]
        for event in codec.decode(message.key, message.value)
        if isinstance(event, RowChange)
    )
    expected = tmp_path / "expected.json"
    expected.write_bytes(orjson.dumps(expected_state(scenario, "debezium")))
    assert_grammar_live(pipeline, "debezium", messages, final, expected, _malformed(row))
