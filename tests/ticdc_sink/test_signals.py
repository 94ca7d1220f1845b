"""Real processes stopped by SIGTERM and SIGINT: clean exits, no tracebacks, the sink's lease
released; their log lines in the configured form."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from core.model import ColumnFlag, Op, Resolved, RowChange, column_type
from core.redis_client import redis_client as make_redis_client
from core.staging import Keys, Staging, TopicPartition
from spark_sink.db.checkpoint import read_checkpoint
from spark_sink.db.connection import connect
from spark_sink.target import Target
from streams.codecs import codec_for
from streams.status import kafka_view
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
    # One line at start (what, which pipeline, which version) and one at stop.
    assert re.search(rf"ticdc-sink \S+: a worker of pipeline {unique} starting on ", text), text
    assert f"the worker of pipeline {unique} stopped" in text
    # It committed what it staged and left the group: no member holds a partition any more.
    tps = [TopicPartition(topic, p) for p in partitions]
    view = await kafka_view(pipeline, tps)
    assert view.committed == dict.fromkeys(tps, len(messages))
    assert view.owners == dict.fromkeys(tps)


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


@pytest.mark.parametrize(
    ("command", "running"), [("worker", "staged 0 rows in"), ("apply", "leading pipeline")]
)
def test_sigquit_writes_every_threads_stack_and_the_process_runs_on(
    command: str, running: str, pipeline: Settings, topic: str, tmp_path: Path
) -> None:
    """What an operator sends a process that seems stuck: its threads' stacks, main thread
    included, on its stderr; then it goes on and stops cleanly as ever."""
    log = tmp_path / f"{command}.log"
    env = pipeline_env(pipeline, "open", TICDC_SINK_PROGRESS_INTERVAL="1")
    process = spawn(command, env, log)
    try:
        _wait_for_line(log, running, process, timeout=120)
        process.send_signal(signal.SIGQUIT)
        text = _wait_for_line(log, r"most recent call first", process, timeout=10)
        assert re.search(r"(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\)", text)
        assert 'File "' in text.split("most recent call first", 1)[1], text
        time.sleep(1)
        assert process.poll() is None, log.read_text()
    except BaseException:
        process.kill()
        raise
    _stopped_cleanly(process, log, signal.SIGTERM)


BACKLOG_TS = 449_300_000_000_000_000


def _stage_backlog(settings: Settings, rows: int, per_transaction: int) -> None:
    """The downstream's empty ``<group>.keyed``, and ``rows`` inserts into it,
    ``per_transaction`` to a commit ts, staged as messages of 2,000 rows of one partition,
    resolved at the last."""
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{settings.group}`")
        cursor.execute(f"CREATE TABLE `{settings.group}`.keyed (id INT PRIMARY KEY, v CHAR(1))")
    key = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
    columns = {"id": column_type(3, key), "v": column_type(15, int(ColumnFlag.NULLABLE))}
    staging = Staging(make_redis_client(settings), settings.group)
    staging.set_partition_count("backlog", 1)
    last = BACKLOG_TS + (rows - 1) // per_transaction
    for offset, first in enumerate(range(0, rows, 2_000)):
        changes = [
            RowChange(
                BACKLOG_TS + i // per_transaction,
                settings.group,
                "keyed",
                Op.INSERT,
                columns,
                {"id": i, "v": "x"},
                None,
            )
            for i in range(first, min(first + 2_000, rows))
        ]
        staging.stage(TopicPartition("backlog", 0), offset, changes, watermark=None)
    staging.stage(TopicPartition("backlog", 0), offset + 1, [], watermark=last)


def _apply_up_to(pipeline: Settings, env: dict[str, str], last: int, log: Path) -> None:
    """A new sink, until the checkpoint is at ``last``; then stopped cleanly."""
    sink = spawn("apply", env, log)
    try:
        deadline = time.monotonic() + 180
        target = Target(pipeline)
        while read_checkpoint(target.downstream, target.checkpoints).resolved_ts < last:
            assert time.monotonic() < deadline, log.read_text()
            assert sink.poll() is None, log.read_text()
            time.sleep(0.25)
        sink.send_signal(signal.SIGTERM)
        assert sink.wait(timeout=60) == 0
    finally:
        sink.kill()


def test_a_sink_stops_within_seconds_of_sigterm_whatever_its_backlog(
    pipeline: Settings, tmp_path: Path
) -> None:
    """SIGTERM while 500,000 staged rows apply in 2,000-row batches: the sink leaves within 5 s
    after the batch in progress, with nothing lost; a restart applies the rest, row-exact."""
    rows = 500_000
    _stage_backlog(pipeline, rows, per_transaction=16)
    env = pipeline_env(pipeline, "open", TICDC_SINK_BATCH_ROWS="2000")
    log = tmp_path / "sink.log"
    sink = spawn("apply", env, log)
    try:
        # Some batches applied, most of the backlog still ahead.
        _wait_for_line(log, r"applied 2\d{3} changes", sink, 180)
        sink.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        assert sink.wait(timeout=60) == 0, log.read_text()
        took = time.monotonic() - signalled
    finally:
        sink.kill()
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text
    assert took < 5, f"the sink took {took:.1f} s to stop:\n{text}"
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM `{pipeline.group}`.keyed")
        (stopped_at,) = cursor.fetchone()
    assert 0 < stopped_at < rows, "the sink stopped before the first batch or after the last"
    again = {**env, "TICDC_SINK_BATCH_ROWS": "200000"}
    _apply_up_to(pipeline, again, BACKLOG_TS + (rows - 1) // 16, tmp_path / "again.log")
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*), MIN(id), MAX(id), SUM(id) FROM `{pipeline.group}`.keyed")
        assert cursor.fetchone() == (rows, 0, rows - 1, rows * (rows - 1) // 2)


def test_a_sink_whose_stop_is_stuck_ends_itself_at_its_stop_timeout_and_loses_nothing(
    pipeline: Settings, tmp_path: Path
) -> None:
    """SIGTERM while the sink's batch waits on a row lock the downstream holds for another
    transaction: at TICDC_SINK_STOP_TIMEOUT the sink writes where each thread was and ends
    with exit 3, its batch rolled back; once the lock goes, a new sink applies all, row-exact."""
    rows = 100
    _stage_backlog(pipeline, rows, per_transaction=1)
    env = pipeline_env(pipeline, "open", TICDC_SINK_STOP_TIMEOUT="3")
    log = tmp_path / "sink.log"
    locker = connect(pipeline)
    sink = None
    try:
        with locker.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute(f"INSERT INTO `{pipeline.group}`.keyed VALUES (50, 'y')")
        sink = spawn("apply", env, log)
        _wait_for_line(log, "leading pipeline", sink, 120)
        with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
            deadline = time.monotonic() + 60
            waits = 0
            while not waits:
                assert time.monotonic() < deadline, log.read_text()
                cursor.execute(
                    "SELECT COUNT(*) FROM information_schema.innodb_trx "
                    "WHERE trx_state = 'LOCK WAIT'"
                )
                (waits,) = cursor.fetchone()
                time.sleep(0.1)
        sink.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        assert sink.wait(timeout=30) == 3, log.read_text()
        took = time.monotonic() - signalled
    finally:
        locker.rollback()
        locker.close()
        if sink is not None:
            sink.kill()
    text = log.read_text(errors="replace")
    assert 3 <= took < 10, f"it ended {took:.1f} s after SIGTERM:\n{text}"
    assert "still stopping 3 s after SIGTERM (TICDC_SINK_STOP_TIMEOUT): ending now, exit 3" in text
    assert "most recent call first" in text and "Traceback" not in text, text
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM `{pipeline.group}`.keyed")
        assert cursor.fetchone() == (0,)
    _apply_up_to(pipeline, env, BACKLOG_TS + rows - 1, tmp_path / "again.log")
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*), SUM(id) FROM `{pipeline.group}`.keyed")
        assert cursor.fetchone() == (rows, rows * (rows - 1) // 2)


def test_a_worker_whose_stop_is_stuck_on_kafka_ends_itself_at_its_stop_timeout(
    pipeline: Settings, topic: str, tmp_path: Path
) -> None:
    """SIGTERM while Kafka is frozen (SIGSTOP): Faust's stop waits on the group coordinator;
    at TICDC_SINK_STOP_TIMEOUT the worker writes where each thread was and ends (exit 3)."""
    from ticdc_sink.services.kafka import KafkaService

    kafka = KafkaService().our_pid()
    assert kafka is not None, "Kafka is not one this project started"
    log = tmp_path / "worker.log"
    env = pipeline_env(
        pipeline, "open", TICDC_SINK_STOP_TIMEOUT="3", TICDC_SINK_PROGRESS_INTERVAL="1"
    )
    worker = spawn("worker", env, log)
    try:
        _wait_for_line(log, "staged 0 rows in", worker, 120)
        os.kill(kafka, signal.SIGSTOP)
        try:
            worker.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            assert worker.wait(timeout=30) == 3, log.read_text()
            took = time.monotonic() - signalled
        finally:
            os.kill(kafka, signal.SIGCONT)
    finally:
        worker.kill()
    text = log.read_text(errors="replace")
    assert 3 <= took < 10, f"it ended {took:.1f} s after SIGTERM:\n{text}"
    assert "still stopping 3 s after SIGTERM (TICDC_SINK_STOP_TIMEOUT): ending now, exit 3" in text
    assert "most recent call first" in text, text
