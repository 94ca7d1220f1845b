"""Apicurio Registry, a Confluent-API-compatible schema registry, from Maven Central.

Its runnable zip (``io.apicurio:apicurio-registry-app:<version>:zip:all``) is fetched with ``mvn``
into the state folder's Maven repository and unpacked once; the registry keeps its schemas in an
H2 database file in its state folder, so a registry killed and started again keeps its ids, as
a deployed one does (in memory it would hand out ids from 1 again, for other schemas, while
workers and their Redis cache still hold the old ones). Its Confluent API is under
``/apis/ccompat/v7``; after start, the global compatibility is set to BACKWARD, a Confluent
registry's default (Apicurio's is NONE).
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from importlib import resources
from pathlib import Path

from config.errors import ServiceError
from ticdc_sink.services.base import (
    Endpoint,
    LocalService,
    ServiceState,
    apt_install,
    port_open,
    run_logged,
    state_dir,
)

# The Confluent API's base, below the registry's root.
CCOMPAT_PATH = "/apis/ccompat/v7"
# Confluent's default compatibility, which TiCDC's schema evolution is written for.
COMPATIBILITY = "BACKWARD"
# Enough for a test registry's in-memory schemas; a JVM would otherwise take a quarter of RAM.
HEAP = "-Xmx256m"
VERSION = "2.6.13.Final"
# The zip's application, run with `java -jar`.
RUNNER = f"apicurio-registry-app-{VERSION}-runner.jar"
_HTTP_TIMEOUT_S = 2.0


class RegistryService(LocalService):
    name = "registry"
    endpoint = Endpoint("127.0.0.1", 8081)
    start_option = "--registry"

    @property
    def url(self) -> str:
        """The Confluent API's base URL: what ``TICDC_SINK_SCHEMA_REGISTRY`` names."""
        return f"http://{self.endpoint}{CCOMPAT_PATH}"

    @property
    def app(self) -> Path:
        """The unpacked zip, one folder per version."""
        return self.home / f"apicurio-{VERSION}"

    def install(self) -> None:
        if not shutil.which("java"):
            apt_install("openjdk-17-jre-headless", log=self.log_file)
        if (self.app / ".complete").exists():
            return
        if not shutil.which("mvn"):
            apt_install("maven", log=self.log_file)
        self.home.mkdir(parents=True, exist_ok=True)
        pom = self.home / "pom.xml"
        template = resources.files(__package__).joinpath("registry-pom.xml").read_text()
        pom.write_text(template.format(version=VERSION))
        run_logged(
            "fetching Apicurio Registry with mvn",
            [
                "mvn", "-q", "-B", "-f", str(pom),
                f"-Dmaven.repo.local={state_dir() / 'm2'}",
                "dependency:unpack-dependencies",
                f"-DoutputDirectory={self.app}",
            ],
            self.log_file,
        )  # fmt: skip
        (self.app / ".complete").touch()

    def command(self) -> list[str]:
        return [
            "java",
            HEAP,
            # The client compiler only: a test registry starts in about half the time (and
            # smaller), and serves a test's few requests as fast.
            "-XX:TieredStopAtLevel=1",
            "-Duser.timezone=UTC",
            f"-Djava.io.tmpdir={self.tmp_dir}",
            # No /tmp/hsperfdata_<user>/<pid> file (jps and jstat then do not see the registry).
            "-XX:-UsePerfData",
            f"-Dquarkus.http.host={self.endpoint.host}",
            f"-Dquarkus.http.port={self.endpoint.port}",
            # A file, whatever REGISTRY_DATASOURCE_URL the environment holds: ids survive a
            # restart (the zip's H2 driver takes a file URL as well as its default mem:).
            f"-Dquarkus.datasource.jdbc.url=jdbc:h2:file:{self.home / 'data' / 'registry_db'}",
            "-jar",
            str(self.app / RUNNER),
        ]

    def answers(self) -> bool:
        """The Confluent API answers (the port opens a few seconds before it does)."""
        if not port_open(self.endpoint.host, self.endpoint.port):
            return False
        try:
            with urllib.request.urlopen(f"{self.url}/config", timeout=_HTTP_TIMEOUT_S) as answer:
                return "compatibilityLevel" in json.load(answer)
        except (OSError, ValueError):
            return False

    def up(self) -> ServiceState:
        state = super().up()
        self._set_compatibility()
        return state

    def _set_compatibility(self) -> None:
        """BACKWARD, through the Confluent API's ``PUT /config`` (idempotent)."""
        body = json.dumps({"compatibility": COMPATIBILITY}).encode()
        call = urllib.request.Request(
            f"{self.url}/config",
            data=body,
            method="PUT",
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        )
        try:
            with urllib.request.urlopen(call, timeout=_HTTP_TIMEOUT_S) as answer:
                answer.read()
        except (OSError, ValueError) as exc:
            raise ServiceError(
                f"{self.name} on {self.endpoint}: setting {COMPATIBILITY} compatibility failed "
                f"({exc}); its log: {self.log_file}"
            ) from None
