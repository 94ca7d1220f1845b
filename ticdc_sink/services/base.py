"""What every local service shares: a state folder, a pid file, a port probe, start and stop."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from config.errors import ServiceError

# Where services keep data, pid files and logs: one git-ignored folder of the checkout.
STATE_DIR_ENV = "TICDC_SINK_STATE_DIR"
DEFAULT_STATE_DIR = ".ticdc-sink"
# How long a service may take to answer after start (Kafka's JVM is the slow one).
START_TIMEOUT_S = 120.0
# How long `down` waits after SIGTERM before SIGKILL.
STOP_TIMEOUT_S = 30.0

_apt_updated = False


def state_dir() -> Path:
    """The folder holding every service's data, pid file and log."""
    return Path(os.environ.get(STATE_DIR_ENV, DEFAULT_STATE_DIR)).resolve()


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def apt_install(*packages: str) -> None:
    """Install Debian packages (root only), running ``apt-get update`` once per process."""
    global _apt_updated
    if os.geteuid() != 0:
        raise ServiceError(f"need root to run: apt-get install -y {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not _apt_updated:
        run_checked(["apt-get", "update", "-qq"], env=env)
        _apt_updated = True
    run_checked(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], env=env)


def run_checked(cmd: list[str], **kwargs: object) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        tail = (result.stderr or result.stdout or "").strip().splitlines()[-15:]
        raise ServiceError(f"{' '.join(cmd)} failed ({result.returncode}):\n" + "\n".join(tail))


class ServiceState(StrEnum):
    """How `status` finds a service."""

    OURS = "running (started by ticdc-sink)"
    FOREIGN = "answering (not started by ticdc-sink; reused)"
    STOPPED = "stopped"


@dataclass(frozen=True)
class Endpoint:
    """Where a service listens."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class LocalService(ABC):
    """A server the project installs and runs on loopback, tracked by a pid file."""

    name: str
    endpoint: Endpoint

    @property
    def home(self) -> Path:
        return state_dir() / self.name

    @property
    def pid_file(self) -> Path:
        return self.home / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.home / f"{self.name}.log"

    @abstractmethod
    def install(self) -> None:
        """Install whatever is missing; a no-op when all is there."""

    @abstractmethod
    def command(self) -> list[str]:
        """The foreground command that runs the server (after :meth:`prepare`)."""

    def environment(self) -> dict[str, str]:
        """Variables the server's process gets on top of this process's environment."""
        return {}

    def prepare(self) -> None:
        """One-time set-up of the data folder before the first start."""

    def answers(self) -> bool:
        """Whether the service answers on its endpoint."""
        return port_open(self.endpoint.host, self.endpoint.port)

    def our_pid(self) -> int | None:
        """The pid we started, if that process is still alive."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        return pid

    def state(self) -> ServiceState:
        if self.our_pid() is not None and self.answers():
            return ServiceState.OURS
        if self.answers():
            return ServiceState.FOREIGN
        return ServiceState.STOPPED

    def ready(self) -> bool:
        """Whether a service that answers takes work yet (Redis loading its data answers, but
        refuses every command until it is loaded)."""
        return True

    def up(self) -> ServiceState:
        """Start the service unless it already answers; wait until it answers and is ready."""
        if self.answers():
            self._wait_ready(time.monotonic() + START_TIMEOUT_S)
            return self.state()
        self.install()
        self.home.mkdir(parents=True, exist_ok=True)
        self.prepare()
        with self.log_file.open("ab") as log:
            process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.home,
                env={**os.environ, **self.environment()},
            )
        self.pid_file.write_text(str(process.pid))
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.answers():
            if process.poll() is not None:
                raise ServiceError(
                    f"{self.name} exited with {process.returncode} at start; "
                    f"last log lines:\n{self._log_tail()}"
                )
            if time.monotonic() > deadline:
                raise ServiceError(f"{self.name} did not answer on {self.endpoint} in time")
            time.sleep(0.25)
        self._wait_ready(deadline)
        return ServiceState.OURS

    def _wait_ready(self, deadline: float) -> None:
        while not self.ready():
            if time.monotonic() > deadline:
                raise ServiceError(f"{self.name} on {self.endpoint} answers but is not ready")
            time.sleep(0.25)

    def down(self) -> bool:
        """Stop the process we started (never a foreign one); True if one was stopped."""
        pid = self.our_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while self._alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if self._alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        return True

    @staticmethod
    def _alive(pid: int) -> bool:
        # Reaps nothing: the server is not our child once the CLI that started it has exited.
        return not _gone(pid)

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def require_binary(binary: str, package: str) -> str:
    """The path of ``binary``, installing Debian's ``package`` first if it is missing."""
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if found:
        return found
    apt_install(package)
    found = shutil.which(binary, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if not found:
        raise ServiceError(f"installed {package} but {binary} is still missing")
    return found
