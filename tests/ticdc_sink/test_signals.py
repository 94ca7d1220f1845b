"""Real processes stopped by SIGTERM and SIGINT: clean exits, no tracebacks, the sink's lease
released; their log lines in the configured form."""

from __future__ import annotations

import os
import re
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
from streams.codecs import codec_for
from streams.model import Resolved
from ticdc_sink.produce import send

pytestmark = pytest.mark.integration

PARTITIONS = 2
# A text log line: UTC time, level, [pipeline], logger.
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO|WARN|WARNING|ERROR) \[")
# Ours and the JVM's: what a process may print on stderr besides log lines.
JVM_NOTICE = "WARNING: Using incubator modules"


@pytest.fixture
async def topic(kafka_admin: Any, unique: str) -> Any:
    from aiokafka.admin import NewTopic

    await kafka_admin.create_topics([NewTopic(unique, PARTITIONS, 1)])
    yield unique
    await kafka_admin.delete_topics([unique])


@pytest.fixture
def cleanup(unique: str, redis_client: Any, mariadb_connect: Any) -> Iterator[None]:
    yield
    for key in redis_client.scan_iter(f"tcs:{{{unique}}}:*"):
        redis_client.delete(key)
    with mariadb_connect() as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")


def _spawn(command: str, unique: str, log: Path, **extra: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "TICDC_SINK_GROUP": unique,
        "TICDC_SINK_TOPICS": unique,
        "TICDC_SINK_META_DB": f"{unique}_meta",
        "TICDC_SINK_WEB_PORT": "0",
        "TICDC_SINK_SESSION_TIMEOUT": "6",
        "TICDC_SINK_SPARK_MASTER": "local[1]",
        **extra,
    }
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "ticdc_sink", command],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _wait_for_line(
    log: Path, pattern: str, process: subprocess.Popen[bytes], timeout: float
) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if re.search(pattern, text):
            return text
        assert process.poll() is None, f"the process ended ({process.returncode}):\n{text}"
        time.sleep(0.25)
    pytest.fail(f"no line matching {pattern!r} within {timeout} s:\n{log.read_text()}")


def _stopped_cleanly(process: subprocess.Popen[bytes], log: Path, signum: int) -> str:
    process.send_signal(signum)
    assert process.wait(timeout=90) == 0, log.read_text()
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text
    return text


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_worker_stops_on_a_signal_and_logs_progress_with_utc_times(
    settings: Settings, topic: str, unique: str, tmp_path: Path, cleanup: None, signum: int
) -> None:
    resolved = 449_000_000_000_000_000
    messages = codec_for("open").encode([Resolved(resolved)])
    await send(settings, topic, PARTITIONS, [(p, m) for p in range(PARTITIONS) for m in messages])
    log = tmp_path / "worker.log"
    worker = _spawn("worker", unique, log, TICDC_SINK_PROGRESS_INTERVAL="1")
    try:
        # The progress line, once both partitions' watermarks are staged.
        line = r"global resolved ts 449000000000000000 \(2024-04-11T01:31:12.265Z, "
        _wait_for_line(log, line, worker, 90)
    except BaseException:
        worker.kill()
        raise
    text = _stopped_cleanly(worker, log, signum)
    lines = [line for line in text.splitlines() if line.strip() and JVM_NOTICE not in line]
    # Faust's records and ours alike: one form (no Faust banner, no colour codes).
    assert all(TEXT_LINE.match(line) for line in lines), text
    assert f"[{unique}] ticdc_sink.worker: staged 0 rows in " in text


# SIGINT too: PySpark's context installs a SIGINT handler of its own that the sink takes back.
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_sink_releases_its_lease_on_a_signal_and_logs_json(
    settings: Settings, unique: str, tmp_path: Path, redis_client: Any, cleanup: None, signum: int
) -> None:
    log = tmp_path / "sink.log"
    sink = _spawn("apply", unique, log, TICDC_SINK_LOG_FORMAT="json")
    try:
        _wait_for_line(log, r"leading pipeline", sink, 180)
    except BaseException:
        sink.kill()
        raise
    assert redis_client.exists(f"tcs:{{{unique}}}:sink-leader")
    text = _stopped_cleanly(sink, log, signum)
    # Released at once: a standby takes over now, not after the lease's term.
    assert not redis_client.exists(f"tcs:{{{unique}}}:sink-leader")
    ours = [orjson.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert {"time", "level", "pipeline", "logger", "message"} <= set(ours[0])
    assert all(r["pipeline"] == unique and r["time"].endswith("Z") for r in ours)
    assert any("released the lease" in r["message"] for r in ours)
    # Spark's JVM says only what is WARN or worse, in the sink's form.
    others = [line for line in text.splitlines() if line.strip() and not line.startswith("{")]
    assert all(JVM_NOTICE in line or TEXT_LINE.match(line) for line in others), text
    assert not any(" INFO " in line for line in others), text
