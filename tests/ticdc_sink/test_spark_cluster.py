"""The sink on a real Spark standalone cluster: every staging load runs in the executors' JVMs,
which see neither the driver's files nor its class path."""

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

from config.errors import ServiceError
from config.settings import Settings
from tests.conftest import service_missing
from tests.ticdc_sink.pipelines import (
    applied_resolved_ts,
    assert_replicated,
    pipeline_env,
    pipeline_running,
    process_logs,
    wait_for,
)
from ticdc_sink.produce import run_produce
from ticdc_sink.services.base import LocalService, state_dir
from ticdc_sink.services.spark import (
    MASTER_URL,
    WORKERS,
    master_status,
    registered_workers,
    spark_cluster,
)

pytestmark = pytest.mark.integration

PARTITIONS = 3
EXECUTOR_CLASS = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"
# Executors SIGKILLed while they run a task of the sink's.
EXECUTOR_KILLS = 2
# Not the machine's zone nor UTC, with a half-hour offset: a value shifted by a zone shows.
SINK_TIME_ZONE = "Asia/Kolkata"


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The master URL of the local cluster, started through the same service classes as
    `ticdc-sink services up --spark-cluster`; what this fixture started, it stops."""
    started: list[LocalService] = []
    try:
        for service in spark_cluster():
            running = service.answers()
            service.up()
            if not running:
                started.append(service)
    except ServiceError as error:
        service_missing("the Spark standalone cluster", error)
    yield MASTER_URL
    for service in reversed(started):
        service.down()


def test_both_workers_register_with_the_master(cluster: str) -> None:
    assert len(registered_workers()) == WORKERS


def _services(*args: str) -> dict[str, str]:
    """``ticdc-sink services ARGS``: each service's line, by name."""
    out = subprocess.run(
        [sys.executable, "-m", "ticdc_sink", "services", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    return {line.split()[0]: line for line in out.splitlines()}


def test_services_up_with_the_flag_reuses_the_running_cluster(cluster: str) -> None:
    pids = {service.name: service.our_pid() for service in spark_cluster()}
    shown = _services("up", "--spark-cluster")
    assert {service.name: service.our_pid() for service in spark_cluster()} == pids
    status = _services("status")
    for service in spark_cluster():
        assert str(service.endpoint) in shown[service.name]
        assert "stopped" not in shown[service.name] and "stopped" not in status[service.name]


def _events(event_logs: Path, kind: str) -> list[dict[str, Any]]:
    """The events named ``kind`` of every application that logged to ``event_logs``."""
    events = []
    for log in event_logs.iterdir():
        for line in log.read_bytes().splitlines():
            event = orjson.loads(line)
            if event["Event"] == kind:
                events.append(event)
    return events


def _busy_executor(app_name: str) -> int | None:
    """The pid of a live executor of the application ``app_name`` that is running a task now,
    read from the executors' logs in the local workers' folders."""
    apps = [app["id"] for app in master_status()["activeapps"] if app["name"] == app_name]
    for app in apps:
        for log in state_dir().glob(f"spark-worker-*/work/{app}/*/stderr"):
            text = log.read_text(errors="replace")
            started = re.search(r"Started daemon with process name: (\d+)@", text)
            if started is None or text.count("Running task") <= text.count("Finished task"):
                continue
            pid = int(started[1])
            try:
                alive = EXECUTOR_CLASS in Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:  # it has exited (a killed one's log ends mid-task)
                continue
            if alive:
                return pid
    return None


def test_executors_killed_under_loads_lose_nothing(
    cluster: str, pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    expected = tmp_path / "expected.json"
    _, final = run_produce(
        pipeline, unique, "open", PARTITIONS, 200, seed=19, expected=expected, schema=unique
    )
    env = pipeline_env(
        pipeline,
        "open",
        TICDC_SINK_SPARK_MASTER=cluster,
        TICDC_SINK_SPARK_MIN_ROWS="0",
        TICDC_SINK_LOAD_IN_PLACE="false",
        TICDC_SINK_BATCH_ROWS="300",
    )
    kills, killed_at = 0, -1
    with pipeline_running(env) as processes:
        deadline = time.monotonic() + 300
        while (checkpoint := applied_resolved_ts(pipeline)) < final:
            assert time.monotonic() < deadline, f"stuck after {kills} executors killed"
            # SIGKILL an executor in the middle of a task (its worker starts a new one), once per
            # checkpoint at most, so that each kill hits another batch.
            busy = _busy_executor(f"ticdc-sink-{unique}") if kills < EXECUTOR_KILLS else None
            if busy is not None and checkpoint > killed_at:
                os.kill(busy, signal.SIGKILL)
                kills, killed_at = kills + 1, checkpoint
            time.sleep(0.05 if kills < EXECUTOR_KILLS else 0.5)
        assert all(p.poll() is None for p in processes), "a process died with an executor"
        lost = process_logs(unique, lines=100_000).count("lost an executor")
    assert_replicated(pipeline, expected)
    assert kills == EXECUTOR_KILLS
    assert lost >= 1, "no load lost its executor: the kills missed the tasks"


def test_every_load_runs_in_the_executors_row_exact(
    cluster: str, pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    expected = tmp_path / "expected.json"
    event_logs = tmp_path / "spark-events"
    event_logs.mkdir()
    _, final = run_produce(
        pipeline, unique, "open", PARTITIONS, 300, seed=18, expected=expected, schema=unique
    )
    env = pipeline_env(
        pipeline,
        "open",
        TICDC_SINK_SPARK_MASTER=cluster,
        # Every table of every batch through Spark, none over the driver's connection.
        TICDC_SINK_SPARK_MIN_ROWS="0",
        TICDC_SINK_LOAD_IN_PLACE="false",
        TICDC_SINK_BATCH_ROWS="500",
        TZ=SINK_TIME_ZONE,
        # Spark's own way to take settings from outside the sink: its event log, to tell where
        # each task ran.
        PYSPARK_SUBMIT_ARGS=" ".join(
            f"--conf {name}={value}"
            for name, value in {
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": f"file://{event_logs}",
                # One plain JSON-lines file.
                "spark.eventLog.rolling.enabled": "false",
                "spark.eventLog.compress": "false",
            }.items()
        )
        + " pyspark-shell",
    )
    with pipeline_running(env) as processes:
        wait_for(lambda: applied_resolved_ts(pipeline) >= final, "the workload applied", 300)
        assert all(p.poll() is None for p in processes), "a process died"
    assert_replicated(pipeline, expected)
    (start,) = _events(event_logs, "SparkListenerApplicationStart")
    assert start["App Name"] == f"ticdc-sink-{unique}"
    tasks = _events(event_logs, "SparkListenerTaskEnd")
    assert tasks, "no Spark task ran: the loads bypassed Spark"
    assert {t["Task End Reason"]["Reason"] for t in tasks} == {"Success"}
    executors = {t["Task Info"]["Executor ID"] for t in tasks}
    assert "driver" not in executors
    # One executor per worker (a lost one comes back under a new id).
    assert len(executors) >= WORKERS, f"tasks ran on executors {executors} only"
