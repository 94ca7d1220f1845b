"""N independent pipelines at once, staged on one Redis and on the Redis Cluster, side by side.

For each staging store (one Redis first: the baseline; then the Redis Cluster of `services up
--cluster`) and each pipeline count N, N pipelines run together, each with a topic, a consumer
group, a meta database and a target database of its own, one `ticdc-sink worker` and one
`ticdc-sink apply` each. Every sink starts first and leads; then each pipeline's backlog of T
transactions is produced (Open Protocol, 4 partitions, the three-broker Kafka of `services up
--cluster` for both stores), then the workers start. Aggregate rows/s = the pipelines' row
changes together / the time from the first staged message of any until every checkpoint covers
its backlog. Beside it: the ratio to the same N on one Redis, each Redis node's CPU us per row
(INFO cpu), which master serves each pipeline's slot, and the load average.

    python -m benchmarks.bench_pipelines [--pipelines 1,2,4] [--transactions T]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from benchmarks import script
from benchmarks.bench_e2e import stop
from benchmarks.cpu import redis_cpu
from benchmarks.topics import delete_topics
from config.settings import Settings, load_settings
from core.redis_client import redis_client
from core.staging import Keys, Staging
from spark_sink.db.checkpoint import CheckpointWatch
from spark_sink.db.connection import connect
from ticdc_sink.dispatchers import Dispatcher
from ticdc_sink.produce import run_produce
from ticdc_sink.scenario import Scenario
from ticdc_sink.services.cluster import kafka_cluster_env, redis_cluster_env, redis_nodes

PARTITIONS = 4
# How long N sinks may take to start Spark and lead on a busy 2-core machine.
LEAD_TIMEOUT_S = 300.0
RUN_TIMEOUT_S = 900.0
STORES = ("one Redis", "Redis Cluster")


@dataclass
class Run:
    store: str
    pipelines: int
    rows: int
    seconds: float
    # Each Redis node's CPU seconds during the timed part, by "host:port".
    redis_cpu: dict[str, float]
    # The master serving each pipeline's slot ("" on one Redis).
    masters: list[str]
    load: str

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


def store_env(store: str) -> dict[str, str]:
    """The settings of ``store``: the Kafka cluster either way, the Redis Cluster or not."""
    env = kafka_cluster_env()
    return {**env, **redis_cluster_env()} if store == "Redis Cluster" else env


def spawn(env: dict[str, str], command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "ticdc_sink", command], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def node_clients(store: str, settings: Settings) -> dict[str, Any]:
    """A plain client per Redis node of ``store``, by "host:port"."""
    if store == "Redis Cluster":
        return {
            str(n.endpoint): redis.Redis(host=n.endpoint.host, port=n.endpoint.port)
            for n in redis_nodes()
        }
    return {"one Redis": redis_client(settings)}


def slot_master(client: Any, group: str) -> str:
    if not hasattr(client, "nodes_manager"):
        return ""
    node = client.nodes_manager.slots_cache[client.keyslot(Keys(group).offsets)][0]
    return f"{node.host}:{node.port}"


def run_pipelines(store: str, count: int, transactions: int, topics: list[str]) -> Run:
    env = {**os.environ, **store_env(store)}
    base = load_settings(environ=env)
    names = [f"bench_pipes_{uuid.uuid4().hex[:8]}" for _ in range(count)]
    topics += names
    pipelines = [base.updated({"group": n, "topics": (n,), "meta_db": f"{n}_meta"}) for n in names]
    envs = [
        {**env, "TICDC_SINK_GROUP": n, "TICDC_SINK_TOPICS": n, "TICDC_SINK_META_DB": f"{n}_meta",
         "TICDC_SINK_PROTOCOL": "open", "TICDC_SINK_WEB_PORT": "0"}
        for n in names
    ]  # fmt: skip
    client = redis_client(base)
    stagings = [Staging(client, n) for n in names]
    processes = [spawn(e, "apply") for e in envs]
    try:
        deadline = time.monotonic() + LEAD_TIMEOUT_S
        while not all(s.sink_leads() for s in stagings):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} sinks did not lead in {LEAD_TIMEOUT_S:.0f} s")
            time.sleep(0.2)
        finals = []
        for i, settings in enumerate(pipelines):
            expected = Path(".ticdc-sink") / f"{settings.group}.json"
            _, final = run_produce(
                settings, settings.group, "open", PARTITIONS, transactions, seed=5 + i,
                expected=expected, schema=settings.group, dispatcher=Dispatcher.INDEX_VALUE,
            )  # fmt: skip
            expected.unlink()
            finals.append(final)
        rows = sum(
            len(t.rows)
            for i in range(count)
            for t in Scenario(seed=5 + i, transactions=transactions).history()
        )
        nodes = node_clients(store, base)
        processes += [spawn(e, "worker") for e in envs]
        while not any(s.staged_offsets(s.partitions()) for s in stagings):
            time.sleep(0.01)
        started = time.monotonic()
        cpu_before = {name: redis_cpu(node) for name, node in nodes.items()}
        watches = [CheckpointWatch(s) for s in pipelines]
        try:
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while any(w.applied_resolved_ts() < f for w, f in zip(watches, finals, strict=True)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{count} pipelines did not finish in {RUN_TIMEOUT_S} s")
                time.sleep(0.05)
        finally:
            for watch in watches:
                watch.close()
        seconds = time.monotonic() - started
        spent = {name: redis_cpu(node) - cpu_before[name] for name, node in nodes.items()}
        load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    finally:
        stop(processes)
    masters = [slot_master(client, n) for n in names]
    for staging in stagings:
        staging.clear()
    with connect(base, autocommit=True) as conn, conn.cursor() as cursor:
        for name in names:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}_meta`")
    return Run(store, count, rows, seconds, spent, masters, load)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", default="1,2,4", help="pipeline counts run at once")
    parser.add_argument("--transactions", type=int, default=1_000, help="per pipeline")
    args = parser.parse_args()
    counts = [int(n) for n in args.pipelines.split(",")]
    topics: list[str] = []
    runs: list[Run] = []
    try:
        # Alternating the stores per count: neighbours on a shared machine weigh on both alike.
        for count in counts:
            for store in STORES:
                runs.append(run_pipelines(store, count, args.transactions, topics))
    finally:
        settings = load_settings(environ={**os.environ, **kafka_cluster_env()})
        asyncio.run(delete_topics(settings, topics))
    print(
        f"N pipelines at once, {args.transactions} transactions each, {PARTITIONS} partitions, "
        "Open Protocol, the three-broker Kafka, one worker and one sink per pipeline"
    )
    print(
        f"{'store':14} {'N':>2} {'rows':>7} {'rows/s':>8} {'vs one Redis':>12}  "
        "Redis CPU us/row by node; slot masters; load average"
    )
    baseline = {r.pipelines: r.rate for r in runs if r.store == STORES[0]}
    for run in runs:
        per_node = ", ".join(
            f"{node} {spent / run.rows * 1e6:.2f}" for node, spent in run.redis_cpu.items()
        )
        masters = " ".join(run.masters) if any(run.masters) else "-"
        print(
            f"{run.store:14} {run.pipelines:2d} {run.rows:7d} {run.rate:8,.0f} "
            f"{run.rate / baseline[run.pipelines]:12.2f}  {per_node}; {masters}; {run.load}"
        )


if __name__ == "__main__":
    script.run(main)
