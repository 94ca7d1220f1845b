"""The Faust worker as users run it (`ticdc-sink worker`), against real Kafka and Redis."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from core.model import DDLEvent, Resolved, RowChange
from core.staging import Staging, TopicPartition
from streams.codecs import codec_for
from streams.transport import HANDLER_BATCH
from tests.ticdc_sink.pipelines import pipeline_env, spawn, start_worker
from ticdc_sink.produce import send
from workload import make_rows

pytestmark = pytest.mark.integration

PARTITIONS = 4


async def _produce(settings: Any, topic: str, messages: list[tuple[int, Any]]) -> None:
    await send(settings, topic, PARTITIONS, messages)


def _messages(
    rows: list[RowChange], protocol: str, bad: bool = False, resolved_per_chunk: bool = False
) -> list[tuple[int, Any]]:
    codec = codec_for(protocol)
    ddl = DDLEvent(
        rows[0].commit_ts - 1, "bench", "orders", "CREATE TABLE bench.orders (id INT)", 3
    )
    messages: list[tuple[int, Any]] = []
    for partition in range(PARTITIONS):
        messages += [(partition, m) for m in codec.encode([ddl])]
        mine = [r for r in rows if int((r.new or r.old or {})["id"]) % PARTITIONS == partition]  # type: ignore[arg-type]
        for start in range(0, len(mine), 64):
            messages += [(partition, m) for m in codec.encode(mine[start : start + 64])]
            if bad and start == 0:
                messages.append((partition, type(messages[-1][1])(b"\x00" * 8, b"garbage")))
            if resolved_per_chunk:
                # As TiCDC does every second: this partition has nothing more up to here.
                last = mine[start : start + 64][-1].commit_ts
                messages += [(partition, m) for m in codec.encode([Resolved(last)])]
        messages += [(partition, m) for m in codec.encode([Resolved(rows[-1].commit_ts)])]
    return messages


def _wait_resolved(staging: Staging, ts: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        resolved = staging.global_resolved_ts()
        if resolved is not None and resolved >= ts:
            return
        time.sleep(0.25)
    pytest.fail(f"global resolved ts {staging.global_resolved_ts()} never reached {ts}")


@pytest.fixture
async def topic(kafka_admin: Any, unique: str) -> Any:
    from aiokafka.admin import NewTopic

    await kafka_admin.create_topics([NewTopic(unique, PARTITIONS, 1)])
    yield unique
    await kafka_admin.delete_topics([unique])


@pytest.mark.parametrize("loop_name", ["uvloop", "asyncio"])
async def test_worker_stages_every_partition_in_order(
    redis_client: redis.Redis,
    settings: Any,
    topic: str,
    staging: Staging,
    unique: str,
    loop_name: str,
) -> None:
    rows = make_rows(2_000, seed=11)
    await _produce(settings, topic, _messages(rows, "open", bad=True))
    worker = start_worker(settings, topic, unique, TICDC_SINK_EVENT_LOOP=loop_name)
    try:
        _wait_resolved(staging, rows[-1].commit_ts)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    released = [e for e in staging.release(0, rows[-1].commit_ts) if isinstance(e, RowChange)]
    assert released == rows
    # The partition count came from Kafka's metadata, and bad messages were quarantined.
    assert len(staging.partitions()) == PARTITIONS
    assert redis_client.xlen(staging.keys.dead_letters) == PARTITIONS


async def test_halt_stops_the_worker_at_the_first_bad_message(
    redis_client: redis.Redis,
    settings: Any,
    topic: str,
    staging: Staging,
    unique: str,
    tmp_path: Path,
) -> None:
    rows = make_rows(1_000, seed=17)
    # Each partition: a DDL, 64 rows, then garbage, then the rest and a resolved event.
    await _produce(settings, topic, _messages(rows, "open", bad=True))
    configured = settings.updated({"group": unique, "topics": (topic,)})
    log = tmp_path / "worker.log"
    worker = spawn("worker", pipeline_env(configured, "open", TICDC_SINK_ON_ERROR="halt"), log)
    try:
        code = worker.wait(timeout=90)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=60)
            pytest.fail("the worker went on past a bad message under halt")
    # One line names the message, and the worker's last says why it stopped; no crash trace.
    text = log.read_text(errors="replace")
    assert code == 1, text
    assert "Traceback" not in text and "crash" not in text.lower(), text
    assert re.search(rf"stopped at the bad message at {topic}:\d offset \d+", text), text
    assert text.rstrip().splitlines()[-1].startswith("ticdc-sink worker: "), text
    # It had started (it records the partition counts first) and stopped at the garbage.
    assert len(staging.partitions()) == PARTITIONS
    assert redis_client.xlen(staging.keys.dead_letters) == 0
    # Nothing past a bad message was staged: no partition reached its final resolved event.
    assert staging.global_resolved_ts() is None
    assert staging.staged_totals()[0] <= 64 * PARTITIONS


async def test_a_sigkilled_worker_loses_nothing_and_duplicates_nothing(
    settings: Any, topic: str, staging: Staging, unique: str
) -> None:
    rows = make_rows(6_000, seed=12)
    await _produce(settings, topic, _messages(rows, "open"))
    for _ in range(2):
        worker = start_worker(settings, topic, unique)
        deadline = time.monotonic() + 60
        while staging.staged_totals()[0] < 500 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    worker = start_worker(settings, topic, unique)
    try:
        _wait_resolved(staging, rows[-1].commit_ts)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    _assert_staged_once(staging, rows)


async def test_status_names_the_partition_that_blocks(
    settings: Any, topic: str, staging: Staging, unique: str
) -> None:
    import json

    rows = make_rows(200, seed=13)
    messages = [m for m in _messages(rows, "open") if m[0] != 3 or not _is_resolved(m[1])]
    await _produce(settings, topic, messages)
    worker = start_worker(settings, topic, unique, TICDC_SINK_WEB_PORT="16066")
    try:
        deadline = time.monotonic() + 60
        while sum(m is not None for m in staging.watermarks().values()) < 3:
            assert time.monotonic() < deadline, staging.watermarks()
            time.sleep(0.25)
        page = _get_json("http://127.0.0.1:16066/status/", deadline)
        assert page["blocking_partitions"] == [f"{topic}:3"]
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    env = {**os.environ, "TICDC_SINK_GROUP": unique, "TICDC_SINK_TOPICS": topic}
    result = subprocess.run(
        [sys.executable, "-m", "ticdc_sink", "status", "--json"], env=env, capture_output=True
    )
    document = json.loads(result.stdout)
    assert document["global_resolved_ts"] is None
    assert document["blocking_partitions"] == [f"{topic}:3"]
    assert document["checkpoint_ts"] is None
    assert len(document["partitions"]) == PARTITIONS
    assert sum(p["staged_rows"] for p in document["partitions"]) == len(rows)


async def test_a_quiet_partition_without_watermarks_resolves_to_what_it_staged(
    settings: Any, topic: str, staging: Staging, unique: str
) -> None:
    rows = make_rows(600, seed=18)
    # As from TiCDC's Debezium encoder: rows and DDL, never a resolved event; partition 0's
    # last message is a DDL newer than every row.
    messages = [m for m in _messages(rows, "open") if not _is_resolved(m[1])]
    last_ddl = DDLEvent(rows[-1].commit_ts + 10, "bench", "orders", "ALTER TABLE t ADD c INT", 5)
    messages += [(0, m) for m in codec_for("open").encode([last_ddl])]
    await _produce(settings, topic, messages)
    highest = {TopicPartition(topic, p): 0 for p in range(PARTITIONS)}
    last_offset = {tp: -1 for tp in highest}
    for partition, message in messages:
        tp = TopicPartition(topic, partition)
        last_offset[tp] += 1
        events = codec_for("open").decode(message.key, message.value)
        highest[tp] = max([highest[tp], *(e.commit_ts for e in events)])
    worker = start_worker(settings, topic, unique, TICDC_SINK_RESOLVE_WHEN_IDLE="1")
    try:
        _wait_resolved(staging, min(highest.values()))
        deadline = time.monotonic() + 30
        while staging.watermarks() != highest:
            assert time.monotonic() < deadline, staging.watermarks()
            time.sleep(0.25)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    assert highest[TopicPartition(topic, 0)] == last_ddl.commit_ts
    # Recorded as resolved events at each partition's last offset: replays start there.
    assert staging.replay_offsets(max(highest.values())) == {
        tp.field: offset for tp, offset in last_offset.items()
    }
    released = [e for e in staging.release(0, min(highest.values())) if isinstance(e, RowChange)]
    assert released == [r for r in rows if r.commit_ts <= min(highest.values())]


def _is_resolved(message: Any) -> bool:
    return any(
        isinstance(e, Resolved) for e in codec_for("open").decode(message.key, message.value)
    )


async def test_duplicates_and_older_replays_change_nothing(
    settings: Any, topic: str, staging: Staging, unique: str
) -> None:
    rows = make_rows(1_500, seed=14)
    messages = _messages(rows, "open")
    # TiCDC re-sends after its own restarts: the same events again at new offsets, and an
    # older resolved event after a newer one.
    older = codec_for("open").encode([Resolved(rows[0].commit_ts)])[0]
    replay = messages + [(p, older) for p in range(PARTITIONS)]
    await _produce(settings, topic, messages + replay)
    worker = start_worker(settings, topic, unique)
    try:
        _wait_resolved(staging, rows[-1].commit_ts)
        last = {TopicPartition(topic, p): -1 for p in range(PARTITIONS)}
        for partition, _ in messages + replay:
            last[TopicPartition(topic, partition)] += 1
        deadline = time.monotonic() + 60
        while staging.staged_offsets(last) != last:
            assert time.monotonic() < deadline, staging.staged_offsets(last)
            time.sleep(0.25)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    released = [e for e in staging.release(0, rows[-1].commit_ts) if isinstance(e, RowChange)]
    assert released == rows
    assert staging.global_resolved_ts() == rows[-1].commit_ts


async def test_two_workers_share_partitions_and_survive_a_sigkill(
    settings: Any, topic: str, staging: Staging, unique: str
) -> None:
    rows = make_rows(8_000, seed=15)
    await _produce(settings, topic, _messages(rows, "open"))
    first = start_worker(settings, topic, unique)
    second = start_worker(settings, topic, unique)
    try:
        deadline = time.monotonic() + 60
        while staging.staged_totals()[0] < 1_000:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        # The survivor takes the dead member's partitions after the session timeout.
        _wait_resolved(staging, rows[-1].commit_ts, timeout=150)
    finally:
        os.killpg(second.pid, signal.SIGTERM)
        second.wait(timeout=60)
    _assert_staged_once(staging, rows)


async def test_backpressure_pauses_and_resumes(
    settings: Any, topic: str, staging: Staging, unique: str
) -> None:
    # Open Protocol carries 16 rows a message: five batches' worth.
    rows = make_rows(5 * 16 * HANDLER_BATCH, seed=16)
    await _produce(settings, topic, _messages(rows, "open", resolved_per_chunk=True))
    limit = 1_000
    worker = start_worker(settings, topic, unique, TICDC_SINK_MAX_STAGED_ROWS=str(limit))
    try:
        deadline = time.monotonic() + 60
        while staging.staged_totals()[0] < limit:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(3)
        paused_at = staging.staged_totals()[0]
        # One batch may overshoot the limit; the rest waits in Kafka, not in Redis.
        assert paused_at < len(rows)
        assert paused_at < limit + HANDLER_BATCH * 64
        time.sleep(1)
        assert staging.staged_totals()[0] == paused_at
        # A paused worker still stops promptly when asked.
        os.killpg(worker.pid, signal.SIGTERM)
        assert worker.wait(timeout=30) is not None
        worker = start_worker(settings, topic, unique, TICDC_SINK_MAX_STAGED_ROWS=str(limit))
        # The sink applies and trims: the worker resumes and finishes.
        while (staging.global_resolved_ts() or 0) < rows[-1].commit_ts:
            assert time.monotonic() < deadline + 120
            staging.trim((1 << 64) - 2)
            time.sleep(0.2)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)


def _get_json(url: str, deadline: float) -> Any:
    import json
    import urllib.request

    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            assert time.monotonic() < deadline, f"{url} never answered"
            time.sleep(0.25)


def _assert_staged_once(staging: Staging, rows: list[RowChange]) -> None:
    """Every row released in order, and staged exactly once (no loss, no duplicate)."""
    released = [e for e in staging.release(0, rows[-1].commit_ts) if isinstance(e, RowChange)]
    assert released == rows
    assert staging.staged_totals()[0] == len(rows)
