"""A pipeline on TICDC_SINK_TOPICS_PATTERN, with a table whose topic is created mid-stream (as
TiCDC's topic dispatcher does): nothing past the new table's first event is applied before a
worker has staged it, and the downstream ends row-exact."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from config.settings import Settings
from core.kafka_client import kafka_options
from core.model import ColumnFlag, DDLEvent, Op, Resolved, RowChange, column_type
from core.redis_client import redis_client
from core.staging import Staging, TopicPartition
from spark_sink.db.connection import connect
from streams.codecs import codec_for
from streams.status import UNKNOWN_OWNER, kafka_view
from tests.ticdc_sink.pipelines import (
    applied_resolved_ts,
    pipeline_env,
    pipeline_running,
    spawn,
    stop,
    wait_for,
)
from ticdc_sink.produce import send

pytestmark = pytest.mark.integration

TS = 449_000_000_000_000_000
KEY = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
COLUMNS = {"id": column_type(3, KEY), "v": column_type(15, int(ColumnFlag.NULLABLE))}
PARTITIONS = 2


def _create(schema: str, table: str, ts: int) -> DDLEvent:
    query = f"CREATE TABLE `{schema}`.`{table}` (id INT PRIMARY KEY, v VARCHAR(20))"
    return DDLEvent(ts, schema, table, query, 3)


def _insert(schema: str, table: str, ts: int, key: int) -> RowChange:
    return RowChange(ts, schema, table, Op.INSERT, COLUMNS, {"id": key, "v": f"{table}{ts}"}, None)


def _messages(events: list[Any], rows: list[RowChange]) -> list[tuple[int, Any]]:
    """``events`` (DDL, watermarks) to every partition, each row to the partition of its key."""
    codec = codec_for("open")
    out: list[tuple[int, Any]] = []
    for event in events:
        if isinstance(event, RowChange):
            continue
        out += [(p, m) for p in range(PARTITIONS) for m in codec.encode([event])]
    for row in rows:
        out += [(int(row.new["id"]) % PARTITIONS, m) for m in codec.encode([row])]  # type: ignore[index]
    return out


def _produce(settings: Settings, topic: str, messages: list[tuple[int, Any]]) -> None:
    asyncio.run(send(settings, topic, PARTITIONS, messages))


async def _delete_topics(settings: Settings, *topics: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        await admin.delete_topics(list(topics))
    finally:
        await admin.close()


def _owners(settings: Settings, *topics: str) -> set[str | None]:
    """The group's members that hold the partitions of ``topics`` (unknown mid-rebalance)."""
    partitions = [TopicPartition(topic, p) for topic in topics for p in range(PARTITIONS)]
    return set(asyncio.run(kafka_view(settings, partitions)).owners.values()) - {
        UNKNOWN_OWNER,
        None,
    }


def test_a_table_whose_topic_is_created_mid_stream_is_staged_before_anything_past_it_applies(
    pipeline: Settings,
) -> None:
    # Two workers share the topics' partitions, rebalancing as each subscribes table b's.
    workers = 2
    first, second = f"{pipeline.group}_a", f"{pipeline.group}_b"
    try:
        _replicate_with_a_topic_created_mid_stream(pipeline, first, second, workers)
    finally:
        asyncio.run(_delete_topics(pipeline, first, second))


def _replicate_with_a_topic_created_mid_stream(
    pipeline: Settings, first: str, second: str, workers: int
) -> None:
    schema = pipeline.group
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{schema}`")
    env = pipeline_env(
        pipeline.updated({"topics": ()}), "open", TICDC_SINK_TOPICS_PATTERN=f"{schema}_[ab]"
    )
    staging = Staging(redis_client(pipeline), pipeline.group)

    # Table a and its first watermark, before the worker and the sink start.
    rows_a = [_insert(schema, "a", TS + 2 + i, i) for i in range(6)]
    w1 = TS + 20
    head = [(p, m) for p, m in _messages([_create(schema, "a", TS + 1)], rows_a)]
    head += _messages([Resolved(w1)], [])
    _produce(pipeline, first, head)

    with pipeline_running(env) as processes:
        processes += [spawn("worker", env) for _ in range(workers - 1)]
        wait_for(lambda: applied_resolved_ts(pipeline) >= w1, "the first watermark applied")
        # Table b at D: its topic made first, its CREATE TABLE and rows written to it, then
        # the watermark past D to both topics (TiCDC's order), while the worker does not know
        # the topic yet; table a changes between D and that watermark too.
        d = TS + 30
        w2 = TS + 50
        rows_b = [_insert(schema, "b", d + 1 + i, i) for i in range(4)]
        later_a = [_insert(schema, "a", d + 5 + i, 100 + i) for i in range(4)]
        seen: list[tuple[int, bool, bool]] = []
        done = threading.Event()

        def watch() -> None:
            # Checkpoint first, then whether b is staged: b's staged offsets only grow, so a
            # checkpoint past d read before b was staged was past d before it was.
            b_partitions = [TopicPartition(second, p) for p in range(PARTITIONS)]
            while not done.is_set():
                checkpoint = applied_resolved_ts(pipeline)
                a_resolved = all(
                    (mark or 0) >= w2
                    for tp, mark in staging.watermarks().items()
                    if tp.topic == first
                )
                b_staged = any(staging.staged_offset(tp) is not None for tp in b_partitions)
                seen.append((checkpoint, a_resolved, b_staged))
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            _produce(pipeline, second, _messages([_create(schema, "b", d)], rows_b))
            _produce(pipeline, first, _messages([Resolved(w2)], later_a))
            _produce(pipeline, second, _messages([Resolved(w2)], []))
            wait_for(lambda: applied_resolved_ts(pipeline) >= w2, "the second watermark applied")
        finally:
            done.set()
            watcher.join()
        wait_for(lambda: len(_owners(pipeline, second)) == workers, "each worker a share of b")
        assert all(p.poll() is None for p in processes)
        for extra in processes[2:]:
            stop(extra)

    passed_unstaged = [(c, b) for c, _, b in seen if c >= d and not b]
    assert not passed_unstaged, f"the checkpoint passed {d} before table b was staged"
    # Whether the gate was what held it: table a resolved past d while b was not staged.
    held = any(a and not b for _, a, b in seen)
    print(f"table a resolved past d while b was unstaged: {held} ({len(seen)} looks)")
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        for table, rows in (("a", rows_a + later_a), ("b", rows_b)):
            cursor.execute(f"SELECT id, v FROM `{schema}`.`{table}` ORDER BY id")
            expected = sorted((r.new["id"], r.new["v"]) for r in rows)  # type: ignore[index]
            assert [tuple(row) for row in cursor.fetchall()] == expected
