"""Produce, replicate, verify: every protocol through real Kafka, workers, Redis and MariaDB,
with workers and sinks SIGKILLed along the way."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from config.settings import Settings
from spark_sink.downstream import applied_resolved_ts
from spark_sink.driver import Sink
from spark_sink.merge import Applier
from streams.staging import Staging
from ticdc_sink.produce import run_produce
from ticdc_sink.verify import verify

pytestmark = pytest.mark.integration

PROTOCOLS = ["open", "craft", "simple", "simple-avro", "canal-json"]
PARTITIONS = 3


@pytest.fixture
def pipeline(settings: Settings, unique: str, redis_client: Any, mariadb_connect: Any) -> Any:
    configured = settings.model_copy(
        update={"group": unique, "topics": (unique,), "meta_db": f"{unique}_meta"}
    )
    yield configured
    for key in redis_client.scan_iter(f"tcs:{{{unique}}}:*"):
        redis_client.delete(key)
    with mariadb_connect() as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}`")
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")


def _env(settings: Settings, protocol: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "TICDC_SINK_GROUP": settings.group,
        "TICDC_SINK_TOPICS": ",".join(settings.topics),
        "TICDC_SINK_META_DB": settings.meta_db,
        "TICDC_SINK_PROTOCOL": protocol,
        "TICDC_SINK_WEB_PORT": "0",
        # A killed worker's partitions move after this: Kafka's minimum, to keep tests short.
        "TICDC_SINK_SESSION_TIMEOUT": "6",
        **extra,
    }


def _spawn(command: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "ticdc_sink", command],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        os.killpg(process.pid, sig)
    process.wait(timeout=60)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_replicate_with_killed_workers(
    protocol: str, pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    expected = tmp_path / "expected.json"
    sent, final = run_produce(
        pipeline, unique, protocol, PARTITIONS, 120, seed=len(protocol), expected=expected,
        duplicates=0.1, schema=unique,
    )  # fmt: skip
    staging = Staging(__import__("redis").Redis.from_url(pipeline.redis_url), unique)
    sink = Sink(pipeline, staging, Applier(pipeline))
    rng = random.Random(protocol)
    checkpoints = []
    env = _env(pipeline, protocol)
    for share in sorted(rng.uniform(0.1, 0.7) for _ in range(2)):
        # SIGKILL the worker once it has staged a random share of the messages.
        worker = _spawn("worker", env)
        deadline = time.monotonic() + 60
        while _messages_staged(staging) < share * sent:
            assert time.monotonic() < deadline, "the worker stopped staging"
            checkpoints.append(sink.run_once())
            time.sleep(0.02)
        _stop(worker, signal.SIGKILL)
    worker = _spawn("worker", env)
    try:
        deadline = time.monotonic() + 120
        while (checkpoint := sink.run_once()) < final:
            checkpoints.append(checkpoint)
            assert time.monotonic() < deadline, f"checkpoint {checkpoint} never reached {final}"
            time.sleep(0.1)
        checkpoints.append(checkpoint)
    finally:
        _stop(worker)
    ok, report = verify(pipeline, expected)
    assert ok, "\n".join(report)
    assert checkpoints == sorted(checkpoints), "the checkpoint went backwards"


def _messages_staged(staging: Staging) -> int:
    return sum(offset + 1 for offset in staging.staged_offsets(staging.partitions()).values())


def test_a_sigkilled_sink_resumes_from_its_checkpoint(
    pipeline: Settings, unique: str, tmp_path: Path, mariadb_connect: Any
) -> None:
    expected = tmp_path / "expected.json"
    _, final = run_produce(
        pipeline, unique, "open", PARTITIONS, 200, seed=9, expected=expected, schema=unique
    )
    env = _env(pipeline, "open", TICDC_SINK_BATCH_ROWS="150")
    worker = _spawn("worker", env)
    rng = random.Random(9)
    seen = []
    try:
        for _ in range(3):
            sink = _spawn("apply", env)
            time.sleep(rng.uniform(1.5, 4.0))
            _stop(sink, signal.SIGKILL)
            seen.append(applied_resolved_ts(pipeline))
        sink = _spawn("apply", env)
        deadline = time.monotonic() + 120
        while applied_resolved_ts(pipeline) < final:
            assert time.monotonic() < deadline
            time.sleep(0.25)
        _stop(sink)
    finally:
        _stop(worker)
    ok, report = verify(pipeline, expected)
    assert ok, "\n".join(report)
    assert seen == sorted(seen)


def test_dropped_redis_connections_lose_nothing(
    pipeline: Settings, unique: str, tmp_path: Path, redis_client: Any
) -> None:
    expected = tmp_path / "expected.json"
    _, final = run_produce(
        pipeline, unique, "open", PARTITIONS, 300, seed=4, expected=expected, schema=unique
    )
    env = _env(pipeline, "open", TICDC_SINK_BATCH_ROWS="300")
    processes = [_spawn("worker", env), _spawn("apply", env)]
    try:
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
    finally:
        for process in processes:
            _stop(process)
    ok, report = verify(pipeline, expected)
    assert ok, "\n".join(report)
