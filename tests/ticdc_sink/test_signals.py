"""Real processes stopped by SIGTERM and SIGINT: clean exits, no tracebacks, the sink's lease
released; their log lines in the configured form."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from core.model import Resolved
from core.staging import Keys
from streams.codecs import codec_for
from tests.ticdc_sink.pipelines import TOPIC_PARTITIONS, pipeline_env, spawn
from ticdc_sink.produce import send

pytestmark = pytest.mark.integration

# A text log line: UTC time, level, [pipeline], logger.
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO|WARN|WARNING|ERROR) \[")
# Ours and the JVM's: what a process may print on stderr besides log lines.
JVM_NOTICE = "WARNING: Using incubator modules"


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
    pipeline: Settings, topic: str, unique: str, tmp_path: Path, signum: int
) -> None:
    resolved = 449_000_000_000_000_000
    messages = codec_for("open").encode([Resolved(resolved)])
    partitions = range(TOPIC_PARTITIONS)
    await send(pipeline, topic, TOPIC_PARTITIONS, [(p, m) for p in partitions for m in messages])
    log = tmp_path / "worker.log"
    worker = spawn("worker", pipeline_env(pipeline, "open", TICDC_SINK_PROGRESS_INTERVAL="1"), log)
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
    pipeline: Settings, unique: str, tmp_path: Path, redis_client: Any, signum: int
) -> None:
    log = tmp_path / "sink.log"
    env = pipeline_env(
        pipeline, "open", TICDC_SINK_SPARK_MASTER="local[1]", TICDC_SINK_LOG_FORMAT="json"
    )
    sink = spawn("apply", env, log)
    try:
        _wait_for_line(log, r"leading pipeline", sink, 180)
    except BaseException:
        sink.kill()
        raise
    assert redis_client.exists(Keys(unique).leader)
    text = _stopped_cleanly(sink, log, signum)
    # Released at once: a standby takes over now, not after the lease's term.
    assert not redis_client.exists(Keys(unique).leader)
    ours = [orjson.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert {"time", "level", "pipeline", "logger", "message"} <= set(ours[0])
    assert all(r["pipeline"] == unique and r["time"].endswith("Z") for r in ours)
    assert any("released the lease" in r["message"] for r in ours)
    # Spark's JVM says only what is WARN or worse, in the sink's form.
    others = [line for line in text.splitlines() if line.strip() and not line.startswith("{")]
    assert all(JVM_NOTICE in line or TEXT_LINE.match(line) for line in others), text
    assert not any(" INFO " in line for line in others), text


@pytest.mark.parametrize("command", ["worker", "apply"])
def test_a_service_stopped_while_it_waits_for_its_services_exits_0(
    command: str, pipeline: Settings, tmp_path: Path
) -> None:
    log = tmp_path / f"{command}.log"
    # Nothing listens there: the process is still waiting at start when the signal comes.
    env = pipeline_env(
        pipeline,
        "open",
        TICDC_SINK_KAFKA="127.0.0.1:1",
        TICDC_SINK_DOWNSTREAM="mysql://root@127.0.0.1:1/",
        TICDC_SINK_STARTUP_TIMEOUT="60",
    )
    process = spawn(command, env, log)
    _wait_for_line(log, "unavailable since|waiting|did not answer", process, timeout=60)
    text = _stopped_cleanly(process, log, signal.SIGTERM)
    assert "stopped (SIGTERM)" in text
