"""The Lua scripts: package files, shipped by the package data, loaded without their comments."""

from __future__ import annotations

import fnmatch
import tomllib
from importlib.resources import files
from pathlib import Path

from core.staging import scripts

ROOT = Path(__file__).parents[3]


def test_the_scripts_are_package_files_without_their_comments() -> None:
    for name, text in [
        ("stage.lua", scripts.STAGE),
        ("resolve_idle.lua", scripts.RESOLVE_IDLE),
        ("hold_ts.lua", scripts.HOLD_TS),
        ("trim.lua", scripts.TRIM),
        ("stage_members.lua", scripts.STAGE_MEMBERS),
        ("retire.lua", scripts.RETIRE),
    ]:
        shipped = (files("core.staging") / name).read_text()
        assert "redis.call" in text
        assert text.splitlines() == [x for x in shipped.splitlines() if not x.startswith("--")]


def test_every_script_is_in_the_package_data() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = project["tool"]["setuptools"]["package-data"]["core"]
    lua = sorted(p.relative_to(ROOT / "core").as_posix() for p in ROOT.glob("core/**/*.lua"))
    assert len(lua) == 7
    assert all(any(fnmatch.fnmatch(name, glob) for glob in globs) for name in lua)
