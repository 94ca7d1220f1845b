"""Simple Avro messages breaking each rule of the Simple grammar (streams/codecs/simple_grammar.py)
an Avro record can break, on the workload's own table, sent between its two halves to every
partition: the worker and the sink never exit, each is one dead letter naming its rule, and the
workload replicates row-exact (no downstream row changed because of them).

Each is an INSERT of the workload (its table, schema version and commit ts) read back as the
Avro datum TiCDC wrote (tiflow pkg/sink/codec/simple/avro.go), changed and written again under
TiCDC's schema; a table schema's are a BOOTSTRAP of that table. ``message-object`` and
``ts-fields`` have no Avro form: the schema makes every message a record, its timestamps longs."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import fastavro
import orjson
import pytest

from config.settings import Settings
from core.model import Bootstrap, RowChange
from streams.codecs import KafkaMessage
from streams.codecs import simple_grammar as grammar
from streams.codecs.simple_avro import SimpleAvroCodec, avro_schema
from tests.ticdc_sink.pipelines import ON_EVERY_SERVER, assert_grammar_live
from ticdc_sink.produce import expected_state, scenario_messages
from ticdc_sink.scenario import Scenario

pytestmark = pytest.mark.integration

PARTITIONS = 2
N = "com.pingcap.simple.avro."


def _read(value: bytes) -> dict[str, Any]:
    """The Message record of ``value``, its union members named as the writer takes them."""
    datum: Any = fastavro.schemaless_reader(
        io.BytesIO(value), avro_schema(), None, return_record_name=True
    )
    return datum[1]  # type: ignore[no-any-return]


def _written(message: dict[str, Any]) -> KafkaMessage:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, avro_schema(), (N + "Message", message))
    return KafkaMessage(None, out.getvalue())


def _dml(insert: dict[str, Any], **changed: Any) -> KafkaMessage:
    message = copy.deepcopy(insert)
    record = message["payload"][1]
    # A double read back is written again as a double, not as the union's first fitting branch.
    record["data"] = {
        name: ("double", value) if isinstance(value, float) else value
        for name, value in record["data"].items()
    }
    record.update(changed)
    return _written(message)


def _typed(insert: dict[str, Any], kind: str) -> KafkaMessage:
    """``insert`` under another message type (it would be read as a watermark, ...)."""
    message = copy.deepcopy(insert)
    message["type"] = kind
    return _written(message)


def _bootstrap(table: dict[str, Any]) -> KafkaMessage:
    payload = {"version": 1, "buildTs": 0, "tableSchema": table}
    return _written({"type": "BOOTSTRAP", "payload": (N + "Bootstrap", payload)})


def _malformed(
    insert: dict[str, Any], table: dict[str, Any], kinds: dict[str, str]
) -> list[tuple[str, KafkaMessage]]:
    """Each rule an Avro record can break, broken on ``insert`` (an INSERT of the workload)
    whose table's Avro schema is ``table`` and column types ``kinds``."""
    record = insert["payload"][1]
    data = record["data"]
    column = next(iter(data))
    # A union branch TiCDC never writes for the column's type.
    wrong = (
        ("long", 1)
        if kinds[column] == "timestamp"
        else (N + "Timestamp", {"location": "UTC", "value": "1"})
    )
    ddl = {"version": 1, "type": "CREATE", "sql": " ", "commitTs": record["commitTs"]}
    ddl |= {"buildTs": 0, "tableSchema": None, "preTableSchema": None}
    index = {"name": "i", "unique": True, "primary": False, "nullable": False}
    return [
        (grammar.MESSAGE_TYPE, _typed(insert, "WATERMARK")),
        (grammar.MESSAGE_TYPE, _typed(insert, "BOOTSTRAP")),
        (grammar.MESSAGE_TYPE, _typed(insert, "DDL")),
        (grammar.VERSION_RULE, _dml(insert, version=2)),
        (grammar.DML_FIELDS, _dml(insert, database="")),
        (grammar.DML_FIELDS, _dml(insert, table="")),
        (grammar.ROW_IMAGES, _dml(insert, old=data)),
        (grammar.ROW_IMAGES, _dml(insert, type="UPDATE")),
        (grammar.ROW_IMAGES, _dml(insert, type="DELETE")),
        (grammar.ROW_IMAGES, _dml(insert, data={})),
        (grammar.IMAGE_COLUMNS, _dml(insert, data=data | {"no such column": ("string", "1")})),
        (grammar.COLUMN_VALUE, _dml(insert, data=data | {column: wrong})),
        (grammar.HANDLE_KEY_ONLY, _dml(insert, handleKeyOnly=True)),
        (grammar.SCHEMA_MESSAGE, _written({"type": "DDL", "payload": (N + "DDL", ddl)})),
        (grammar.TABLE_SCHEMA, _bootstrap(table | {"columns": []})),
        (grammar.TABLE_SCHEMA, _bootstrap(table | {"table": ""})),
        (grammar.TABLE_SCHEMA, _bootstrap(table | {"indexes": [index | {"columns": ["nope"]}]})),
    ]


def _first_insert(
    messages: list[tuple[int, KafkaMessage]],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """The first INSERT of ``messages`` with more than its key (as read back), its table's
    Avro schema (from the BOOTSTRAP announcing it) and its columns' MySQL types."""
    codec = SimpleAvroCodec()
    tables: dict[tuple[str, str], dict[str, Any]] = {}
    for _, message in messages:
        (event,) = codec.decode(message.key, message.value)
        if isinstance(event, Bootstrap):
            schema = event.table_schema
            tables[(schema.schema, schema.table)] = _read(message.value)["payload"][1][
                "tableSchema"
            ]
        elif (
            isinstance(event, RowChange) and event.op.value == "insert" and len(event.new or {}) > 1
        ):
            table = tables[(event.schema, event.table)]
            kinds = {c["name"]: c["dataType"]["mysqlType"] for c in table["columns"]}
            return _read(message.value), table, kinds
    raise AssertionError("the workload's first half has no INSERT")


@ON_EVERY_SERVER
def test_messages_breaking_the_grammar_are_dead_letters_and_the_workload_replicates(
    pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    scenario = Scenario(seed=40, transactions=80, schema=unique)
    messages, final = scenario_messages(scenario, "simple-avro", PARTITIONS, seed=40)
    insert, table, kinds = _first_insert(messages[: len(messages) // 2])
    expected = tmp_path / "expected.json"
    expected.write_bytes(orjson.dumps(expected_state(scenario, "simple-avro")))
    assert_grammar_live(
        pipeline, "simple-avro", messages, final, expected, _malformed(insert, table, kinds)
    )
