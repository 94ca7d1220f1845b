"""The version of ticdc-sink, as installed: the one number every process names at start."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def installed_version() -> str:
    """The installed distribution's version (pyproject's), or ``unknown`` from a bare source
    tree."""
    try:
        return version("ticdc-sink")
    except PackageNotFoundError:
        return "unknown"
