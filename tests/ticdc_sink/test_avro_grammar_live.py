"""Avro messages breaking each rule of TiCDC's Avro grammar (streams/codecs/avro_grammar.py), their
schemas registered in the real registry as records of the workload's own table, sent between the
workload's two halves to every partition of that table's topic: the worker and the sink never
exit, each is one dead letter naming its rule, and the workload replicates row-exact (no
downstream row changed because of them)."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from config.settings import Settings
from core.model import RowChange
from streams.codecs import KafkaMessage
from streams.codecs import avro_grammar as grammar
from streams.codecs.avro import AvroCodec
from streams.codecs.avro.wire import topic_for
from streams.schema_registry import SchemaRegistry
from tests.ticdc_sink.pipelines import ON_EVERY_SERVER, assert_grammar_live, delete_topics
from ticdc_sink.produce import avro_topics, expected_state, scenario_messages
from ticdc_sink.scenario import Scenario

pytestmark = pytest.mark.integration

PARTITIONS = 2


def _named(schema: str, row: RowChange) -> str:
    """An example's schema as a record of ``row``'s table (the namespace's database and the
    record's name; a namespace without a database stays one)."""
    parsed = json.loads(schema)
    if isinstance(parsed, dict) and parsed.get("name") == "t":
        parsed["name"] = row.table
    if isinstance(parsed, dict) and parsed.get("namespace") == "default.db":
        parsed["namespace"] = f"default.{row.schema}"
    return json.dumps(parsed)


def _reframed(data: bytes | None, ids: dict[int, int]) -> bytes | None:
    """A Confluent frame naming the example's registry id naming the live registry's instead."""
    if not data or data[0] != 0 or len(data) < 5:
        return data
    return b"\x00" + ids[int.from_bytes(data[1:5], "big")].to_bytes(4, "big") + data[5:]


def _malformed(
    registry: SchemaRegistry, row: RowChange, topic: str
) -> list[tuple[str, KafkaMessage]]:
    """Each rule's examples as one message of ``row``'s table's topic, its schemas registered."""
    # A subject of its own for each schema: a registry checks a subject's schemas for
    # compatibility, and these are not meant to be.
    subjects = (f"{topic}-grammar-{n}" for n in range(1 << 10))

    def register(schema: str) -> int:
        return registry.register(next(subjects), _named(schema, row))

    ids = {
        grammar.KEY_ID: register(grammar.KEY_SCHEMA),
        grammar.VALUE_ID: register(grammar.VALUE_SCHEMA),
    }
    out = []
    for rule in grammar.RULES:
        for key, value, schema in rule.examples:
            if key is None and not value:
                continue  # Kafka carries no record of neither key nor value
            if schema is not None:
                ids[grammar.OTHER_ID] = register(schema)
            framed = _reframed(value, ids)
            assert framed is not None
            out.append((rule.name, KafkaMessage(_reframed(key, ids), framed, topic)))
    return out


@pytest.fixture
def topics_deleted(pipeline: Settings, unique: str) -> Iterator[None]:
    yield
    asyncio.run(delete_topics(pipeline, unique))


@ON_EVERY_SERVER
@pytest.mark.usefixtures("topics_deleted")
def test_messages_breaking_the_grammar_are_dead_letters_and_the_workload_replicates(
    pipeline: Settings, unique: str, tmp_path: Path, schema_registry_url: str
) -> None:
    registry = SchemaRegistry.from_settings(pipeline)
    scenario = Scenario(seed=40, transactions=80, schema=unique)
    codec = functools.partial(AvroCodec, registry, topic_prefix=unique)
    messages, final = scenario_messages(scenario, "avro", PARTITIONS, seed=40, codec=codec)
    reader = AvroCodec(registry)
    row = next(
        event
        for _, message in messages[: len(messages) // 2]
        if message.value
        for event in reader.decode(message.key, message.value)
        if isinstance(event, RowChange) and message.key
    )
    topic = topic_for(unique, row.schema, row.table)
    expected = tmp_path / "expected.json"
    expected.write_bytes(orjson.dumps(expected_state(scenario, "avro")))
    assert_grammar_live(
        pipeline.updated({"topics": (unique,)}),
        "avro",
        messages,
        final,
        expected,
        _malformed(registry, row, topic),
        avro_topics(unique, scenario),
        TICDC_SINK_TOPICS="",
        TICDC_SINK_TOPICS_PATTERN=f"{unique}_.+",
        TICDC_SINK_SCHEMA_REGISTRY=schema_registry_url,
    )
