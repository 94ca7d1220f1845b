"""Canal-JSON messages breaking each rule of its grammar (streams/codecs/canal_grammar.py),
naming the workload's own table at one of its commit ts, sent between its two halves to every
partition: the worker and the sink never exit, each is one dead letter naming its rule, and the
workload replicates row-exact (no downstream row changed because of them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config.settings import Settings
from core.model import RowChange
from streams.codecs import KafkaMessage
from streams.codecs import canal_grammar as grammar
from streams.codecs.canal_json import CanalJSONCodec
from tests.ticdc_sink.pipelines import ON_EVERY_SERVER, assert_grammar_live_on_a_row

pytestmark = pytest.mark.integration


def _malformed(row: RowChange) -> list[tuple[str, KafkaMessage]]:
    """Each rule's examples as one message, naming ``row``'s table at its commit ts."""
    out = []
    for rule in grammar.RULES:
        for _, value in rule.examples:
            message = json.loads(value)
            if isinstance(message, dict):
                if message.get("database") == "db":
                    message["database"] = row.schema
                if message.get("table") == "t":
                    message["table"] = row.table
                extension = message.get("_tidb")
                if isinstance(extension, dict) and extension.get("commitTs") == 5:
                    extension["commitTs"] = row.commit_ts
            out.append((rule.name, KafkaMessage(None, json.dumps(message).encode())))
    return out


@ON_EVERY_SERVER
def test_messages_breaking_the_grammar_are_dead_letters_and_the_workload_replicates(
    pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    assert_grammar_live_on_a_row(
        pipeline, unique, tmp_path, "canal-json", CanalJSONCodec(), _malformed
    )
