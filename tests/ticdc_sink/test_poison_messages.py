"""Poison messages at the head of every partition, then a normal workload: the worker never exits,
each poison message is one dead letter, and the workload replicates row-exact. Values past their
declared length or ENUM members are poison too."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from core.model import ColumnSchema, IndexSchema, TableSchema
from core.redis_client import redis_client
from core.staging import Staging
from streams.codecs import KafkaMessage
from streams.codecs.simple_schema import table_schema_json
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

PARTITIONS = 3
DEEP = 1_000
# Low, so that the message whose schema never comes is dead-lettered within the workload.
HELD_MAX_MESSAGES = 20
# The one message of the poison that is not: the BOOTSTRAP of the table declaring lengths.
_BOOTSTRAP_OFFSET = 5


def _past_declarations(first_insert: dict[str, Any]) -> list[bytes]:
    """A table declaring a VARCHAR(3) and a 2-member ENUM (the workload's own schemas declare
    no lengths), then a row of each past its declaration: the BOOTSTRAP is staged, each row is
    one dead letter."""
    table = TableSchema(
        first_insert["database"],
        "poison_limits",
        0,
        1,
        (
            ColumnSchema("id", "int", nullable=False),
            ColumnSchema("v", "varchar", "utf8mb4", "utf8mb4_bin", length=3),
            ColumnSchema("e", "enum", "utf8mb4", "utf8mb4_bin", length=1, elements=("a", "b")),
        ),
        (IndexSchema("primary", True, True, False, ("id",)),),
    )
    bootstrap = {"version": 1, "type": "BOOTSTRAP", "commitTs": 0, "buildTs": 0}
    row = {
        "version": 1,
        "database": table.schema,
        "table": table.table,
        "tableID": 0,
        "type": "INSERT",
        "commitTs": first_insert["commitTs"],
        "buildTs": 0,
        "schemaVersion": table.version,
    }
    return [
        orjson.dumps({**bootstrap, "tableSchema": table_schema_json(table)}),
        # 4 characters in a VARCHAR(3).
        orjson.dumps({**row, "data": {"id": "1", "v": "abcd", "e": "1"}}),
        # The 3rd member of a 2-member ENUM.
        orjson.dumps({**row, "data": {"id": "2", "v": "abc", "e": "3"}}),
    ]


def _poison(first_insert: dict[str, Any]) -> list[bytes]:
    """One Simple message of each class, made from the workload's first INSERT (its table's
    schema comes only later in the partition, so those of its table are held first)."""

    def insert(**changes: Any) -> bytes:
        return orjson.dumps({**first_insert, **changes})

    data = first_insert["data"]
    # Written as text: orjson does not write what is nested this deep.
    deep = b"[" * DEEP + b"1" + b"]" * DEEP
    return [
        # Integers past 64 bits, either way, in the integer key.
        insert(data={**data, "id": str(1 << 64)}),
        insert(data={**data, "id": str(-(1 << 63) - 1)}),
        # A value nested 1,000 deep (orjson reads up to 1,024).
        b'{"version":1,"type":"WATERMARK","commitTs":' + deep + b',"buildTs":0}',
        # A row that is not an object.
        insert(data=[1, 2]),
        # Held for a schema that never comes.
        insert(table="never_announced"),
        *_past_declarations(first_insert),
    ]


@ON_EVERY_SERVER
def test_poison_at_the_head_of_every_partition_is_dead_lettered_and_the_rest_replicates(
    pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    scenario = Scenario(seed=31, transactions=120, schema=unique)
    messages, final = scenario_messages(scenario, "simple", PARTITIONS, seed=31)
    # Of a table with an integer key: which table's row comes first depends on the partition
    # its schema name hashes to, and the keyless table has no 'id' to overflow.
    first_insert = next(
        body
        for _, m in messages
        if (body := orjson.loads(m.value)).get("type") == "INSERT" and "id" in body["data"]
    )
    poison = _poison(first_insert)
    head = [(p, KafkaMessage(None, value)) for p in range(PARTITIONS) for value in poison]
    asyncio.run(send(pipeline, unique, PARTITIONS, head + messages))
    expected = tmp_path / "expected.json"
    expected.write_bytes(orjson.dumps(expected_state(scenario)))
    env = pipeline_env(pipeline, "simple", TICDC_SINK_HELD_MAX_MESSAGES=str(HELD_MAX_MESSAGES))
    with pipeline_running(env) as (worker, sink):
        wait_for(
            lambda: applied_resolved_ts(pipeline) >= final or worker.poll() is not None,
            "the workload applied",
        )
        assert worker.poll() is None, "the worker exited"
        assert sink.poll() is None, "the sink exited"
    assert_replicated(pipeline, expected)
    staging = Staging(redis_client(pipeline), unique)
    letters = staging.dead_letters.entries()
    assert sorted((d.tp.partition, d.offset) for d in letters) == [
        (p, offset)
        for p in range(PARTITIONS)
        for offset in range(len(poison))
        if offset != _BOOTSTRAP_OFFSET
    ]
    reasons = {d.offset: d.error for d in letters if d.tp.partition == 0}
    assert "is out of range for a" in reasons[0]
    assert "is out of range for a" in reasons[1]
    assert (
        reasons[2].startswith("GrammarError: simple: breaks rule ts-fields")
        and len(reasons[2]) < 300
    )
    assert "breaks rule row-images: INSERT with 'data' [1, 2]" in reasons[3]
    assert "TICDC_SINK_HELD_MAX_MESSAGES" in reasons[4]
    assert "4 characters, past the 3 a varchar(3) column holds" in reasons[6]
    assert "member 3 is past the 2 members of this enum column" in reasons[7]
    assert staging.held() == []
