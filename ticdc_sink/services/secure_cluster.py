"""The Redis Cluster secured as `services up --secure` secures one Redis (`services up --cluster
--secure`): TLS only, client certificates of the throwaway CA, the ACL user ``ticdc`` with a
password and the default user off, on the cluster bus and between master and replica too. The
settings that reach it (and the Kafka cluster) go to ``<state dir>/cluster-secure.env``."""

from __future__ import annotations

import shlex
from pathlib import Path

from ticdc_sink.services.base import Endpoint, LocalService, ServiceState, state_dir
from ticdc_sink.services.cluster import (
    HOST,
    REDIS_NODES,
    RedisClusterNode,
    cluster_info,
    form_redis_cluster,
    kafka_cluster_env,
    start_together,
)
from ticdc_sink.services.redis import RedisService
from ticdc_sink.services.secure import SECURE_USER, authority, client_tls, password, password_file

SECURE_REDIS_FIRST_PORT = 7100
CLUSTER_SECURE_ENV = "cluster-secure.env"


class SecureRedisClusterNode(RedisClusterNode):
    start_option = "--cluster --secure"

    def __init__(self, index: int) -> None:
        self.name = f"redis-cluster-secure-{index + 1}"
        self.endpoint = Endpoint(HOST, SECURE_REDIS_FIRST_PORT + index)

    @property
    def acl_file(self) -> Path:
        return self.home / "users.acl"

    @property
    def config_file(self) -> Path:
        return self.home / "replication.conf"

    def prepare(self) -> None:
        # Passwords in files of their own: on the command line they would show in `ps`.
        for path in (self.acl_file, self.config_file):
            path.touch(mode=0o600)
        self.acl_file.write_text(
            f"user default off\nuser {SECURE_USER} on >{password('redis')} ~* &* +@all\n"
        )
        # A replica logs in to its master as the one user.
        self.config_file.write_text(f"masteruser {SECURE_USER}\nmasterauth {password('redis')}\n")

    def cluster_info(self) -> dict[str, str]:
        return cluster_info(self.endpoint, client_tls(), (SECURE_USER, password("redis")))

    def ready(self) -> bool:
        """A login over TLS with the client certificate answered."""
        return bool(self.cluster_info())

    def cli_options(self) -> tuple[list[str], dict[str, str]]:
        ca = authority()
        options = [
            "--tls", "--cacert", str(ca.ca), "--cert", str(ca.client_cert),
            "--key", str(ca.client_key), "--user", SECURE_USER,
        ]  # fmt: skip
        return options, {"REDISCLI_AUTH": password("redis")}

    def command(self) -> list[str]:
        ca = authority()
        binary, *plain = RedisService.command(self)
        port = plain.index("--port")
        # No plaintext port: TLS only, every client shows a certificate of the CA, and the
        # nodes speak TLS to each other (cluster bus, replication).
        return [
            binary,
            str(self.config_file),
            *plain[:port],
            "--port", "0",
            *plain[port + 2 :],
            "--tls-port", str(self.endpoint.port),
            "--tls-cert-file", str(ca.server_cert),
            "--tls-key-file", str(ca.server_key),
            "--tls-ca-cert-file", str(ca.ca),
            # The bus and replication present the server certificate as a client's.
            "--tls-client-cert-file", str(ca.client_cert),
            "--tls-client-key-file", str(ca.client_key),
            "--tls-auth-clients", "yes",
            "--tls-cluster", "yes",
            "--tls-replication", "yes",
            "--aclfile", str(self.acl_file),
            *self.cluster_options(),
        ]  # fmt: skip


def secure_redis_nodes() -> list[SecureRedisClusterNode]:
    return [SecureRedisClusterNode(i) for i in range(REDIS_NODES)]


def secure_redis_cluster_up() -> list[tuple[LocalService, ServiceState]]:
    """Start the secured Redis Cluster's nodes that do not answer, and form it on a fresh
    start."""
    nodes = secure_redis_nodes()
    started = start_together(nodes)
    form_redis_cluster(nodes, state_dir() / "redis-cluster-secure.log")
    return started


def secure_redis_cluster_env() -> dict[str, str]:
    """The ``TICDC_SINK_REDIS_*`` settings that make the secured Redis Cluster the staging
    store (the password as a file)."""
    ca = authority()
    return {
        "TICDC_SINK_REDIS_URL": f"rediss://{SECURE_USER}@{HOST}:{SECURE_REDIS_FIRST_PORT}/0",
        "TICDC_SINK_REDIS_CLUSTER": "true",
        "TICDC_SINK_REDIS_PASSWORD_FILE": str(password_file("redis")),
        "TICDC_SINK_REDIS_SSL_CA": str(ca.ca),
        "TICDC_SINK_REDIS_SSL_CERT": str(ca.client_cert),
        "TICDC_SINK_REDIS_SSL_KEY": str(ca.client_key),
    }


def write_secure_cluster_env() -> Path:
    """``<state dir>/cluster-secure.env``: the Kafka cluster and the secured Redis Cluster."""
    path = state_dir() / CLUSTER_SECURE_ENV
    settings = {**kafka_cluster_env(), **secure_redis_cluster_env()}
    lines = ["# written by `ticdc-sink services up --cluster --secure`; the password in its file"]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in settings.items()]
    path.write_text("\n".join(lines) + "\n")
    return path
