"""Width: a table of 500 columns and rows of 1 MB (LONGTEXT, LONGBLOB) replicate row-exact through
a worker and a sink, and one transaction of many 1 MB rows applies in parts of
``TICDC_SINK_CHUNK_ROWS`` without the sink holding it whole.

A 1 MB row is larger than Kafka's default message (1 MiB): as TiCDC with its max-message-bytes
raised, the topic is made to accept such messages and each message carries one row."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from core.model import ColumnType, DDLEvent, MySQLType, Op, RowChange, Value, column_type
from streams.codecs.open_protocol import OpenProtocolCodec
from streams.codecs.values import b64encode
from tests.ticdc_sink.pipelines import (
    applied_resolved_ts,
    assert_replicated,
    pipeline_env,
    pipeline_running,
    wait_for,
)
from ticdc_sink.produce import history_messages, send
from ticdc_sink.scenario import KEY, NULLABLE, START_TS, Transaction

pytestmark = pytest.mark.integration

PARTITIONS = 2
WIDE_COLUMNS = 500
WIDE_ROWS = 20
BIG_ROWS = 96
BIG_VALUE = 1 << 20
CHUNK_ROWS = 4
# Above the sink's peak in parts of CHUNK_ROWS (its base, a few parts in flight, and 1 MB values
# glibc keeps in its heaps), below its peak holding the 96 MB transaction whole: docs/benchmarks.md.
SINK_PEAK_BOUND = 450 << 20
# The broker's and the topic's largest message: one 1 MB row, base64 and JSON around it.
MAX_MESSAGE_BYTES = 4 << 20

BINARY = 128


def _is_text(index: int) -> bool:
    # Every tenth: InnoDB refuses a table whose longest row passes ~8 KiB inline.
    return index % 10 == 0


def _wide_columns() -> dict[str, ColumnType]:
    columns = {"id": column_type(MySQLType.LONG, KEY)}
    for index in range(1, WIDE_COLUMNS):
        kind = MySQLType.VARCHAR if _is_text(index) else MySQLType.LONG
        columns[f"c{index}"] = column_type(kind, NULLABLE)
    return columns


def _wide_ddl(schema: str) -> str:
    parts = ["id INT PRIMARY KEY"]
    for index in range(1, WIDE_COLUMNS):
        parts.append(f"c{index} {'VARCHAR(8)' if _is_text(index) else 'INT'}")
    return f"CREATE TABLE {schema}.wide ({', '.join(parts)})"


BIG_COLUMNS = {
    "id": column_type(MySQLType.LONG, KEY),
    "body": column_type(MySQLType.LONG_BLOB, NULLABLE),
    "data": column_type(MySQLType.LONG_BLOB, NULLABLE | BINARY),
}


def _history(schema: str, rng: random.Random) -> tuple[list[Transaction], dict[str, Any]]:
    """DDL, a transaction of wide rows, then one of BIG_ROWS 1 MB rows (text and binary in
    turn), and the state they leave as ``ticdc-sink verify`` reads it."""
    ts = START_TS
    history = []

    def ddl(table: str | None, query: str, kind: int) -> None:
        nonlocal ts
        ts += 1 << 18
        history.append(Transaction(ts, ddl=DDLEvent(ts, schema, table, query, kind)))

    ddl(None, f"CREATE DATABASE {schema}", 1)
    ddl("wide", _wide_ddl(schema), 3)
    ddl("big", f"CREATE TABLE {schema}.big (id INT PRIMARY KEY, body LONGTEXT, data LONGBLOB)", 3)
    wide = _wide_columns()
    wide_rows = []
    ts += 1 << 18
    for row_id in range(1, WIDE_ROWS + 1):
        image: dict[str, Value] = {"id": row_id}
        for name, kind in wide.items():
            if name != "id":
                is_int = kind.mysql_type == MySQLType.LONG
                image[name] = rng.randint(-(10**9), 10**9) if is_int else f"v{rng.randrange(10**6)}"
        wide_rows.append(image)
    inserts = [RowChange(ts, schema, "wide", Op.INSERT, wide, r, None) for r in wide_rows]
    history.append(Transaction(ts, inserts))
    ts += 1 << 18
    big_rows = []
    for row_id in range(1, BIG_ROWS + 1):
        text = "".join(rng.choices("abcdefghij\t\n\\\"',é", k=BIG_VALUE // 2)) * 2
        blob = rng.randbytes(BIG_VALUE // 2) * 2
        text_row = row_id % 2 == 1
        big_rows.append(
            {"id": row_id, "body": text if text_row else None, "data": None if text_row else blob}
        )
    history.append(
        Transaction(
            ts, [RowChange(ts, schema, "big", Op.INSERT, BIG_COLUMNS, r, None) for r in big_rows]
        )
    )

    def cell(value: Value) -> Any:
        return {"base64": b64encode(value)} if isinstance(value, bytes) else value

    state = {
        f"{schema}.wide": {
            "columns": list(wide),
            "rows": [[cell(r[c]) for c in wide] for r in wide_rows],
        },
        f"{schema}.big": {
            "columns": list(BIG_COLUMNS),
            "rows": [[cell(r[c]) for c in BIG_COLUMNS] for r in big_rows],
        },
    }
    return history, state


def _peak_rss(pid: int) -> int:
    """The peak resident memory of process ``pid`` (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


def _single_row_codec() -> OpenProtocolCodec:
    # TiCDC splits a batch at max-message-bytes; a row of 1 MB is a message of its own.
    return OpenProtocolCodec(max_batch=1)


async def _wide_topic(kafka_admin: Any, topic: str) -> None:
    from aiokafka.admin import NewTopic

    configs = {"max.message.bytes": str(MAX_MESSAGE_BYTES)}
    await kafka_admin.create_topics([NewTopic(topic, PARTITIONS, 1, topic_configs=configs)])


async def test_wide_tables_and_1_mb_rows_replicate_in_bounded_memory(
    pipeline: Settings, unique: str, tmp_path: Path, kafka_admin: Any
) -> None:
    history, state = _history(unique, random.Random(29))
    messages, final = history_messages(history, "open", PARTITIONS, codec=_single_row_codec)
    assert max(len(m.value or b"") for _, m in messages) > 1 << 20
    await _wide_topic(kafka_admin, unique)
    try:
        await send(pipeline, unique, PARTITIONS, messages)
        del messages
        expected = tmp_path / "expected.json"
        expected.write_bytes(orjson.dumps(state))
        del state
        env = pipeline_env(pipeline, "open", TICDC_SINK_CHUNK_ROWS=str(CHUNK_ROWS))
        with pipeline_running(env) as (worker, sink):
            await asyncio.to_thread(
                wait_for,
                lambda: applied_resolved_ts(pipeline) >= final or sink.poll() is not None,
                "the 1 MB rows applied",
                120,
            )
            assert worker.poll() is None and sink.poll() is None, "a process exited"
            peak = _peak_rss(sink.pid)
        assert_replicated(pipeline, expected)
        assert peak < SINK_PEAK_BOUND, f"the sink peaked at {peak >> 20} MiB"
        print(f"sink peak RSS {peak >> 20} MiB at TICDC_SINK_CHUNK_ROWS={CHUNK_ROWS}")
    finally:
        await kafka_admin.delete_topics([unique])
