"""What `make dist` puts in the wheel: every file of the packages that is not Python (Lua
scripts, service files, schemas, Spark's log settings), the entry point and the shared files, and
one version across the package, its native wheel and the ``native`` extra's pin."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import CHECKOUT

# The import packages the wheel ships (pyproject.toml, [tool.setuptools.packages.find]).
PACKAGES = ("config", "core", "streams", "spark_sink", "ticdc_sink")
# What the wheel installs in <prefix>/share/ticdc-sink/ (pyproject.toml, data-files).
SHARED_FILES = ("Procfile", "CHANGELOG.md", "grafana/ticdc-sink.json")


def package_data() -> list[str]:
    """The files of the packages, as the source tree holds them, that are not Python: each is
    opened by the code at run time, so the wheel must hold every one."""
    listed = subprocess.run(
        ["git", "-C", str(CHECKOUT), "ls-files", "--", *PACKAGES],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return [name for name in listed if not name.endswith(".py")]


def project_version() -> str:
    project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
    version: str = project["version"]
    return version


def source_copy(into: Path) -> Path:
    """The files of the checkout that git tracks or would track, copied into ``into``: what a
    clone holds, without what a build left behind (setuptools puts every file the egg-info of
    an earlier build lists into an sdist, so a lost package-data pattern would go unseen)."""
    listed = subprocess.run(
        ["git", "-C", str(CHECKOUT), "ls-files", "-z", "--cached", "--others",
         "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = CHECKOUT / name
        if source.is_file():  # a file deleted and not yet committed is listed too
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The names in a wheel built as `make dist` builds it (through the sdist) from a copy of the
    sources, without an isolated build environment: the virtualenv's setuptools builds it in
    seconds."""
    source = source_copy(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, (
        f"no wheel built (make?):\n{built.stdout[-2000:]}{built.stderr[-2000:]}"
    )
    (wheel,) = out.glob("ticdc_sink-*.whl")
    return set(zipfile.ZipFile(wheel).namelist())


def test_the_wheel_holds_every_file_the_packages_open(wheel_names: set[str]) -> None:
    data = package_data()
    assert any(name.endswith(".lua") for name in data), "no Lua script found in the packages"
    lost = [name for name in data if name not in wheel_names]
    assert not lost, f"not in the wheel (pyproject.toml's package-data): {lost}"


def test_the_wheel_installs_the_command_and_the_shared_files(wheel_names: set[str]) -> None:
    info = f"ticdc_sink-{project_version()}.dist-info"
    assert f"{info}/entry_points.txt" in wheel_names
    shared = f"ticdc_sink-{project_version()}.data/data/share/ticdc-sink"
    lost = [name for name in SHARED_FILES if f"{shared}/{name}" not in wheel_names]
    assert not lost, f"not in the wheel's share/ticdc-sink (pyproject.toml's data-files): {lost}"


def test_the_native_wheel_moves_with_the_package() -> None:
    """The ``native`` extra pins the native wheel to this version (core/native.py uses only a
    wheel built from the same sources): the three versions are one."""
    version = project_version()
    cargo = tomllib.loads((CHECKOUT / "native" / "Cargo.toml").read_text())["package"]
    assert cargo["version"] == version, "native/Cargo.toml's version is not pyproject.toml's"
    project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["native"] == [f"ticdc-sink-native=={version}"]
    lock = (CHECKOUT / "native" / "Cargo.lock").read_text()
    assert f'name = "ticdc-sink-native"\nversion = "{version}"' in lock, "Cargo.lock is stale"
