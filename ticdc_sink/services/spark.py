"""A Spark standalone cluster on loopback: a master and two workers, run from PySpark's own jars.

Nothing is downloaded: the ``pyspark`` package carries Spark's jars and ``bin/spark-class``. A
worker builds its executors' command from ``SPARK_HOME``, which is that package's folder.
"""

from __future__ import annotations

import importlib.util
import json
import urllib.request
from pathlib import Path
from typing import Any

from config.errors import ServiceError
from ticdc_sink.services.base import Endpoint, LocalService, require_binary

MASTER_ENDPOINT = Endpoint("127.0.0.1", 7077)
# What the sink's TICDC_SINK_SPARK_MASTER names to run on this cluster.
MASTER_URL = f"spark://{MASTER_ENDPOINT}"
# The master's web page; its /json/ lists the workers that registered.
MASTER_WEB_PORT = 8080
WORKERS = 2
# Worker n listens on WORKER_PORT_BASE + n and shows its page on WORKER_WEB_PORT_BASE + n.
WORKER_PORT_BASE = 7077
# 8090, not the master's 8080: 8081 and 8082 are the schema registry's and its secured front's.
WORKER_WEB_PORT_BASE = 8090
# What each worker offers executors: one core of the machine's two, and one executor's default
# heap (spark.executor.memory is 1g unless the application asks for less).
WORKER_CORES = 1
WORKER_MEMORY = "1g"
# The master's and workers' own heaps (Spark's default is 1g each); they only keep bookkeeping.
DAEMON_MEMORY = "256m"
# A finished application's folder on a worker (its jars and logs) is deleted after this.
APP_DATA_TTL_S = 24 * 3600
_UTC_JAVA_OPTIONS = "-Duser.timezone=UTC"


def spark_home() -> Path:
    """The installed ``pyspark`` package's folder, which holds Spark's ``jars/`` and ``bin/``."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError("pyspark is not installed: pip install 'ticdc-sink[sink]'")
    return Path(next(iter(spec.submodule_search_locations)))


def master_status(web_port: int = MASTER_WEB_PORT) -> dict[str, Any]:
    """What the master's page says as JSON (workers, applications), or {} if it does not answer."""
    url = f"http://{MASTER_ENDPOINT.host}:{web_port}/json/"
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            document: dict[str, Any] = json.load(response)
    except (OSError, ValueError):
        return {}
    return document


def registered_workers(web_port: int = MASTER_WEB_PORT) -> list[str]:
    """The ``host:port`` of every ALIVE worker the master on ``web_port`` lists."""
    document = master_status(web_port)
    return [
        f"{worker['host']}:{worker['port']}"
        for worker in document.get("workers", [])
        if worker.get("state") == "ALIVE"
    ]


class _SparkDaemon(LocalService):
    """A Spark daemon run in the foreground by ``spark-class``, in UTC, with a small heap."""

    main_class: str
    start_option = "--spark-cluster"

    def install(self) -> None:
        require_binary("java", "openjdk-17-jre-headless", self.log_file)
        self.spark_home = spark_home()

    def arguments(self) -> list[str]:
        """The daemon's own command-line options."""
        return []

    def command(self) -> list[str]:
        return [str(self.spark_home / "bin" / "spark-class"), self.main_class, *self.arguments()]

    def environment(self) -> dict[str, str]:
        """What ``spark-class`` reads: where Spark is, the daemon's heap and Java options, and
        the daemon's folders, each of which Spark would otherwise put in /tmp."""
        return {
            **super().environment(),
            "SPARK_HOME": str(self.spark_home),
            # An empty folder of our own: no spark-env.sh or spark-defaults.conf from elsewhere.
            "SPARK_CONF_DIR": str(self.home / "conf"),
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            # The daemons' own logs; executors get their zone from the application (the sink).
            # No /tmp/hsperfdata_<user>/<pid> file (jps and jstat then do not see the daemon).
            "SPARK_DAEMON_JAVA_OPTS": (
                f"{_UTC_JAVA_OPTIONS} -Djava.io.tmpdir={self.tmp_dir} -XX:-UsePerfData"
            ),
            "SPARK_LOCAL_IP": self.endpoint.host,
            # A worker hands its local folders to its executors for their shuffle and blocks.
            "SPARK_LOCAL_DIRS": str(self.tmp_dir),
            # Read by Spark's own start scripts (spark-daemon.sh), should anything run them.
            "SPARK_PID_DIR": str(self.home),
            "SPARK_LOG_DIR": str(self.home),
        }

    def prepare(self) -> None:
        (self.home / "conf").mkdir(exist_ok=True)


class SparkMasterService(_SparkDaemon):
    name = "spark-master"
    endpoint = MASTER_ENDPOINT
    main_class = "org.apache.spark.deploy.master.Master"

    def arguments(self) -> list[str]:
        return [
            "--host", self.endpoint.host,
            "--port", str(self.endpoint.port),
            "--webui-port", str(MASTER_WEB_PORT),
        ]  # fmt: skip


class SparkWorkerService(_SparkDaemon):
    main_class = "org.apache.spark.deploy.worker.Worker"

    def __init__(self, number: int) -> None:
        self.number = number
        self.name = f"spark-worker-{number}"
        self.endpoint = Endpoint(MASTER_ENDPOINT.host, WORKER_PORT_BASE + number)

    def arguments(self) -> list[str]:
        return [
            "--host", self.endpoint.host,
            "--port", str(self.endpoint.port),
            "--webui-port", str(WORKER_WEB_PORT_BASE + self.number),
            "--cores", str(WORKER_CORES),
            "--memory", WORKER_MEMORY,
            "--work-dir", str(self.home / "work"),
            MASTER_URL,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        cleanup = (
            "-Dspark.worker.cleanup.enabled=true "
            f"-Dspark.worker.cleanup.appDataTtl={APP_DATA_TTL_S}"
        )
        return {**super().environment(), "SPARK_WORKER_OPTS": cleanup}

    def ready(self) -> bool:
        """Registered with the master: only then does it take executors."""
        return str(self.endpoint) in registered_workers()


def spark_cluster() -> list[LocalService]:
    """The master, then its workers: the order they start in."""
    return [SparkMasterService(), *(SparkWorkerService(n) for n in range(1, WORKERS + 1))]
