"""The member layout, its Lua scripts shipped as package files, and the native crate's version."""

from __future__ import annotations

import fnmatch
import logging
import tomllib
import types
from importlib.resources import files
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.model import DDLEvent
from streams.native import native_module
from streams.staging import framing, layout, scripts
from streams.staging.framing import FramedMessage, StagedMessage, frame_message

ROOT = Path(__file__).parents[3]


@given(
    ts=st.integers(0, (1 << 64) - 1),
    offset=st.integers(0, (1 << 63) - 1),
    index=st.integers(0, 0xFFFF),
    body=st.binary(max_size=20),
)
def test_a_row_member_orders_by_commit_ts_and_gives_it_back(
    ts: int, offset: int, index: int, body: bytes
) -> None:
    member = layout.row_member(ts, offset, index, body)
    assert len(member) == layout.ROW_PREFIX + len(body)
    assert layout.member_ts(member) == ts
    assert member[layout.ROW_PREFIX :] == body
    assert (layout.row_member(ts + 1, 0, 0, b"") > member) is True


def test_a_ddl_member_gives_back_its_ddl() -> None:
    ddl = DDLEvent(449_000_000_000_000_001, "db", "t", "ALTER TABLE t ADD c INT", 5)
    ts, digest, body = layout.ddl_args(ddl)
    member = ts + b"%08x" % 1 + body
    assert layout.unpack_ddl_member(member) == ddl
    assert layout.ddl_id(member) == ts + digest


def test_the_scripts_are_package_files_without_their_comments() -> None:
    for name, text in [
        ("stage.lua", scripts.STAGE),
        ("resolve_idle.lua", scripts.RESOLVE_IDLE),
        ("hold_ts.lua", scripts.HOLD_TS),
        ("trim.lua", scripts.TRIM),
    ]:
        shipped = (files("streams.staging") / name).read_text()
        assert "redis.call" in text
        assert text.splitlines() == [x for x in shipped.splitlines() if not x.startswith("--")]


def test_every_script_is_in_the_package_data() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = project["tool"]["setuptools"]["package-data"]["streams"]
    lua = sorted(p.relative_to(ROOT / "streams").as_posix() for p in ROOT.glob("streams/**/*.lua"))
    assert len(lua) == 4
    assert all(any(fnmatch.fnmatch(name, glob) for glob in globs) for name in lua)


def test_the_native_crate_frames_in_this_layout(native: types.ModuleType) -> None:
    assert native.STAGING_LAYOUT_VERSION == layout.LAYOUT_VERSION
    assert framing.native_layout_matches(native)


def test_a_native_module_of_another_layout_is_declined_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stale = types.SimpleNamespace(STAGING_LAYOUT_VERSION=layout.LAYOUT_VERSION + 1)
    monkeypatch.setattr(framing, "native_module", lambda: stale)
    with caplog.at_level(logging.WARNING, logger="ticdc_sink.staging"):
        assert not framing._check_native_layout()
    (warning,) = caplog.records
    assert f"layout {layout.LAYOUT_VERSION + 1}" in warning.getMessage()
    # Declined, the Python framing frames what the stale module would have.
    monkeypatch.setattr(framing, "_NATIVE_FRAMING", False)

    class Packed:
        @property
        def resolved(self) -> list[int]:
            return [7]

        def rows(self) -> list[tuple[int, bytes]]:
            return [(5, b"row")]

        def __len__(self) -> int:
            return 1

    (framed,) = framing.frame_packed([(3, Packed())])
    assert isinstance(framed, FramedMessage)
    assert framed == frame_message(StagedMessage(3, [(5, b"row")], (), 7))


def test_the_installed_native_module_is_checked_at_import() -> None:
    module = native_module()
    assert (module is None or framing.native_layout_matches(module)) == framing._NATIVE_FRAMING
