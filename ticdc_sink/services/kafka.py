"""Apache Kafka in KRaft single-node mode, its jars resolved from Maven Central with ``mvn``."""

from __future__ import annotations

import base64
import shutil
import socket
import ssl
import struct
import uuid
from importlib import resources
from pathlib import Path

from config.errors import ServiceError
from ticdc_sink.services.base import (
    Endpoint,
    LocalService,
    apt_install,
    port_open,
    run_logged,
    state_dir,
)

CONTROLLER_PORT = 9093
# Enough heap for a test broker; Kafka's own scripts default to 1G.
HEAP = "-Xmx1g"
# The Kafka API key of ApiVersions: the cheapest request every broker answers.
_API_VERSIONS = 18


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64 without padding, as Kafka makes them.

    Like Kafka's ``Uuid.randomUuid`` it never starts with "-": the storage tool's argument parser
    would read such an id as an option and refuse to format (one start in 64 failed that way).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaService(LocalService):
    name = "kafka"
    endpoint = Endpoint("127.0.0.1", 9092)
    controller_port = CONTROLLER_PORT
    heap = HEAP
    # The broker's configuration, formatted with template_values().
    template = "kafka-server.properties"

    def template_values(self) -> dict[str, object]:
        return {
            "host": self.endpoint.host,
            "port": self.endpoint.port,
            "controller_port": self.controller_port,
            "data": self.home / "data",
        }

    def cluster_id(self) -> str:
        """The KRaft cluster id its storage is formatted with (every node of a cluster shares
        one)."""
        return new_cluster_id()

    def format_arguments(self) -> list[str]:
        """Extra arguments of StorageTool's ``format`` (SCRAM users, say)."""
        return []

    def client_context(self) -> ssl.SSLContext | None:
        """The TLS context that probes a TLS listener (None: plaintext)."""
        return None

    @property
    def lib(self) -> Path:
        return self.home / "lib"

    def install(self) -> None:
        if not shutil.which("java"):
            apt_install("openjdk-17-jre-headless", log=self.log_file)
        if (self.lib / ".complete").exists():
            return
        if not shutil.which("mvn"):
            apt_install("maven", log=self.log_file)
        self.home.mkdir(parents=True, exist_ok=True)
        pom = self.home / "pom.xml"
        pom.write_text(resources.files(__package__).joinpath("kafka-pom.xml").read_text())
        run_logged(
            "fetching Kafka's jars with mvn",
            [
                "mvn", "-q", "-B", "-f", str(pom),
                f"-Dmaven.repo.local={state_dir() / 'm2'}",
                "dependency:copy-dependencies",
                f"-DoutputDirectory={self.lib}",
                "-Dmdep.includeScope=runtime",
            ],
            self.log_file,
        )  # fmt: skip
        (self.lib / ".complete").touch()

    def prepare(self) -> None:
        config = self.home / "server.properties"
        template = resources.files(__package__).joinpath(self.template).read_text()
        config.write_text(template.format(**self.template_values()))
        # It may hold the broker's own SASL password.
        config.chmod(0o600)
        log4j = self.home / "log4j2.properties"
        log4j.write_text(
            resources.files(__package__).joinpath("kafka-log4j2.properties").read_text()
        )
        if (self.home / "data" / "meta.properties").exists():
            return
        cluster_id = self.cluster_id()
        run_logged(
            "formatting Kafka's storage",
            [
                *self._java(),
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(config),
                *self.format_arguments(),
            ],
            self.log_file,
        )

    def _java(self) -> list[str]:
        return [
            "java",
            self.heap,
            "-Duser.timezone=UTC",
            f"-Djava.io.tmpdir={self.tmp_dir}",
            # No /tmp/hsperfdata_<user>/<pid> file (jps and jstat then do not see the broker).
            "-XX:-UsePerfData",
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.home}",
            "-cp",
            f"{self.lib}/*",
        ]

    def command(self) -> list[str]:
        return [*self._java(), "kafka.Kafka", str(self.home / "server.properties")]

    def answers(self) -> bool:
        if not port_open(self.endpoint.host, self.endpoint.port):
            return False
        try:
            return _api_versions_ok(self.endpoint, self.client_context())
        except (OSError, ServiceError):
            return False


def _api_versions_ok(endpoint: Endpoint, context: ssl.SSLContext | None = None) -> bool:
    """Send ApiVersions v0 (over TLS with ``context``; SASL allows it before logging in) and
    check that the broker answers without an error code."""
    client = b"ticdc-sink"
    body = struct.pack(">hhih", _API_VERSIONS, 0, 7, len(client)) + client
    with socket.create_connection((endpoint.host, endpoint.port), timeout=2) as raw:
        sock = context.wrap_socket(raw, server_hostname=endpoint.host) if context else raw
        sock.sendall(struct.pack(">i", len(body)) + body)
        header = _recv_exact(sock, 4)
        (size,) = struct.unpack(">i", header)
        reply = _recv_exact(sock, size)
    correlation, error = struct.unpack(">ih", reply[:6])
    return bool(correlation == 7 and error == 0)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ServiceError("broker closed the connection")
        chunks += chunk
    return bytes(chunks)
