"""SQL identifiers, quoted for MySQL-compatible servers (the upstream TiDB and the downstream)."""

from __future__ import annotations


def quote(identifier: str) -> str:
    """A backtick-quoted identifier: any name from the stream is safe inside SQL."""
    return "`" + identifier.replace("`", "``") + "`"
