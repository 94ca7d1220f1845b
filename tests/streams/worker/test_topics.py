"""A worker on TICDC_SINK_TOPICS_PATTERN at start: it waits for a first matching topic, records
it and stages it; without topics or a pattern it refuses to start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from config.settings import Settings
from core.model import Resolved
from core.staging import Staging
from streams.codecs import codec_for
from tests.ticdc_sink.pipelines import pipeline_env, spawn, wait_for
from ticdc_sink.produce import send

pytestmark = pytest.mark.integration

TS = 449_000_000_000_000_100


async def test_a_worker_waits_for_a_first_matching_topic_then_records_it(
    settings: Settings, staging: Staging, unique: str, kafka_admin: Any, tmp_path: Path
) -> None:
    from aiokafka.admin import NewTopic

    log = tmp_path / "worker.log"
    env = pipeline_env(
        settings.updated({"group": unique, "topics": ()}),
        "open",
        TICDC_SINK_TOPICS_PATTERN=f"{unique}_.*",
    )
    worker = spawn("worker", env, log)
    topic = f"{unique}_a"
    try:
        waiting = f"no topic matches TICDC_SINK_TOPICS_PATTERN={unique}_.* yet"
        wait_for(lambda: waiting in log.read_text(), "the worker to say it waits", timeout=60)
        assert staging.partition_counts() == {}
        await kafka_admin.create_topics([NewTopic(topic, 3, 1)])
        deadline = time.monotonic() + 30
        while staging.partition_counts() != {topic: 3}:
            assert time.monotonic() < deadline, log.read_text()
            assert worker.poll() is None, log.read_text()
            time.sleep(0.25)
        resolved = codec_for("open").encode([Resolved(TS)])
        await send(settings, topic, 3, [(p, m) for p in range(3) for m in resolved])
        while staging.global_resolved_ts() != TS:
            assert time.monotonic() < deadline + 60, log.read_text()
            time.sleep(0.25)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
        try:
            code = worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            print(log.read_text())
            raise
        await kafka_admin.delete_topics([topic])
    assert code == 0, log.read_text()


def test_a_worker_without_topics_or_a_pattern_refuses_to_start(
    settings: Settings, unique: str, redis_client: Any
) -> None:
    env = {**os.environ, "TICDC_SINK_GROUP": unique, "TICDC_SINK_WEB_PORT": "0"}
    env.pop("TICDC_SINK_TOPICS", None)
    env.pop("TICDC_SINK_TOPICS_PATTERN", None)
    result = subprocess.run(
        [sys.executable, "-m", "ticdc_sink", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2  # a setting missing
    assert result.stderr.splitlines()[-1] == (
        "ticdc-sink worker: neither TICDC_SINK_TOPICS (the topics to consume) nor "
        "TICDC_SINK_TOPICS_PATTERN (a regular expression their names match) is set: set one"
    )


def test_a_worker_waiting_for_a_matching_topic_stops_cleanly_on_sigterm(
    settings: Settings, unique: str, redis_client: Any, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    env = pipeline_env(
        settings.updated({"group": unique, "topics": ()}),
        "open",
        TICDC_SINK_TOPICS_PATTERN=f"{unique}_none",
    )
    worker = spawn("worker", env, log)
    try:
        wait_for(lambda: "yet: looking again" in log.read_text(), "the worker to wait", 60)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, log.read_text()
    assert "SIGTERM received: stopping" in log.read_text()
