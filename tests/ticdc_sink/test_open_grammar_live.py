"""Open Protocol events breaking each rule of its grammar (streams/codecs/open_grammar.py), on
the workload's own tables, sent between its two halves to every partition: the worker and the sink
never exit, each such event is one dead letter naming its rule, and the workload replicates
row-exact (no downstream row changed because of them)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from core.redis_client import redis_client
from core.staging import Staging
from streams.codecs import KafkaMessage
from streams.codecs import open_grammar as grammar
from streams.codecs.open_protocol import split_frames
from tests.ticdc_sink.pipelines import (
    ON_EVERY_SERVER,
    applied_resolved_ts,
    assert_replicated,
    pipeline_env,
    pipeline_running,
    wait_for,
)
from ticdc_sink.produce import expected_state, scenario_messages, send
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
    half = len(messages) // 2
    row_key = next(
        key
        for _, m in messages[:half]
        if m.key and (key := orjson.loads(split_frames(m.key, 8, "key")[0])).get("t") == 1
    )
    malformed = _malformed(row_key)
    sent_before = [sum(1 for p, _ in messages[:half] if p == part) for part in range(PARTITIONS)]
    middle = [(p, message) for p in range(PARTITIONS) for _, message in malformed]
    asyncio.run(send(pipeline, unique, PARTITIONS, messages[:half] + middle + messages[half:]))
    expected = tmp_path / "expected.json"
    expected.write_bytes(orjson.dumps(expected_state(scenario)))
    with pipeline_running(pipeline_env(pipeline, "open")) as (worker, sink):
        wait_for(
            lambda: applied_resolved_ts(pipeline) >= final or worker.poll() is not None,
            "the workload applied",
        )
        assert worker.poll() is None, "the worker exited"
        assert sink.poll() is None, "the sink exited"
    assert_replicated(pipeline, expected)
    letters = Staging(redis_client(pipeline), unique).dead_letters.entries()
    found = sorted((d.tp.partition, d.offset, d.error) for d in letters)
    assert [(p, o) for p, o, _ in found] == [
        (p, sent_before[p] + i) for p in range(PARTITIONS) for i in range(len(malformed))
    ]
    for partition, offset, error in found:
        rule = malformed[offset - sent_before[partition]][0]
        assert f"breaks rule {rule}" in error, (rule, error)
