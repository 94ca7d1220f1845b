"""Produce, replicate, verify: every protocol through real Kafka, workers, Redis and MariaDB or
TiDB (``ON_EVERY_SERVER``), with workers and sinks SIGKILLed along the way. The tests that kill
and restart services themselves run against MariaDB only."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from core.kafka_client import kafka_options
from core.redis_client import redis_client
from core.staging import Keys, Staging
from spark_sink.db.connection import connect
from spark_sink.loop import SinkLoop
from spark_sink.target import Target
from tests.ticdc_sink.pipelines import (
    ON_EVERY_SERVER,
    PROCESS_LOGS,
    applied_resolved_ts,
    assert_replicated,
    client_ports,
    pipeline_env,
    pipeline_running,
    process_logs,
    spawn,
    stop,
    wait_for,
)
from ticdc_sink.produce import expected_state, run_produce, scenario_messages, send
from ticdc_sink.scenario import Scenario

pytestmark = pytest.mark.integration

PROTOCOLS = ["open", "craft", "simple", "simple-avro", "canal-json", "debezium"]
PARTITIONS = 3


@pytest.fixture
def second_schema(unique: str, pipeline: Settings) -> Iterator[str]:
    """The upstream database of a second workload on the same topic."""
    yield f"{unique}_b"
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_b`")


def _second_workload(
    settings: Settings, schema: str, seed: int, after: int, expected: Path
) -> tuple[int, int]:
    """A workload produced after commit ts ``after``, in a database of its own."""
    return run_produce(
        settings, settings.kafka.topics[0], "open", PARTITIONS, 80, seed=seed, expected=expected,
        schema=schema, start_ts=after,
    )  # fmt: skip


@ON_EVERY_SERVER
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_replicate_with_killed_workers(
    protocol: str, pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    expected = tmp_path / "expected.json"
    sent, final = run_produce(
        pipeline, unique, protocol, PARTITIONS, 120, seed=len(protocol), expected=expected,
        duplicates=0.1, schema=unique,
    )  # fmt: skip
    staging = Staging(redis_client(pipeline), unique)
    sink = SinkLoop(pipeline, staging, Target(pipeline))
    rng = random.Random(protocol)
    checkpoints = []
    env = pipeline_env(pipeline, protocol)
    for share in sorted(rng.uniform(0.1, 0.7) for _ in range(2)):
        # SIGKILL the worker once it has staged a random share of the messages.
        worker = spawn("worker", env)
        deadline = time.monotonic() + 60
        while _messages_staged(staging) < share * sent:
            assert time.monotonic() < deadline, "the worker stopped staging"
            checkpoints.append(sink.run_once())
            time.sleep(0.02)
        stop(worker, signal.SIGKILL)
    worker = spawn("worker", env)
    try:
        deadline = time.monotonic() + 120
        while (checkpoint := sink.run_once()) < final:
            checkpoints.append(checkpoint)
            assert time.monotonic() < deadline, f"checkpoint {checkpoint} never reached {final}"
            time.sleep(0.1)
        checkpoints.append(checkpoint)
    finally:
        stop(worker)
    assert_replicated(pipeline, expected)
    assert checkpoints == sorted(checkpoints), "the checkpoint went backwards"


def _committed(settings: Settings, staging: Staging) -> int:
    """Messages the consumer group has committed in Kafka, over every partition."""
    from streams.status import kafka_offsets

    committed, _ = asyncio.run(kafka_offsets(settings, staging.partitions()))
    return sum(offset for offset in committed.values() if offset is not None)


def _messages_staged(staging: Staging) -> int:
    return sum(offset + 1 for offset in staging.staged_offsets(staging.partitions()).values())


@ON_EVERY_SERVER
@pytest.mark.parametrize("connections", [1, 4])
def test_a_sigkilled_sink_resumes_from_its_checkpoint(
    pipeline: Settings, unique: str, tmp_path: Path, connections: int
) -> None:
    """Killed three times at random points, with batches executing on several connections
    when there are several: each sink resumes from the checkpoint, nothing applied twice
    (key-less rows would then be too many) nor lost, the checkpoint never back."""
    expected = tmp_path / "expected.json"
    _, final = run_produce(
        pipeline, unique, "open", PARTITIONS, 200, seed=9, expected=expected, schema=unique
    )
    env = pipeline_env(
        pipeline,
        "open",
        TICDC_SINK_BATCH_ROWS="150",
        TICDC_SINK_APPLY_CONNECTIONS=str(connections),
    )
    worker = spawn("worker", env)
    rng = random.Random(9)
    seen = []
    try:
        for _ in range(3):
            sink = spawn("apply", env)
            time.sleep(rng.uniform(1.5, 4.0))
            stop(sink, signal.SIGKILL)
            seen.append(applied_resolved_ts(pipeline))
        sink = spawn("apply", env)
        deadline = time.monotonic() + 120
        while applied_resolved_ts(pipeline) < final:
            assert time.monotonic() < deadline
            time.sleep(0.25)
        stop(sink)
    finally:
        stop(worker)
    assert_replicated(pipeline, expected)
    assert seen == sorted(seen)


@ON_EVERY_SERVER
def test_dropped_redis_connections_lose_nothing(
    pipeline: Settings, unique: str, tmp_path: Path, redis_client: Any
) -> None:
    expected = tmp_path / "expected.json"
    _, final = run_produce(
        pipeline, unique, "open", PARTITIONS, 300, seed=4, expected=expected, schema=unique
    )
    with pipeline_running(pipeline_env(pipeline, "open", TICDC_SINK_BATCH_ROWS="300")) as processes:
        deadline = time.monotonic() + 120
        drops = 0
        while applied_resolved_ts(pipeline) < final:
            assert time.monotonic() < deadline, f"stuck after {drops} connection drops"
            if drops < 5:
                # Every client connection to Redis is cut, as in a failover or a restart.
                redis_client.client_kill_filter(_type="normal", skipme=True)
                drops += 1
            time.sleep(0.5)
        assert all(p.poll() is None for p in processes), "a process died on a Redis blip"
    assert_replicated(pipeline, expected)


def _sigkill(service: Any) -> None:
    pid = service.our_pid()
    if pid is None:
        pytest.fail(f"{service.name} must be started by `ticdc-sink services up` to be killed")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not service.answers(), f"{service.name} to go away", timeout=30)


def _sigkill_and_restart(service: Any, down_for: float) -> None:
    _sigkill(service)
    time.sleep(down_for)
    service.up()


def test_a_sigkilled_redis_restarts_from_its_append_only_file(
    pipeline: Settings, unique: str, tmp_path: Path, redis_client: Any, second_schema: str
) -> None:
    from ticdc_sink.services.redis import RedisService

    first, second = tmp_path / "first.json", tmp_path / "second.json"
    sent, final = run_produce(
        pipeline, unique, "open", PARTITIONS, 150, seed=11, expected=first, schema=unique
    )
    env = pipeline_env(pipeline, "open")
    staging = Staging(redis_client, unique)
    worker = spawn("worker", env)
    try:
        # Everything staged and committed in Kafka, nothing applied: only Redis holds it now.
        wait_for(lambda: _messages_staged(staging) == sent, "the first workload staged")
        time.sleep(2)  # Faust commits staged offsets every second
        _sigkill_and_restart(RedisService(), down_for=2.0)
        sink = spawn("apply", env)
        try:
            wait_for(lambda: applied_resolved_ts(pipeline) >= final, "the staged workload")
            # And both processes go on with new work after the restart.
            _, final = _second_workload(pipeline, second_schema, 12, final, second)
            wait_for(lambda: applied_resolved_ts(pipeline) >= final, "the second workload")
            assert worker.poll() is None and sink.poll() is None, "a process died with Redis"
        finally:
            stop(sink)
    finally:
        stop(worker)
    assert_replicated(pipeline, first, second)
    status = orjson.loads(_run("status", "--json", env=env).stdout)
    assert status["checkpoint_ts"] == applied_resolved_ts(pipeline) >= final
    assert status["global_resolved_ts"] >= final


@ON_EVERY_SERVER
def test_a_flushed_redis_is_rebuilt_from_the_checkpoint(
    pipeline: Settings, unique: str, tmp_path: Path, redis_client: Any, second_schema: str
) -> None:
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    sent, final = run_produce(
        pipeline, unique, "open", PARTITIONS, 80, seed=5, expected=first, schema=unique
    )
    env = pipeline_env(pipeline, "open")
    staging = Staging(redis_client, unique)
    worker, sink = spawn("worker", env), spawn("apply", env)
    try:
        wait_for(lambda: applied_resolved_ts(pipeline) >= final, "the first workload")
        stop(sink)
        # A second workload (a database of its own, CREATE DDL included) that the worker stages
        # and commits in Kafka, and the stopped sink never applies ...
        more, final = _second_workload(pipeline, second_schema, 6, final, second)
        wait_for(lambda: _messages_staged(staging) == sent + more, "the second workload staged")
        time.sleep(3)  # Faust commits staged offsets every second
        # ... then Redis loses everything: those changes now exist only in Kafka.
        for key in redis_client.scan_iter(Keys(unique).pattern):
            redis_client.delete(key)
        refused = _run("apply", "--once", env=env)
        assert refused.returncode == 1, refused.stderr
        assert "ticdc-sink recover" in refused.stderr
        stop(worker)
        recovered = _run("recover", "--yes", env=env)
        assert recovered.returncode == 0, recovered.stderr
        assert "replay from offset" in recovered.stdout
        worker, sink = spawn("worker", env), spawn("apply", env)
        wait_for(lambda: applied_resolved_ts(pipeline) >= final, "the replayed workload")
    finally:
        stop(sink)
        stop(worker)
    assert_replicated(pipeline, first, second)


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ticdc_sink", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


@ON_EVERY_SERVER
def test_cut_downstream_connections_lose_nothing(
    pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    # Every batch through Spark too, so its JDBC connections are cut as well as the driver's.
    _replicate_cutting_connections(
        pipeline,
        unique,
        tmp_path,
        TICDC_SINK_SPARK_MIN_ROWS="0",
        TICDC_SINK_LOAD_IN_PLACE="false",
    )


def test_connections_cut_under_batches_in_flight_on_four_lose_nothing(
    pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    """Cut while batches apply over 4 connections, committing in order (MariaDB: gap locks make
    later batches wait to write, and a failed one cancels those after it)."""
    _replicate_cutting_connections(pipeline, unique, tmp_path, TICDC_SINK_APPLY_CONNECTIONS="4")


def _replicate_cutting_connections(
    pipeline: Settings, unique: str, tmp_path: Path, **extra: str
) -> None:
    """300 transactions replicated in 250-change batches while the sink's downstream
    connections are cut again and again: no process dies, row-exact."""
    expected = tmp_path / "expected.json"
    _, final = run_produce(
        pipeline, unique, "open", PARTITIONS, 300, seed=12, expected=expected, schema=unique
    )
    env = pipeline_env(pipeline, "open", TICDC_SINK_BATCH_ROWS="250", **extra)
    cuts = killed = 0
    with pipeline_running(env) as processes:
        wait_for(lambda: applied_resolved_ts(pipeline) > 0, "a first checkpoint")
        with connect(pipeline, autocommit=True) as admin, admin.cursor() as cursor:
            while applied_resolved_ts(pipeline) < final:
                assert cuts < 200, "the sink stopped making progress"
                if cuts < 6:
                    # Only the sink's own connections (its driver's and Spark's): the server is
                    # shared with other tests.
                    ports = client_ports(processes[1], pipeline.downstream.url.port)
                    cursor.execute("SELECT ID, HOST FROM information_schema.PROCESSLIST")
                    for connection, host in cursor.fetchall():
                        port = str(host).rpartition(":")[2]
                        if not (port.isdigit() and int(port) in ports):
                            continue
                        with contextlib.suppress(Exception):  # it may have closed meanwhile
                            cursor.execute(f"KILL CONNECTION {int(connection)}")
                            killed += 1
                cuts += 1
                time.sleep(0.7)
        assert all(p.poll() is None for p in processes), "a process died on a cut connection"
    assert killed, "no connection of the sink was found to cut"
    assert_replicated(pipeline, expected)


def test_a_restarted_kafka_broker_loses_nothing(
    pipeline: Settings, unique: str, tmp_path: Path, redis_client: Any, second_schema: str
) -> None:
    from ticdc_sink.services.kafka import KafkaService

    first, second = tmp_path / "first.json", tmp_path / "second.json"
    sent, final = run_produce(
        pipeline, unique, "open", PARTITIONS, 80, seed=13, expected=first, schema=unique
    )
    staging = Staging(redis_client, unique)
    with pipeline_running(pipeline_env(pipeline, "open")) as processes:
        wait_for(lambda: _messages_staged(staging) == sent, "the first workload staged")
        _sigkill_and_restart(KafkaService(), down_for=3.0)
        # The worker must fetch again from the restarted broker, and commit there.
        more, final = _second_workload(pipeline, second_schema, 14, final, second)
        wait_for(lambda: applied_resolved_ts(pipeline) >= final, "the second workload", 180)
        wait_for(lambda: _committed(pipeline, staging) == sent + more, "offsets committed")
        assert all(p.poll() is None for p in processes), "a process died with the broker"
    assert_replicated(pipeline, first, second)


def _with_bad_messages(
    messages: list[tuple[int, Any]], rng: random.Random, count: int
) -> list[tuple[int, Any]]:
    """``messages`` with ``count`` undecodable ones slipped in: garbage, and real messages cut
    in half (a cut never decodes to different valid events: every format states its lengths)."""
    mixed = list(messages)
    for index in range(count):
        partition, message = rng.choice(messages)
        value = message.value[: len(message.value) // 2] if index % 2 else b"\xff garbage {"
        bad = type(message)(message.key, value)
        mixed.insert(rng.randrange(len(mixed)), (partition, bad))
    return mixed


@ON_EVERY_SERVER
@pytest.mark.parametrize("protocol", ["open", "simple"])
def test_bad_messages_are_dead_lettered_and_every_valid_change_applied(
    protocol: str, pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    scenario = Scenario(seed=21, transactions=120, schema=unique)
    messages, final = scenario_messages(scenario, protocol, PARTITIONS, seed=21)
    bad = 6
    asyncio.run(
        send(pipeline, unique, PARTITIONS, _with_bad_messages(messages, random.Random(21), bad))
    )
    expected = tmp_path / "expected.json"
    expected.write_bytes(orjson.dumps(expected_state(scenario)))
    env = pipeline_env(pipeline, protocol)
    with pipeline_running(env):
        wait_for(lambda: applied_resolved_ts(pipeline) >= final, "the valid changes applied")
    assert_replicated(pipeline, expected)
    status = orjson.loads(_run("status", "--json", env=env).stdout)
    assert status["dead_letters"] == bad


def _group_state(settings: Settings) -> str:
    """The consumer group's state as the broker sees it (``Stable``, ``PreparingRebalance``...)."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def describe() -> str:
        admin = AIOKafkaAdminClient(**kafka_options(settings))
        await admin.start()
        try:
            (response,) = await admin.describe_consumer_groups([settings.group])
            return str(response.groups[0][2])
        finally:
            await admin.close()

    return asyncio.run(describe())


