"""Simple (JSON) messages breaking each rule of its grammar (streams/codecs/simple_grammar.py) on
the workload's own table, sent between its two halves to every partition: the worker and the sink
never exit, each is one dead letter naming its rule, and the workload replicates row-exact (no
downstream row changed because of them). The rules an image breaks against its table's schema
are broken on a real row of the workload; the others are the grammar's examples, renamed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from streams.codecs import KafkaMessage
from streams.codecs import simple_grammar as grammar
from tests.ticdc_sink.pipelines import ON_EVERY_SERVER, assert_grammar_live
from ticdc_sink.produce import expected_state, scenario_messages
from ticdc_sink.scenario import Scenario

pytestmark = pytest.mark.integration

PARTITIONS = 2
# The rules an image breaks against its table's schema: shown on the workload's own rows.
_ON_ROWS = {grammar.IMAGE_COLUMNS, grammar.COLUMN_VALUE, grammar.HANDLE_KEY_ONLY}


def _renamed(example: str, row: dict[str, Any]) -> str:
    names = {
        '"database":"db"': f'"database":{json.dumps(row["database"])}',
        '"schema":"db"': f'"schema":{json.dumps(row["database"])}',
        '"table":"t"': f'"table":{json.dumps(row["table"])}',
        '"commitTs":5': f'"commitTs":{row["commitTs"]}',
    }
    for old, new in names.items():
        example = example.replace(old, new)
    return example


def _on_row(rule: str, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (an INSERT of the workload) made to break ``rule``."""
    broken = json.loads(json.dumps(row))
    data = broken["data"]
    if rule == grammar.IMAGE_COLUMNS:
        data["no such column"] = "1"
    elif rule == grammar.COLUMN_VALUE:
        data[next(iter(data))] = ["1"]
    else:
        broken["handleKeyOnly"] = True
    return broken


def _malformed(row: dict[str, Any]) -> list[tuple[str, KafkaMessage]]:
    out = []
    for rule in grammar.RULES:
        if rule.name in _ON_ROWS:
            out.append((rule.name, KafkaMessage(None, orjson.dumps(_on_row(rule.name, row)))))
            continue
        for example in rule.examples:
            out.append((rule.name, KafkaMessage(None, _renamed(example, row).encode())))
    return out


@ON_EVERY_SERVER
def test_messages_breaking_the_grammar_are_dead_letters_and_the_workload_replicates(
    pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    scenario = Scenario(seed=40, transactions=80, schema=unique)
    messages, final = scenario_messages(scenario, "simple", PARTITIONS, seed=40)
    row = next(
        parsed
        for _, message in messages[: len(messages) // 2]
        if (parsed := orjson.loads(message.value)).get("type") == "INSERT"
    )
    expected = tmp_path / "expected.json"
    expected.write_bytes(orjson.dumps(expected_state(scenario, "simple")))
    assert_grammar_live(pipeline, "simple", messages, final, expected, _malformed(row))
