"""Which services `services up|down|status` act on, where each keeps its files, and how a
service that does not come up is reported."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from config.errors import ServiceError
from ticdc_sink.cli import main
from ticdc_sink.services import manager
from ticdc_sink.services.base import (
    MAX_SOCKET_PATH,
    Endpoint,
    LocalService,
    ServiceState,
    run_logged,
    socket_path,
)
from ticdc_sink.services.kafka import KafkaService
from ticdc_sink.services.manager import all_services, services_down, state_text
from ticdc_sink.services.spark import _SparkDaemon
from ticdc_sink.services.tidb_server import TiDBService

# What each service must be told, or it picks a folder of its own outside the state folder
# (TiDB's socket is /tmp/tidb-4000.sock, MariaDB's tmpdir /tmp, a JVM's tmpdir and perf data /tmp).
NAMED = {
    "tidb": ["--socket=", "--temp-dir=", "--path="],
    "mariadb": ["--socket=", "--tmpdir=", "--pid-file=", "--datadir="],
    "mariadb-secure": ["--socket=", "--tmpdir=", "--pid-file=", "--datadir="],
    "kafka": ["-Djava.io.tmpdir=", "-XX:-UsePerfData", "-Dkafka.logs.dir="],
    "kafka-secure": ["-Djava.io.tmpdir=", "-XX:-UsePerfData", "-Dkafka.logs.dir="],
    "redis": ["--dir"],
    "redis-secure": ["--dir"],
    "registry": ["-Djava.io.tmpdir=", "-XX:-UsePerfData"],
}
SPARK_FOLDERS = ["SPARK_LOCAL_DIRS", "SPARK_PID_DIR", "SPARK_LOG_DIR", "SPARK_CONF_DIR"]


def named_paths(words: list[str]) -> list[Path]:
    """Every absolute path among ``words``: a word, or the value of ``--name=value`` or
    ``-Dname=value``, each word split at spaces (a variable holding several Java options)."""
    found = []
    for word in words:
        for token in word.split():
            value = token.rsplit("=", 1)[-1]
            if value.startswith("/"):
                found.append(Path(value))
    return found


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TICDC_SINK_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def installed(service: LocalService) -> LocalService:
    """``service`` with what ``install`` would find on a machine (system binaries, pyspark)."""
    if isinstance(service, _SparkDaemon):
        service.spark_home = Path("/opt/pyspark")
    elif not isinstance(service, TiDBService):  # TiDB's is its build, in the state folder
        service.binary = f"/usr/sbin/{service.name}"  # type: ignore[attr-defined]
    return service


def test_plain_up_leaves_tidb_out_and_the_option_brings_it() -> None:
    assert "tidb" not in {service.name for service in all_services()}
    assert "tidb" not in {service.name for service in all_services(secure=True, spark=True)}
    with_tidb = [service.name for service in all_services(tidb=True)]
    assert with_tidb == ["redis", "mariadb", "kafka", "tidb"]
    assert "tidb" in {service.name for service in all_services(secure=True, tidb=True)}


def test_no_two_services_listen_on_one_port() -> None:
    from ticdc_sink.services.spark import MASTER_WEB_PORT, WORKER_WEB_PORT_BASE, WORKERS
    from ticdc_sink.services.tidb_server import STATUS_PORT

    services = all_services(secure=True, spark=True, tidb=True, registry=True)
    ports = [service.endpoint.port for service in services] + [MASTER_WEB_PORT, STATUS_PORT]
    ports += [WORKER_WEB_PORT_BASE + n for n in range(1, WORKERS + 1)]
    ports += [s.controller_port for s in services if isinstance(s, KafkaService)]
    assert len(ports) == len(set(ports)), sorted(ports)


def test_down_stops_every_service_tidb_included(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def down(service: LocalService) -> bool:
        asked.append(service.name)
        return False

    monkeypatch.setattr(LocalService, "down", down)
    services_down()
    assert {"tidb", "kafka-secure", "spark-master", "registry", "redis"} <= set(asked)
    assert asked[-1] == "redis"


def test_status_shows_tidb_as_not_started_with_the_command_that_starts_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(LocalService, "state", lambda _service: ServiceState.STOPPED)
    shown = {
        service.name: state_text(service, state) for service, state in manager.services_status()
    }
    assert shown["tidb"] == "not started (ticdc-sink services up --tidb starts it)"
    assert shown["spark-master"] == "not started (ticdc-sink services up --spark-cluster starts it)"
    assert shown["registry"] == "not started (ticdc-sink services up --registry starts it)"
    assert shown["redis"] == "stopped"
    assert state_text(TiDBService(), ServiceState.OURS) == str(ServiceState.OURS)


def test_every_path_a_service_is_given_is_in_the_state_folder(state: Path) -> None:
    for service in map(installed, all_services(secure=True, spark=True, tidb=True, registry=True)):
        command, environment = service.command(), service.environment()
        words = command[1:] + [v for k, v in environment.items() if k != "SPARK_HOME"]
        if isinstance(service, KafkaService):
            words += [str(value) for value in service.template_values().values()]
        paths = named_paths(words)
        assert paths, service.name
        outside = [path for path in paths if not path.is_relative_to(state)]
        assert not outside, (service.name, outside)
        assert environment["TMPDIR"] == str(state / service.name / "tmp"), service.name
        for option in NAMED.get(service.name, []):
            assert any(word.startswith(option) for word in command), (service.name, option)
        if isinstance(service, _SparkDaemon):
            assert all(name in environment for name in SPARK_FOLDERS), service.name
            assert "-XX:-UsePerfData" in environment["SPARK_DAEMON_JAVA_OPTS"]


def test_a_socket_stays_in_the_service_folder_unless_the_path_is_too_long(tmp_path: Path) -> None:
    assert socket_path(tmp_path, "tidb.sock") == tmp_path / "tidb.sock"
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    other = tmp_path / ("d" * 60) / ("f" * 60)
    moved = socket_path(deep, "tidb.sock")
    assert len(os.fsencode(moved)) <= MAX_SOCKET_PATH
    assert moved.name == "tidb.sock"
    # The same folder on every start of one checkout, another for another checkout.
    assert moved == socket_path(deep, "tidb.sock")
    assert moved.parent != socket_path(other, "tidb.sock").parent


class _Fake(LocalService):
    """A service that runs ``command`` and listens nowhere (a port nothing answers on)."""

    name = "fake"

    def __init__(self, command: list[str], port: int) -> None:
        self.argv = command
        self.endpoint = Endpoint("127.0.0.1", port)

    def install(self) -> None:
        pass

    def command(self) -> list[str]:
        return self.argv


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_a_service_that_exits_at_start_is_one_line_naming_it_and_its_log(state: Path) -> None:
    script = "import sys; print('line one\\nline two'); sys.exit(3)"
    fake = _Fake([sys.executable, "-c", script], _free_port())
    with pytest.raises(ServiceError) as raised:
        fake.up()
    message = str(raised.value)
    assert message == f"fake exited with 3 at start; its log: {state / 'fake' / 'fake.log'}"
    assert "line two" in (state / "fake" / "fake.log").read_text()


def test_a_failed_set_up_step_names_the_service_and_where_its_output_went(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _Fake(["true"], _free_port())

    def prepare() -> None:
        run_logged(
            "making the data folder", ["sh", "-c", "echo no space >&2; exit 4"], fake.log_file
        )

    monkeypatch.setattr(fake, "prepare", prepare)
    with pytest.raises(ServiceError) as raised:
        fake.up()
    log = state / "fake" / "fake.log"
    assert str(raised.value) == (
        f"fake did not start: making the data folder failed (exit 4); its output: {log}"
    )
    assert "no space" in log.read_text()


def test_services_up_exits_1_with_one_line_and_0_when_all_is_up(
    state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = _Fake([sys.executable, "-c", "raise SystemExit(5)"], _free_port())
    monkeypatch.setattr(manager, "all_services", lambda *_flags: [broken])
    assert main(["services", "up"]) == 1
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        f"ticdc-sink services: fake exited with 5 at start; its log: {broken.log_file}"
    ]
    with socket.create_server(("127.0.0.1", 0)) as listener:
        running = _Fake(["true"], listener.getsockname()[1])
        monkeypatch.setattr(manager, "all_services", lambda *_flags: [running])
        assert main(["services", "up"]) == 0
    out, err = capsys.readouterr()
    assert out.split() == ["fake", str(running.endpoint), *str(ServiceState.FOREIGN).split()]
    assert err == ""
