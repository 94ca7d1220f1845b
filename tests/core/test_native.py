"""The native wheel, used whole or not at all: a wheel built from other sources (another API
version or member layout, or one that does not say) is declined with one warning, and every
native path falls back to its Python twin."""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Iterator

import pytest

from core import native as native_paths
from core.native import API_VERSION, expected_versions, native_module, wheel_versions
from core.staging.layout import LAYOUT_VERSION
from core.staging.members import MemberReader, member_reader


@pytest.fixture
def fresh_check() -> Iterator[None]:
    """The wheel checked again by the test, and again after it (the installed one)."""
    native_paths._installed_module.cache_clear()
    yield
    native_paths._installed_module.cache_clear()


def test_the_installed_wheel_is_built_from_these_sources(native: types.ModuleType) -> None:
    assert wheel_versions(native) == expected_versions() == (API_VERSION, LAYOUT_VERSION)


@pytest.mark.parametrize(
    "built",
    [
        # A wheel from before API_VERSION: it does not say.
        {"STAGING_LAYOUT_VERSION": LAYOUT_VERSION},
        {"API_VERSION": API_VERSION + 1, "STAGING_LAYOUT_VERSION": LAYOUT_VERSION},
        {"API_VERSION": API_VERSION, "STAGING_LAYOUT_VERSION": LAYOUT_VERSION + 1},
    ],
)
def test_a_wheel_built_from_other_sources_is_declined_with_one_warning(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_check: None,
    built: dict[str, int],
) -> None:
    monkeypatch.setitem(sys.modules, "ticdc_sink_native", types.SimpleNamespace(**built))
    with caplog.at_level(logging.WARNING, logger="ticdc_sink.native"):
        assert native_module() is None
        assert native_module() is None
    (warning,) = caplog.records
    assert "the wheel is not used (rebuild it" in warning.getMessage()
    # Every native path is its Python twin then.
    assert isinstance(getattr(member_reader(), "__self__", None), MemberReader)


def test_turned_off_the_wheel_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native_paths.NATIVE_ENV, "0")
    assert native_module() is None
