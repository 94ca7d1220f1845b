"""The package as users get it: `make dist`'s files installed into a fresh virtualenv in a folder
of its own, no source tree beside it, and a pipeline run by the installed commands from there
(README, Install)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from config.settings import Settings
from tests.conftest import CHECKOUT, IN_CI
from tests.test_dist import PACKAGES, SHARED_FILES, package_data, project_version
from tests.ticdc_sink.pipelines import (
    TOPIC_PARTITIONS,
    applied_resolved_ts,
    pipeline_env,
    process_logs,
    spawn,
    stop,
    wait_for,
)
from ticdc_sink.produce import run_produce

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Installed:
    """A virtualenv the built files were installed into, and a folder outside the checkout to
    run its commands from."""

    venv: Path
    cwd: Path
    native: bool

    @property
    def command(self) -> Path:
        return self.venv / "bin" / "ticdc-sink"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


def _env() -> dict[str, str]:
    """This process's environment, without what would lead the venv's Python to the checkout."""
    return {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}


def _run(args: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(arg) for arg in args], cwd=cwd, env=env or _env(), capture_output=True, text=True
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """`make dist` into a folder of its own, then ``pip install --find-links`` of what it built
    into a new virtualenv (its downloads from pip's cache), as the README's Install says."""
    started = time.monotonic()
    dist = tmp_path_factory.mktemp("dist")
    bin_dir = Path(sys.executable).parent
    # The virtualenv this test runs in is made already: make must not make it again.
    _run(
        ["make", "-s", "-C", CHECKOUT, "--assume-old=.venv/.installed", "dist",
         f"DIST={dist}", f"BIN={bin_dir}"],
        cwd=CHECKOUT,
    )  # fmt: skip
    native = any(dist.glob("ticdc_sink_native-*-abi3-*.whl"))
    if not native and IN_CI:
        pytest.fail("make dist built no native wheel (is cargo on PATH?)", pytrace=False)
    home = tmp_path_factory.mktemp("user")
    venv = home / "venv"
    # No pip in the new virtualenv: this one's pip installs into it (--python), which saves
    # the seconds of ensurepip.
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=home)
    extras = "worker,sink,native" if native else "worker,sink"
    _run(
        [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q",
         "--find-links", dist, f"ticdc-sink[{extras}]"],
        cwd=home,
    )  # fmt: skip
    print(f"make dist and the install took {time.monotonic() - started:.1f} s")
    return Installed(venv, home, native)


def test_the_installed_files_are_the_ones_imported(installed: Installed) -> None:
    imported = _run(
        [installed.python, "-c",
         "import faust, pyspark, sqlglot, ticdc_sink, core.native as n; "
         "print(ticdc_sink.__file__); print(n.native_module() is not None)"],
        cwd=installed.cwd,
    ).split()  # fmt: skip
    site = installed.venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert Path(imported[0]).is_relative_to(site / "site-packages"), imported[0]
    assert imported[1] == str(installed.native), "the native wheel was not taken"
    packages = site / "site-packages"
    lost = [name for name in package_data() if not (packages / name).is_file()]
    assert not lost, f"not installed: {lost}"
    assert {path.name for path in packages.iterdir()} >= set(PACKAGES)
    shared = installed.venv / "share" / "ticdc-sink"
    assert [name for name in SHARED_FILES if not (shared / name).is_file()] == []


def test_version_and_settings(installed: Installed) -> None:
    out = _run([installed.command, "--version"], cwd=installed.cwd)
    assert out.strip() == f"ticdc-sink {project_version()}"
    described = _run([installed.command, "config", "describe"], cwd=installed.cwd)
    assert "TICDC_SINK_GROUP" in described


def test_worker_and_sink_replicate(installed: Installed, pipeline: Settings, unique: str) -> None:
    expected = installed.cwd / f"{unique}.expected.json"
    _, final = run_produce(
        pipeline, unique, "open", TOPIC_PARTITIONS, 40, seed=43, expected=expected,
        duplicates=0.05, schema=unique,
    )  # fmt: skip
    env = pipeline_env(pipeline, "open")
    env.pop("PYTHONPATH", None)
    program = (str(installed.command),)
    processes = [
        spawn(command, env, program=program, cwd=installed.cwd) for command in ("worker", "apply")
    ]
    try:
        wait_for(
            lambda: (
                applied_resolved_ts(pipeline) >= final
                or any(process.poll() is not None for process in processes)
            ),
            "the installed worker and sink to apply the workload",
        )
        assert all(process.poll() is None for process in processes), process_logs(unique)
    finally:
        for process in processes:
            stop(process)
    out = _run([installed.command, "verify", "--expected", expected], installed.cwd, env)
    assert out.splitlines()[-1] == "verify: match"
