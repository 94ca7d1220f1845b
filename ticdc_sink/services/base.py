"""What every local service shares: a state folder, a pid file, a port probe, start and stop."""

from __future__ import annotations

import contextlib
import hashlib
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
# The longest path a unix socket can have on Linux (sun_path holds 108 bytes with the final NUL).
MAX_SOCKET_PATH = 107
# Where a socket goes when the state folder is too deep for one (see socket_path).
SHORT_SOCKET_ROOT = Path("/tmp")

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


def socket_path(home: Path, name: str) -> Path:
    """Where a service's unix socket goes: ``home/name``, unless that path is too long for a
    socket; then a folder in /tmp named by a hash of ``home``."""
    wanted = home / name
    if len(os.fsencode(wanted)) <= MAX_SOCKET_PATH:
        return wanted
    # The kernel refuses a longer path, and a shorter name inside the state folder saves a few
    # bytes at most: in a deep checkout the socket alone leaves it, for a folder that is the same
    # on every start from one state folder and differs between checkouts.
    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:16]
    return SHORT_SOCKET_ROOT / f"ticdc-sink-{digest}" / name


def make_private_folder(folder: Path) -> None:
    """``folder``, made if missing, which must be this user's (a socket folder in /tmp could
    have been made by someone else first)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_uid != os.geteuid():
        raise ServiceError(f"{folder} belongs to another user; remove it or move the state folder")


def apt_install(*packages: str, log: Path) -> None:
    """Install Debian packages (root only), running ``apt-get update`` once per process; apt's
    output goes to ``log``."""
    global _apt_updated
    if os.geteuid() != 0:
        raise ServiceError(f"need root to run: apt-get install -y {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not _apt_updated:
        run_logged("apt-get update", ["apt-get", "update", "-qq"], log, env=env)
        _apt_updated = True
    command = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]
    run_logged(f"apt-get install {' '.join(packages)}", command, log, env=env)


def run_logged(what: str, command: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    """Run ``command`` to its end, its output appended to ``log``; a failure is one line that
    says ``what`` failed and where its output is."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"$ {' '.join(command)}\n".encode())
        out.flush()
        try:
            result = subprocess.run(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        except OSError as exc:
            raise ServiceError(f"{what}: {exc.strerror}: {command[0]}") from None
    if result.returncode != 0:
        raise ServiceError(f"{what} failed (exit {result.returncode}); its output: {log}")


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
    # The `services up` option that starts this service ("" when `services up` always does).
    start_option = ""

    @property
    def home(self) -> Path:
        return state_dir() / self.name

    @property
    def tmp_dir(self) -> Path:
        """The server's temporary files (its TMPDIR), which would otherwise go to /tmp."""
        return self.home / "tmp"

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
        return {"TMPDIR": str(self.tmp_dir)}

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
        """Start the service unless it already answers; wait until it answers and is ready.
        Whatever fails is one line naming the service and where to read more."""
        return self.finish_up(self.launch())

    def launch(self) -> subprocess.Popen[bytes] | None:
        """Start the service's process unless it already answers (None then), without waiting
        for it: nodes of a cluster answer only once enough of them run."""
        if self.answers():
            return None
        try:
            self.install()
            self.home.mkdir(parents=True, exist_ok=True)
            self.tmp_dir.mkdir(exist_ok=True)
            self.prepare()
            return self._start()
        except (ServiceError, OSError) as exc:
            raise ServiceError(f"{self.name} did not start: {_reason(exc)}") from None

    def finish_up(self, process: subprocess.Popen[bytes] | None) -> ServiceState:
        """Wait until what :meth:`launch` started (``process``; None: it answered already)
        answers and is ready."""
        if process is None:
            self._wait_ready(time.monotonic() + START_TIMEOUT_S)
            return self.state()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.answers():
            if process.poll() is not None:
                raise ServiceError(
                    f"{self.name} exited with {process.returncode} at start; its log: "
                    f"{self.log_file}"
                )
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"{self.name} did not answer on {self.endpoint} in {START_TIMEOUT_S:.0f} s; "
                    f"its log: {self.log_file}"
                )
            time.sleep(0.25)
        self._wait_ready(deadline)
        return ServiceState.OURS

    def _start(self) -> subprocess.Popen[bytes]:
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
        return process

    def _wait_ready(self, deadline: float) -> None:
        while not self.ready():
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"{self.name} on {self.endpoint} answers but is not ready; its log: "
                    f"{self.log_file}"
                )
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


def _reason(error: ServiceError | OSError) -> str:
    """What went wrong, in one line: an OSError names its file (``[Errno 13] ...`` says less)."""
    if isinstance(error, OSError) and error.strerror:
        where = f": {error.filename}" if error.filename else ""
        return f"{error.strerror}{where}"
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def require_binary(binary: str, package: str, log: Path) -> str:
    """The path of ``binary``, installing Debian's ``package`` first if it is missing."""
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if found:
        return found
    apt_install(package, log=log)
    found = shutil.which(binary, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if not found:
        raise ServiceError(f"installed {package} but {binary} is still missing")
    return found
