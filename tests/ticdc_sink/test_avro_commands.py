"""`produce --protocol avro` and `decode --protocol avro` against the real registry and Kafka
(`ticdc-sink services up --registry`): a topic per table, its schemas registered, and what
`decode` reads back from the topics replays to the state `produce` expects."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from config.settings import Settings
from core.kafka_client import kafka_options
from ticdc_sink.produce import run_produce
from ticdc_sink.scenario import KEYS

pytestmark = pytest.mark.integration

PARTITIONS = 2


def _decode(settings: Settings, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "TICDC_SINK_SCHEMA_REGISTRY": settings.schema_registry.url}
    return subprocess.run(
        [sys.executable, "-m", "ticdc_sink", "decode", "--protocol", "avro", *args],
        capture_output=True,
        check=False,
        env=env,
    )


async def _read_topic(settings: Settings, topic: str) -> list[dict[str, Any]]:
    """Every message of ``topic`` as a stream file's line ({p, k, v}, base64)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic, auto_offset_reset="earliest", enable_auto_commit=False, **kafka_options(settings)
    )
    await consumer.start()
    lines: list[dict[str, Any]] = []
    try:
        while batch := await consumer.getmany(timeout_ms=3000):
            for records in batch.values():
                for record in records:
                    key = None if record.key is None else base64.b64encode(record.key).decode()
                    value = base64.b64encode(record.value or b"").decode()
                    lines.append({"p": record.partition, "k": key, "v": value})
    finally:
        await consumer.stop()
    return lines


async def _delete_topics(settings: Settings, topics: list[str]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        await admin.delete_topics(topics)
    finally:
        await admin.close()


def test_produced_avro_topics_decode_to_the_expected_tables(
    settings: Settings, schema_registry: Any, kafka_admin: Any, unique: str, tmp_path: Path
) -> None:
    expected_path = tmp_path / "expected.json"
    run_produce(
        settings, unique, "avro", PARTITIONS, 60, seed=5, expected=expected_path,
        registry=schema_registry,
    )  # fmt: skip
    expected = json.loads(expected_path.read_bytes())
    # TiCDC's Avro protocol cannot carry a key-less table's deletes: the stream leaves it out.
    assert sorted(expected) == ["shop.customers", "shop.orders"]
    topics = [f"{unique}_shop_customers", f"{unique}_shop_orders"]
    try:
        for topic in topics:
            table = topic.rsplit("_", 1)[1]
            stream = tmp_path / f"{table}.jsonl"
            lines = asyncio.run(_read_topic(settings, topic))
            stream.write_text("".join(json.dumps(line) + "\n" for line in lines))
            result = _decode(settings, "--stream", str(stream))
            assert result.returncode == 0, result.stderr
            events = [json.loads(line) for line in result.stdout.splitlines()]
            kinds = {event["type"] for event in events}
            assert kinds == {"row", "ddl", "resolved"}
            want = expected[f"shop.{table}"]
            assert _replayed(events, want["columns"], KEYS[table]) == sorted(want["rows"])
    finally:
        asyncio.run(_delete_topics(settings, topics))


def _replayed(events: list[dict[str, Any]], columns: list[str], key: tuple[str, ...]) -> list[Any]:
    """The table the rows leave, replayed in each partition's order (a table's rows share one
    partition under TiCDC's default dispatcher)."""
    state: dict[tuple[Any, ...], list[Any]] = {}
    for event in events:
        if event["type"] != "row":
            continue
        if event["op"] == "delete":
            state.pop(tuple(event["old"][name] for name in key))
        else:
            row = event["new"]
            state[tuple(row[name] for name in key)] = [row.get(name) for name in columns]
    return sorted(state.values())


def test_an_id_the_registry_does_not_know_exits_2_naming_it(
    settings: Settings, schema_registry: Any, tmp_path: Path
) -> None:
    value = tmp_path / "value"
    value.write_bytes(b"\x00" + (2_000_000_007).to_bytes(4, "big") + b"\x02")
    result = _decode(settings, str(value))
    assert result.returncode == 2
    assert b"schema id 2000000007 is unknown to the schema registry" in result.stderr
    assert b"Traceback" not in result.stderr
