"""`services up --cluster`: which nodes it runs, where, and a killed node started again."""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis

from config.settings import Settings
from ticdc_sink.services.base import ServiceState
from ticdc_sink.services.cluster import RedisClusterNode, cluster_info, redis_cluster_up
from ticdc_sink.services.manager import all_services, state_text


def test_the_cluster_nodes_come_only_with_the_option() -> None:
    plain = {service.name for service in all_services()}
    nodes = [s for s in all_services(cluster=True) if s.name not in plain]
    assert [n.endpoint.port for n in nodes] == [
        7000,
        7001,
        7002,
        7003,
        7004,
        7005,
        9192,
        9193,
        9194,
    ]
    assert "--cluster" in state_text(nodes[0], ServiceState.STOPPED)


@pytest.mark.integration
def test_a_killed_replica_is_started_again_and_rejoins(
    redis_cluster_settings: Settings,
) -> None:
    replica = next(
        node
        for node in (RedisClusterNode(i) for i in range(6))
        if redis.Redis(node.endpoint.host, node.endpoint.port).info("replication")["role"]
        == "slave"
    )
    pid = replica.our_pid()
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)
    while replica.answers():
        time.sleep(0.05)
    states = dict((node.name, state) for node, state in redis_cluster_up())
    assert states[replica.name] is ServiceState.OURS
    assert cluster_info(replica.endpoint)["cluster_state"] == "ok"
