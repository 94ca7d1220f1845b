"""Open Protocol events breaking each rule of its grammar (streams/codecs/open_grammar.py), on
the workload's own tables, sent between its two halves to every partition: the worker and the sink
never exit, each such event is one dead letter naming its rule, and the workload replicates
row-exact (no downstream row changed because of them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from streams.codecs import KafkaMessage
from streams.codecs import open_grammar as grammar
from streams.codecs.open_protocol import split_frames
from tests.ticdc_sink.pipelines import ON_EVERY_SERVER, assert_grammar_live
from ticdc_sink.produce import expected_state, scenario_messages
from ticdc_sink.scenario import Scenario

pytestmark = pytest.mark.integration

PARTITIONS = 2


def _framed(key: str, value: str) -> KafkaMessage:
    data = key.encode()
    framed_key = (1).to_bytes(8, "big") + len(data).to_bytes(8, "big") + data
    body = value.encode()
    return KafkaMessage(framed_key, len(body).to_bytes(8, "big") + body)


def _malformed(row_key: dict[str, Any]) -> list[tuple[str, KafkaMessage]]:
    """Each rule's examples as one message, a row's key naming a table of the workload at one
    of its commit ts."""
    out = []
    for rule in grammar.RULES:
        for key, value in rule.examples:
            parsed = json.loads(key)
            if isinstance(parsed, dict) and parsed.get("scm") == "db":
                parsed["scm"] = row_key["scm"]
            if isinstance(parsed, dict) and parsed.get("tbl") == "t":
                parsed["tbl"] = row_key["tbl"]
            if isinstance(parsed, dict) and "ts" in parsed and parsed["ts"] == 5:
                parsed["ts"] = row_key["ts"]
            out.append((rule.name, _framed(json.dumps(parsed), value)))
    return out


@ON_EVERY_SERVER
def test_events_breaking_the_grammar_are_dead_letters_and_the_workload_replicates(
    pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    scenario = Scenario(seed=40, transactions=80, schema=unique)
    messages, final = scenario_messages(scenario, "open", PARTITIONS, seed=40)
    row_key = next(
        key
        for _, m in messages[: len(messages) // 2]
        if m.key and (key := orjson.loads(split_frames(m.key, 8, "key")[0])).get("t") == 1
    )
    expected = tmp_path / "expected.json"
    expected.write_bytes(orjson.dumps(expected_state(scenario)))
    assert_grammar_live(pipeline, "open", messages, final, expected, _malformed(row_key))
