"""TiDB timestamps (TSOs) as people read them: a UTC time and how long ago it was.

A TSO holds milliseconds since the Unix epoch above 18 logical bits. The pipeline compares TSOs
as exact integers; these helpers are for logs, ``status`` and metrics only.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

# TSOs carry physical milliseconds above 18 logical bits.
TSO_PHYSICAL_SHIFT = 18


def tso_millis(ts: int) -> int:
    """The physical part of a TSO: milliseconds since the Unix epoch."""
    return ts >> TSO_PHYSICAL_SHIFT


def tso_seconds(ts: int) -> float:
    """The physical time of a TSO in Unix seconds (never used to order changes)."""
    return tso_millis(ts) / 1000.0


def tso_time(ts: int) -> str:
    """The UTC time of a TSO, ISO 8601 to the millisecond: ``2026-11-23T18:04:05.123Z``."""
    return utc_millis_time(tso_millis(ts))


def utc_millis_time(millis: int) -> str:
    """Milliseconds since the epoch as ISO 8601 UTC: ``2026-11-23T18:04:05.123Z``."""
    moment = datetime.fromtimestamp(millis / 1000.0, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def tso_age(ts: int, now: float | None = None) -> float:
    """Seconds from a TSO's physical time to ``now`` (Unix seconds; default: the clock)."""
    return (time.time() if now is None else now) - tso_seconds(ts)


def describe_tso(ts: int | None, now: float | None = None) -> str:
    """A TSO with its UTC time and age, ``449... (2026-11-23T18:04:05.123Z, 3.2 s ago)``."""
    if ts is None:
        return "unknown"
    if ts == 0:
        return "0 (none yet)"
    return f"{ts} ({tso_time(ts)}, {format_age(tso_age(ts, now))})"


def format_age(seconds: float) -> str:
    """An age as people say it: ``3.2 s ago``, ``4 min 10 s ago``, ``2 h 5 min ago``."""
    if seconds < 0:
        return f"{-seconds:.1f} s ahead"
    if seconds < 60:
        return f"{seconds:.1f} s ago"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s ago"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min ago"
    return f"{whole // 86400} d {whole % 86400 // 3600} h ago"


def tso_fields(ts: int | None, now: float | None = None) -> dict[str, str | float | None]:
    """A TSO's time and age for a JSON document (None when the TSO is unknown or 0)."""
    if not ts:
        return {"time": None, "age_seconds": None}
    return {"time": tso_time(ts), "age_seconds": round(tso_age(ts, now), 3)}