@ON_EVERY_SERVER
def test_a_worker_killed_during_a_rebalance_loses_nothing(
    pipeline: Settings, unique: str, tmp_path: Path, redis_client: Any
) -> None:
    expected = tmp_path / "expected.json"
    # Several staging batches' worth of messages (one batch may pass the limit below).
    sent, final = run_produce(
        pipeline, unique, "open", PARTITIONS, 1500, seed=31, expected=expected, schema=unique
    )
    # Until the sink starts, a low staging limit holds the rest of the stream in Kafka: the kill
    # lands mid-stream however fast the worker is.
    limit = 400
    env = pipeline_env(pipeline, "open", TICDC_SINK_MAX_STAGED_ROWS=str(limit))
    staging = Staging(redis_client, unique)
    first = spawn("worker", env)
    second = sink = None
    try:
        wait_for(lambda: staging.staged_totals()[0] >= limit, "the first worker to pause")
        wait_for(lambda: _group_state(pipeline) == "Stable", "one stable member")
        second = spawn("worker", env)
        # The second worker's join starts a rebalance: kill the first one inside it.
        wait_for(lambda: _group_state(pipeline) != "Stable", "the rebalance", timeout=60)
        stop(first, signal.SIGKILL)
        staged = _messages_staged(staging)
        assert staged < sent, f"the kill came after the stream was staged ({staged} of {sent})"
        print(f"killed with {staged} of {sent} messages staged")
        sink = spawn("apply", env)
        seen = []
        while (checkpoint := applied_resolved_ts(pipeline)) < final:
            seen.append(checkpoint)
            assert len(seen) < 600, f"checkpoint {checkpoint} never reached {final}"
            time.sleep(0.25)
        assert seen == sorted(seen), "the checkpoint went backwards"
        assert second.poll() is None and sink.poll() is None, "a process died"
    finally:
        for process in (first, sink, second):
            if process is not None:
                stop(process)
    assert_replicated(pipeline, expected)


