"""TiDB as a downstream: ``tidb-server`` on its embedded unistore storage, built from TiDB's Go
module by the Go toolchain once per machine.

The Go module beside this file (``tidb/go.mod``) pins TiDB and the Go toolchain it builds with;
the binary is cached in the state folder as ``tidb/bin/tidb-server-<version>``, and Go's own module
and build caches (``~/go``, ``~/.cache/go-build``) make a build in a fresh checkout fast.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from config.errors import ServiceError
from ticdc_sink.services.base import Endpoint, LocalService, make_private_folder, socket_path

TIDB_MODULE = "github.com/pingcap/tidb"
# The Go module that pins TiDB's version and toolchain, and whose `tool` line names the server.
GO_MODULE_DIR = Path(__file__).with_name("tidb")
SERVER_PACKAGE = f"{TIDB_MODULE}/cmd/tidb-server"
# TiDB's own build tags (its Makefile's BUILD_TAGS): `codes` keeps the error code registry.
BUILD_TAGS = "codes"
# Go < 1.21 cannot fetch the toolchain that go.mod names (Debian 12's golang-go is 1.19).
MIN_GO = (1, 21)
# Where Go stands when it is installed from go.dev's tarball rather than on PATH.
GO_FALLBACK = "/usr/local/go/bin/go"
# TiDB's HTTP status port (its default); the SQL port is the endpoint.
STATUS_PORT = 10080
# Said while a first build runs, so that it is not taken for a hang (its measured time:
# docs/architecture.md, TiDB).
COLD_BUILD_HINT = "15-30 min the first time on 2 cores"

_REQUIRE = re.compile(r"^\s*(?:require\s+)?(\S+)\s+(v\S+)(?:\s*//.*)?$")
_PSEUDO_COMMIT = re.compile(r"-([0-9a-f]{12})$")


def required_version(go_mod: str, module: str) -> str:
    """The version of ``module`` that go.mod's ``require`` lines name."""
    in_block = False
    for line in go_mod.splitlines():
        stripped = line.strip()
        if stripped.startswith("require ("):
            in_block = True
            continue
        if in_block and stripped == ")":
            in_block = False
            continue
        if in_block or stripped.startswith("require "):
            found = _REQUIRE.match(stripped)
            if found and found.group(1) == module:
                return found.group(2)
    raise ServiceError(f"{GO_MODULE_DIR / 'go.mod'} requires no version of {module}")


def toolchain(go_mod: str) -> str:
    """The ``toolchain`` line of go.mod (``go1.25.14``): TiDB refuses to run when built with
    another minor version of Go than the one it supports."""
    for line in go_mod.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "toolchain":
            return words[1]
    raise ServiceError(f"{GO_MODULE_DIR / 'go.mod'} has no toolchain line")


def version_flags(version: str) -> list[str]:
    """Linker flags that name the TiDB commit a pseudo-version was built from in
    ``tidb_version()`` (TiDB's Makefile sets them from git, which a module download lacks)."""
    found = _PSEUDO_COMMIT.search(version)
    if found is None:
        return []
    return ["-ldflags", f"-X {TIDB_MODULE}/pkg/util/versioninfo.TiDBGitHash={found.group(1)}"]


def go_version(text: str) -> tuple[int, int]:
    """``(1, 26)`` from ``go env GOVERSION``'s ``go1.26.8``."""
    found = re.match(r"go(\d+)\.(\d+)", text.strip())
    if found is None:
        raise ServiceError(f"cannot read a Go version from {text.strip()!r}")
    return int(found.group(1)), int(found.group(2))


def find_go() -> str:
    """A ``go`` command new enough to fetch the toolchain go.mod names."""
    go = shutil.which("go") or (GO_FALLBACK if os.access(GO_FALLBACK, os.X_OK) else None)
    wanted = ".".join(map(str, MIN_GO))
    if go is None:
        raise ServiceError(
            f"TiDB is built with Go: install Go >= {wanted} (https://go.dev/dl) on PATH or in "
            "/usr/local/go; Debian's golang-go 1.19 is too old to fetch Go 1.25"
        )
    found = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    if go_version(found.stdout or "go0.0") < MIN_GO:
        raise ServiceError(f"{go} is {found.stdout.strip()}; TiDB's build needs Go >= {wanted}")
    return go


class TiDBService(LocalService):
    name = "tidb"
    endpoint = Endpoint("127.0.0.1", 4000)
    start_option = "--tidb"

    def __init__(self) -> None:
        go_mod = (GO_MODULE_DIR / "go.mod").read_text()
        self.version = required_version(go_mod, TIDB_MODULE)
        self.toolchain = toolchain(go_mod)

    @property
    def binary(self) -> Path:
        return self.home / "bin" / f"tidb-server-{self.version}"

    @property
    def build_log(self) -> Path:
        return self.home / "build.log"

    @property
    def socket(self) -> Path:
        """TiDB's unix socket (its default, /tmp/tidb-<port>.sock, is one per machine)."""
        return socket_path(self.home, "tidb.sock")

    def install(self) -> None:
        if self.binary.exists():
            return
        go = find_go()
        self.binary.parent.mkdir(parents=True, exist_ok=True)
        partial = self.binary.with_name(self.binary.name + ".partial")
        print(
            f"building tidb-server {self.version} with {self.toolchain} ({COLD_BUILD_HINT}); "
            f"log: {self.build_log}",
            file=sys.stderr,
            flush=True,
        )
        # The toolchain from go.mod, fetched by the go command: a machine's newer Go (or
        # go.env's GOTOOLCHAIN=local) would otherwise build a TiDB that refuses to start.
        env = {**os.environ, "GOTOOLCHAIN": self.toolchain, "CGO_ENABLED": "1"}
        # Go's work folders, which it deletes after the build; its caches stay shared in ~.
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        env["GOTMPDIR"] = str(self.tmp_dir)
        command = [
            go, "build", "-mod=readonly", "-tags", BUILD_TAGS, *version_flags(self.version),
            "-o", str(partial), SERVER_PACKAGE,
        ]  # fmt: skip
        started = time.monotonic()
        with self.build_log.open("w") as log:
            log.write(" ".join(command) + "\n")
            log.flush()
            done = subprocess.run(
                command, cwd=GO_MODULE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        if done.returncode != 0:
            raise ServiceError(
                f"building tidb-server {self.version} failed (exit {done.returncode}); "
                f"its log: {self.build_log}"
            )
        partial.replace(self.binary)
        print(f"built {self.binary} in {time.monotonic() - started:.0f} s", file=sys.stderr)

    def prepare(self) -> None:
        (self.home / "data").mkdir(parents=True, exist_ok=True)
        make_private_folder(self.socket.parent)

    def command(self) -> list[str]:
        return [
            str(self.binary),
            "--store=unistore",
            f"--path={self.home / 'data'}",
            f"--host={self.endpoint.host}",
            f"-P={self.endpoint.port}",
            f"--status={STATUS_PORT}",
            f"--status-host={self.endpoint.host}",
            f"--temp-dir={self.tmp_dir}",
            f"--socket={self.socket}",
            f"--log-slow-query={self.home / 'slow.log'}",
        ]
