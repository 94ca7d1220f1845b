"""The pipeline through the clusters of `services up --cluster`: a Redis Cluster as the staging
store and a three-broker Kafka, every process given only cluster.env's settings."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from redis.cluster import RedisCluster

from config.settings import Settings
from core.redis_client import redis_client
from core.staging import Keys, Staging
from tests.ticdc_sink.pipelines import (
    PROCESS_LOGS,
    applied_resolved_ts,
    assert_replicated,
    pipeline_env,
    pipeline_running,
    spawn,
    stop,
)
from ticdc_sink.produce import run_produce
from ticdc_sink.services.cluster import kafka_cluster_up, kafka_nodes, redis_cluster_up, redis_nodes

pytestmark = pytest.mark.integration

PARTITIONS = 3
TRANSACTIONS = 300
FAILOVER_TRANSACTIONS = 3_000
# How long the killed nodes stay down.
RESTART_AFTER_S = 10


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
    placement = document["redis"]
    assert placement["slot"] == redis_client(on_clusters).keyslot(Keys(unique).offsets)  # type: ignore[no-untyped-call]
    assert placement["master"] and len(placement["replicas"]) == 1


def test_killed_redis_master_kafka_broker_and_leading_sink_lose_nothing(
    on_clusters: Settings, clusters_env: dict[str, str], unique: str, tmp_path: Path
) -> None:
    """SIGKILL, mid-stream, the Redis master of the pipeline's slot (the sink's lease is on it),
    a Kafka broker and the leading sink; the Redis node and the broker are back 10 s later.
    The standby sink takes over on the failed-over master, one leader at a time, each with an
    epoch of its own; no other process exits, the checkpoint never goes back, row-exact; status
    shows the new master."""
    expected = tmp_path / "expected.json"
    _, final = run_produce(
        on_clusters, unique, "open", PARTITIONS, FAILOVER_TRANSACTIONS, seed=5,
        expected=expected, schema=unique,
    )  # fmt: skip
    client = redis_client(on_clusters)
    assert isinstance(client, RedisCluster)
    master = client.nodes_manager.slots_cache[client.keyslot(Keys(unique).offsets)][0]
    redis_node = next(n for n in redis_nodes() if n.endpoint.port == master.port)
    broker = kafka_nodes()[1]
    env = {
        **pipeline_env(on_clusters, "open"),
        **clusters_env,
        "TICDC_SINK_REDIS_MIN_REPLICAS": "1",
    }
    seen: list[int] = []
    with pipeline_running(env) as processes:
        logs = {"first": PROCESS_LOGS / f"{unique}-apply-first.log"}
        logs["standby"] = PROCESS_LOGS / f"{unique}-apply-standby.log"
        # pipeline_running's own sink is replaced by two whose logs this test reads.
        stop(processes.pop())
        sinks = {name: spawn("apply", env, path) for name, path in logs.items()}
        processes += sinks.values()
        deadline = time.monotonic() + 240
        while not (leading := [n for n, path in logs.items() if "leading" in path.read_text()]):
            assert time.monotonic() < deadline, "no sink leads"
            time.sleep(0.1)
        (leader,) = leading
        while Staging(client, unique).staged_totals()[0] == 0:
            assert time.monotonic() < deadline, "nothing staged"
            time.sleep(0.1)
        assert applied_resolved_ts(on_clusters) < final, "done before the kill"
        for pid in (redis_node.our_pid(), broker.our_pid(), sinks[leader].pid):
            assert pid is not None
            os.killpg(pid, signal.SIGKILL)
        killed = time.monotonic()
        alive = [p for p in processes if p is not sinks[leader]]
        restarted = False
        while (applied := applied_resolved_ts(on_clusters)) < final:
            seen.append(applied)
            exited = [f"{p.args[-1]} (exit {p.returncode})" for p in alive if p.poll() is not None]
            assert not exited, f"exited: {', '.join(exited)}"
            assert time.monotonic() < deadline, "the sink never reached the last resolved ts"
            if not restarted and time.monotonic() - killed > RESTART_AFTER_S:
                redis_cluster_up()
                kafka_cluster_up()
                restarted = True
            time.sleep(0.25)
        if not restarted:
            redis_cluster_up()
            kafka_cluster_up()
        status = subprocess.run(
            [sys.executable, "-m", "ticdc_sink", "status", "--json"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert_replicated(on_clusters, expected)
    assert seen == sorted(seen)
    (standby,) = set(logs) - {leader}
    assert "leading pipeline" in logs[standby].read_text()
    # Each lead, first or taken again after a lapse, by either sink: an epoch of its own.
    text = "".join(path.read_text() for path in logs.values())
    leads = re.findall(r"with epoch (\d+)|epoch \d+ -> (\d+)", text)
    epochs = [int(epoch) for pair in leads for epoch in pair if epoch]
    assert len(epochs) >= 2 and len(epochs) == len(set(epochs)), epochs
    # The replica took over; the killed master came back as its replica.
    placement = orjson.loads(status.stdout)["redis"]
    assert placement["master"] != master.name
    assert placement["replicas"] == [master.name]
