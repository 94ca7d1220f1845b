"""The clusters users grow into, on loopback (`services up --cluster`): a Redis Cluster of three
masters and three replicas, and a three-node KRaft Kafka, from the same packages as the plain
services. The settings that point every command at them go to ``<state dir>/cluster.env``."""

from __future__ import annotations

import os
import shlex
import socket
import ssl
import time
from collections.abc import Sequence
from pathlib import Path

from config.errors import ServiceError
from ticdc_sink.services.base import (
    START_TIMEOUT_S,
    Endpoint,
    LocalService,
    ServiceState,
    run_logged,
    state_dir,
)
from ticdc_sink.services.kafka import KafkaService, new_cluster_id
from ticdc_sink.services.redis import RedisService

CLUSTER_ENV = "cluster.env"
HOST = "127.0.0.1"
REDIS_FIRST_PORT = 7000
# Three masters, each with one replica (redis-cli pairs them).
REDIS_NODES = 6
KAFKA_FIRST_PORT = 9192
# The controllers' own listener, apart from the brokers' (9095 is the secured broker's).
KAFKA_FIRST_CONTROLLER_PORT = 9292
KAFKA_NODES = 3
# A master silent this long is failed over to its replica: short, so that a test sees it.
REDIS_NODE_TIMEOUT_MS = 3000
# Three JVMs on a developer's machine: half the single broker's heap each.
KAFKA_CLUSTER_HEAP = "-Xmx512m"


class RedisClusterNode(RedisService):
    """One node of the Redis Cluster; which are masters is the cluster's business (a killed
    master comes back as its successor's replica)."""

    start_option = "--cluster"

    def __init__(self, index: int) -> None:
        self.name = f"redis-cluster-{index + 1}"
        self.endpoint = Endpoint(HOST, REDIS_FIRST_PORT + index)

    def cluster_info(self) -> dict[str, str]:
        """Its CLUSTER INFO, as fields (empty when it does not answer)."""
        return cluster_info(self.endpoint)

    def cli_options(self) -> tuple[list[str], dict[str, str]]:
        """What redis-cli needs to reach it: options and variables."""
        return [], {}

    def command(self) -> list[str]:
        return [
            *super().command(),
            *self.cluster_options(),
        ]

    def cluster_options(self) -> list[str]:
        return [
            "--cluster-enabled", "yes",
            # In --dir: a restarted node finds its place in the cluster again.
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(REDIS_NODE_TIMEOUT_MS),
        ]  # fmt: skip


class KafkaClusterNode(KafkaService):
    """One combined controller+broker of the three-node KRaft cluster."""

    start_option = "--cluster"
    heap = KAFKA_CLUSTER_HEAP
    template = "kafka-cluster-server.properties"

    def __init__(self, index: int) -> None:
        self.index = index
        self.name = f"kafka-cluster-{index + 1}"
        self.endpoint = Endpoint(HOST, KAFKA_FIRST_PORT + index)
        self.controller_port = KAFKA_FIRST_CONTROLLER_PORT + index

    @property
    def lib(self) -> Path:
        # The same jars as the plain broker: resolved once.
        return KafkaService().lib

    def template_values(self) -> dict[str, object]:
        voters = ",".join(
            f"{i + 1}@{HOST}:{KAFKA_FIRST_CONTROLLER_PORT + i}" for i in range(KAFKA_NODES)
        )
        return {**super().template_values(), "node_id": self.index + 1, "voters": voters}

    def cluster_id(self) -> str:
        # One id for the three nodes, made by the first one formatted.
        path = state_dir() / "kafka-cluster.id"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(new_cluster_id() + "\n")
        return path.read_text().strip()


def redis_nodes() -> list[RedisClusterNode]:
    return [RedisClusterNode(i) for i in range(REDIS_NODES)]


def kafka_nodes() -> list[LocalService]:
    return [KafkaClusterNode(i) for i in range(KAFKA_NODES)]


def cluster_services() -> list[LocalService]:
    """Every node, in start order: Redis's, then Kafka's."""
    return [*redis_nodes(), *kafka_nodes()]


def start_together(nodes: Sequence[LocalService]) -> list[tuple[LocalService, ServiceState]]:
    """Launch every node that does not answer, then wait for each: a KRaft broker answers only
    once a majority of the controllers runs."""
    launched = [(node, node.launch()) for node in nodes]
    return [(node, node.finish_up(process)) for node, process in launched]