@pytest.fixture
def third_schema(unique: str, pipeline: Settings) -> Iterator[str]:
    """The upstream database of a third workload on the same topic."""
    yield f"{unique}_c"
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_c`")


def test_the_pipeline_rides_out_redis_kafka_and_mariadb_restarts(
    pipeline: Settings,
    unique: str,
    tmp_path: Path,
    redis_client: Any,
    second_schema: str,
    third_schema: str,
) -> None:
    from ticdc_sink.services.kafka import KafkaService
    from ticdc_sink.services.mariadb import MariaDBService
    from ticdc_sink.services.redis import RedisService

    states = [tmp_path / f"{name}.json" for name in ("first", "second", "third")]
    _, final = run_produce(
        pipeline, unique, "open", PARTITIONS, 150, seed=21, expected=states[0], schema=unique
    )
    # Small batches and a low staging limit: the sink is mid-apply, the worker is staging or
    # held back by the limit (asking Redis), when a service goes away.
    env = pipeline_env(
        pipeline, "open", TICDC_SINK_BATCH_ROWS="40", TICDC_SINK_MAX_STAGED_ROWS="300"
    )
    with pipeline_running(env) as processes:
        pids = [p.pid for p in processes]
        wait_for(lambda: applied_resolved_ts(pipeline) > 0, "data flowing")
        # New data reaches the worker while Redis is away: it must hold it until Redis is back.
        _sigkill(RedisService())
        _, final = _second_workload(pipeline, second_schema, 22, final, states[1])
        time.sleep(1.0)
        RedisService().up()
        _sigkill_and_restart(KafkaService(), down_for=2.0)
        _, final = _second_workload(pipeline, third_schema, 23, final, states[2])
        wait_for(lambda: applied_resolved_ts(pipeline) > 0, "MariaDB answering")
        _sigkill_and_restart(MariaDBService(), down_for=2.0)
        wait_for(lambda: applied_resolved_ts(pipeline) >= final, "every workload", 300)
        assert [p.pid for p in processes if p.poll() is None] == pids, (
            "a process exited during an outage"
        )
    assert_replicated(pipeline, *states)
    logs = {
        path.name.split("-")[1]: path.read_text(errors="replace")
        for path in PROCESS_LOGS.glob(f"{unique}-*.log")
    }
    # One line when each outage starts and one when it ends, in the worker and in the sink.
    for process in ("worker", "apply"):
        assert logs[process].count("Redis unavailable since") == 1, process
        assert logs[process].count("Redis back after") == 1, process
    logs = process_logs(unique, lines=100_000)
    assert "the downstream unavailable since" in logs and "the downstream back after" in logs
    assert "retry 2" not in logs, "an outage logged a line per retry"
