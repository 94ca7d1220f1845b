"""A Kafka broker of the three-broker cluster SIGKILLed under a running pipeline: the one that
leads a partition of the topic, or the one that coordinates the pipeline's consumer group. The
topic has RF 3 (min ISR 2) and was written by `produce`'s idempotent, so ``acks=all``, producer."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from config.settings import Settings
from core.kafka_client import kafka_options
from core.redis_client import redis_client
from core.staging import Staging
from tests.ticdc_sink.pipelines import (
    PROCESS_LOGS,
    applied_resolved_ts,
    assert_replicated,
    pipeline_env,
    pipeline_running,
)
from ticdc_sink.produce import expected_state, run_produce, scenario_messages, send
from ticdc_sink.scenario import Scenario
from ticdc_sink.services.cluster import kafka_cluster_up, kafka_nodes

PARTITIONS = 3
TRANSACTIONS = 1_500
# How long the killed broker stays down.
RESTART_AFTER_S = 10


async def _admin_call(settings: Settings, call: Callable[[Any], Any]) -> Any:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        return await call(admin)
    finally:
        await admin.close()


def partition_leaders(settings: Settings, topic: str) -> dict[int, int]:
    """Each partition of ``topic`` and the node id of the broker that leads it, from metadata."""
    (described,) = asyncio.run(_admin_call(settings, lambda a: a.describe_topics([topic])))
    return {p["partition"]: p["leader"] for p in described["partitions"]}


def group_coordinator(settings: Settings, group: str) -> int:
    """The node id of the broker coordinating consumer group ``group`` (FindCoordinator)."""
    coordinator: int = asyncio.run(_admin_call(settings, lambda a: a.find_coordinator(group)))
    return coordinator


def broker_of(node_id: int) -> Any:
    # The cluster's node ids are its nodes' indexes plus one.
    return kafka_nodes()[node_id - 1]


def ride_out_a_killed_broker(
    settings: Settings,
    env: dict[str, str],
    expected: Path,
    final: int,
    pick: Callable[[], int],
    while_down: Callable[[], object] = lambda: None,
) -> int:
    """Run the pipeline; once it has staged something, SIGKILL the broker ``pick`` names, call
    ``while_down`` and bring the broker back RESTART_AFTER_S after the kill. Asserts that no
    process exits, the checkpoint never goes back and the downstream is row-exact; returns the
    node id of the killed broker."""
    staging = Staging(redis_client(settings), settings.group)
    seen: list[int] = []
    with pipeline_running(env) as processes:
        deadline = time.monotonic() + 120
        while staging.staged_totals()[0] == 0:
            assert all(p.poll() is None for p in processes), "a process exited"
            assert time.monotonic() < deadline, "nothing staged"
            time.sleep(0.05)
        node_id = pick()
        broker = broker_of(node_id)
        assert applied_resolved_ts(settings) < final, "done before the kill"
        pid = broker.our_pid()
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)
        killed = time.monotonic()
        while_down()
        restarted = False
        try:
            while (applied := applied_resolved_ts(settings)) < final:
                seen.append(applied)
                assert all(p.poll() is None for p in processes), "a process exited"
                assert time.monotonic() < deadline, "the sink never reached the last resolved ts"
                if not restarted and time.monotonic() - killed > RESTART_AFTER_S:
                    kafka_cluster_up()
                    restarted = True
                time.sleep(0.25)
        finally:
            if not restarted:
                kafka_cluster_up()
        assert all(p.poll() is None for p in processes), "a process exited"
    assert_replicated(settings, expected)
    assert seen == sorted(seen)
    # The outage was waited out with log lines, not tracebacks.
    for log in PROCESS_LOGS.glob(f"{settings.group}-*.log"):
        assert "Traceback" not in log.read_text(errors="replace"), log.name
    return node_id


def _produced(settings: Settings, tmp_path: Path, seed: int) -> tuple[Path, int]:
    expected = tmp_path / "expected.json"
    _, final = run_produce(
        settings, settings.group, "open", PARTITIONS, TRANSACTIONS, seed=seed,
        expected=expected, schema=settings.group,
    )  # fmt: skip
    return expected, final


def test_a_killed_partition_leader_loses_nothing_and_the_worker_follows_the_new_leader(
    on_clusters: Settings, clusters_env: dict[str, str], unique: str, tmp_path: Path
) -> None:
    """The first half of the stream is in the topic before the pipeline starts; the second half
    is produced (``acks=all``) while the killed leader is down."""
    scenario = Scenario(seed=7, transactions=TRANSACTIONS, schema=unique)
    messages, final = scenario_messages(scenario, "open", PARTITIONS)
    expected = tmp_path / "expected.json"
    expected.write_bytes(orjson.dumps(expected_state(scenario)))
    half = len(messages) // 2
    asyncio.run(send(on_clusters, unique, PARTITIONS, messages[:half]))
    before = partition_leaders(on_clusters, unique)
    env = {**pipeline_env(on_clusters, "open"), **clusters_env}

    def a_leader_not_coordinating() -> int:
        # Not the coordinator, when one can: the coordinator's loss has a test of its own.
        coordinator = group_coordinator(on_clusters, unique)
        leaders = sorted(set(before.values()))
        return next((n for n in leaders if n != coordinator), leaders[0])

    def the_rest() -> None:
        asyncio.run(send(on_clusters, unique, PARTITIONS, messages[half:]))

    killed = ride_out_a_killed_broker(
        on_clusters, env, expected, final, a_leader_not_coordinating, the_rest
    )
    led = [p for p, leader in before.items() if leader == killed]
    assert led
    # Its partitions were replicated downstream through the leaders that took them over.
    after = partition_leaders(on_clusters, unique)
    assert all(after[p] not in (killed, -1) for p in led), (before, after, killed)


def test_a_killed_group_coordinator_is_ridden_out(
    on_clusters: Settings, clusters_env: dict[str, str], unique: str, tmp_path: Path
) -> None:
    expected, final = _produced(on_clusters, tmp_path, seed=11)
    env = {**pipeline_env(on_clusters, "open"), **clusters_env}
    killed = ride_out_a_killed_broker(
        on_clusters, env, expected, final, lambda: group_coordinator(on_clusters, unique)
    )
    assert group_coordinator(on_clusters, unique) != killed