def cluster_info(
    endpoint: Endpoint, context: ssl.SSLContext | None = None, login: tuple[str, str] | None = None
) -> dict[str, str]:
    """A Redis Cluster node's CLUSTER INFO, as fields (empty when it does not answer); over
    TLS with ``context``, after AUTH with ``login`` (user, password)."""
    request = b"CLUSTER INFO\r\n"
    if login is not None:
        request = b"AUTH %s %s\r\n" % (login[0].encode(), login[1].encode()) + request
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=2) as raw:
            conn = context.wrap_socket(raw, server_hostname=endpoint.host) if context else raw
            conn.sendall(request)
            reply = _Reply(conn)
            if login is not None and reply.line() != b"+OK":
                return {}
            head = reply.line()
            if not head.startswith(b"$"):
                return {}
            body = reply.exactly(int(head[1:]))
    except (OSError, ValueError):
        return {}
    fields = {}
    for line in body.decode(errors="replace").splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields[name] = value.strip()
    return fields


class _Reply:
    """Lines and bytes of a server's replies, as they come."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn
        self._buffer = b""

    def _more(self) -> None:
        chunk = self._conn.recv(4096)
        if not chunk:
            raise ConnectionError("closed")
        self._buffer += chunk

    def line(self) -> bytes:
        while b"\r\n" not in self._buffer:
            self._more()
        line, _, self._buffer = self._buffer.partition(b"\r\n")
        return line

    def exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._more()
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data


def form_redis_cluster(nodes: Sequence[RedisClusterNode], log: Path) -> None:
    """Create the cluster of ``nodes`` when none belongs to one yet (a fresh start), then wait
    until every node finds it whole: all slots served."""
    options, env = nodes[0].cli_options()
    if all(node.cluster_info().get("cluster_known_nodes") == "1" for node in nodes):
        run_logged(
            "redis-cli --cluster create",
            [
                "redis-cli", *options, "--cluster", "create",
                *(str(node.endpoint) for node in nodes),
                "--cluster-replicas", "1", "--cluster-yes",
            ],
            log,
            env={**os.environ, **env},
        )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_S
    while not all(_whole(node.cluster_info()) for node in nodes):
        if time.monotonic() > deadline:
            raise ServiceError(
                f"the Redis Cluster on {nodes[0].endpoint}..{nodes[-1].endpoint.port} is not "
                f"whole after {START_TIMEOUT_S:.0f} s; its log: {log}"
            )
        time.sleep(0.25)


def redis_cluster_up() -> list[tuple[LocalService, ServiceState]]:
    """Start the Redis Cluster's nodes that do not answer, and form it on a fresh start."""
    nodes = redis_nodes()
    started = start_together(nodes)
    form_redis_cluster(nodes, state_dir() / "redis-cluster.log")
    return started


def kafka_cluster_up() -> list[tuple[LocalService, ServiceState]]:
    """Start the Kafka cluster's nodes that do not answer."""
    return start_together(kafka_nodes())


def cluster_up() -> list[tuple[LocalService, ServiceState]]:
    """Start the Redis Cluster, then the Kafka cluster (what answers is left as it is), and
    write cluster.env."""
    started = redis_cluster_up() + kafka_cluster_up()
    write_cluster_env()
    return started


def redis_cluster_env() -> dict[str, str]:
    """The ``TICDC_SINK_*`` settings that make the Redis Cluster the staging store."""
    return {
        # Any node will do: the client learns the others (and who serves which slot) from it.
        "TICDC_SINK_REDIS_URL": f"redis://{HOST}:{REDIS_FIRST_PORT}/0",
        "TICDC_SINK_REDIS_CLUSTER": "true",
    }


def kafka_cluster_env() -> dict[str, str]:
    """The setting that points a command at the Kafka cluster."""
    return {"TICDC_SINK_KAFKA": ",".join(str(node.endpoint) for node in kafka_nodes())}


def cluster_settings() -> dict[str, str]:
    """The ``TICDC_SINK_*`` settings that point a command at the clusters."""
    return {**kafka_cluster_env(), **redis_cluster_env()}


def write_cluster_env() -> Path:
    """``<state dir>/cluster.env``: ``source`` it to point ticdc-sink at the clusters."""
    path = state_dir() / CLUSTER_ENV
    lines = ["# written by `ticdc-sink services up --cluster`"]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in cluster_settings().items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _whole(info: dict[str, str]) -> bool:
    """Whether a node sees every slot served and every node known."""
    return (
        info.get("cluster_state") == "ok"
        and info.get("cluster_slots_ok") == "16384"
        and info.get("cluster_known_nodes") == str(REDIS_NODES)
    )
