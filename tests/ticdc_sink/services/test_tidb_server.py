"""The TiDB service's build settings, read from the Go module that pins TiDB."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.errors import ServiceError
from ticdc_sink.services.tidb_server import (
    GO_MODULE_DIR,
    TIDB_MODULE,
    TiDBService,
    go_version,
    required_version,
    toolchain,
    version_flags,
)

GO_MOD = (GO_MODULE_DIR / "go.mod").read_text()


def test_the_pinned_version_and_its_parser_are_one_commit() -> None:
    version = required_version(GO_MOD, TIDB_MODULE)
    commit = version.rsplit("-", 1)[1]
    # TiDB's go.mod points its parser at ./pkg/parser; ours must name the same commit.
    parser = next(line for line in GO_MOD.splitlines() if "pkg/parser =>" in line)
    assert parser.split()[-1].endswith(f"-{commit}")
    assert f"{TIDB_MODULE} {version}" in (GO_MODULE_DIR / "go.sum").read_text()


def test_the_toolchain_is_one_tidb_runs_with() -> None:
    # pkg/util/hack panics at start unless runtime.Version() contains "go1.25".
    assert toolchain(GO_MOD).startswith("go1.25.")
    assert f"tool {TIDB_MODULE}/cmd/tidb-server" in GO_MOD


def test_required_version_reads_single_lines_and_blocks() -> None:
    text = (
        "module m\n\nrequire a/b v1.0.0\n\nrequire (\n\tc/d v2.1.0 // indirect\n\te/f v0.3.0\n)\n"
    )
    assert required_version(text, "a/b") == "v1.0.0"
    assert required_version(text, "c/d") == "v2.1.0"
    assert required_version(text, "e/f") == "v0.3.0"
    with pytest.raises(ServiceError, match="requires no version of g/h"):
        required_version(text, "g/h")
    with pytest.raises(ServiceError, match="no toolchain line"):
        toolchain(text)


def test_a_pseudo_version_names_its_commit_in_the_binary() -> None:
    flags = version_flags("v1.1.0-beta.0.20260205093021-1eb3d0a8c7a9")
    assert flags == [
        "-ldflags",
        f"-X {TIDB_MODULE}/pkg/util/versioninfo.TiDBGitHash=1eb3d0a8c7a9",
    ]
    assert version_flags("v1.1.0") == []


def test_go_versions() -> None:
    assert go_version("go1.26.8\n") == (1, 26)
    assert go_version("go1.19") == (1, 19)
    with pytest.raises(ServiceError, match="cannot read a Go version"):
        go_version("devel")


def test_the_server_runs_unistore_in_the_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICDC_SINK_STATE_DIR", str(tmp_path))
    service = TiDBService()
    assert service.binary == tmp_path / "tidb" / "bin" / f"tidb-server-{service.version}"
    command = service.command()
    assert command[0] == str(service.binary)
    assert "--store=unistore" in command
    assert f"--path={tmp_path / 'tidb' / 'data'}" in command
    assert f"-P={TiDBService.endpoint.port}" in command


def test_a_machine_without_go_is_told_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from ticdc_sink.services import tidb_server

    monkeypatch.setattr(tidb_server.shutil, "which", lambda _name: None)
    monkeypatch.setattr(tidb_server, "GO_FALLBACK", "/nonexistent/go")
    with pytest.raises(ServiceError, match=r"install Go >= 1\.21"):
        tidb_server.find_go()


def test_a_built_binary_is_not_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ticdc_sink.services import tidb_server

    monkeypatch.setenv("TICDC_SINK_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(tidb_server, "find_go", lambda: pytest.fail("went to build"))
    service = TiDBService()
    service.binary.parent.mkdir(parents=True)
    service.binary.touch()
    service.install()
