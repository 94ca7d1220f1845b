"""The pipeline through the clusters of `services up --cluster`: a Redis Cluster as the staging
store and a three-broker Kafka, every process given only cluster.env's settings."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings, load_settings
from core.redis_client import redis_client
from core.staging import Staging
from spark_sink.db.connection import connect
from tests.ticdc_sink.pipelines import (
    applied_resolved_ts,
    assert_replicated,
    forget_logs,
    pipeline_env,
    pipeline_running,
    process_logs,
)
from ticdc_sink.produce import run_produce

pytestmark = pytest.mark.integration

PARTITIONS = 3
TRANSACTIONS = 300


@pytest.fixture
def on_clusters(
    clusters_env: dict[str, str], unique: str, call_failed: Any, mariadb_connect: Any
) -> Iterator[Settings]:
    """A pipeline of this test's own on the clusters, its keys, topic and databases deleted
    afterwards."""
    settings = load_settings(environ={**os.environ, **clusters_env}).updated(
        {"group": unique, "topics": (unique,), "meta_db": f"{unique}_meta"}
    )
    yield settings
    if call_failed():
        print(f"output of the processes of pipeline {unique}:\n{process_logs(unique)}")
    forget_logs(unique)
    Staging(redis_client(settings), unique).clear()
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}`")
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")


def test_a_pipeline_replicates_through_the_redis_cluster_and_three_brokers(
    on_clusters: Settings, clusters_env: dict[str, str], unique: str, tmp_path: Path
) -> None:
    expected = tmp_path / "expected.json"
    _, final = run_produce(
        on_clusters, unique, "open", PARTITIONS, TRANSACTIONS, seed=3, expected=expected,
        schema=unique,
    )  # fmt: skip
    env = {**pipeline_env(on_clusters, "open"), **clusters_env}
    with pipeline_running(env) as processes:
        deadline = time.monotonic() + 120
        while applied_resolved_ts(on_clusters) < final:
            assert all(p.poll() is None for p in processes), "a process exited"
            assert time.monotonic() < deadline, "the sink never reached the last resolved ts"
            time.sleep(0.25)
        status = subprocess.run(
            [sys.executable, "-m", "ticdc_sink", "status", "--json"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert_replicated(on_clusters, expected)
    assert status.returncode == 0, status.stderr
    document = orjson.loads(status.stdout)
    assert document["checkpoint_ts"] == final
    assert len(document["partitions"]) == PARTITIONS
