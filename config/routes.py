"""Routes and table patterns: which upstream tables replicate where, and which are skipped."""

from __future__ import annotations

from typing import Any, NamedTuple


class Route(NamedTuple):
    """One ``pattern=target`` rule of TICDC_SINK_ROUTES: upstream ``db.table`` names matching
    ``pattern`` (shell wildcards) replicate to ``target`` (a ``*`` part keeps that part)."""

    pattern: str
    target: str

    def __str__(self) -> str:
        return f"{self.pattern}={self.target}"


def _items(value: Any) -> list[Any]:
    """A comma list's items, or a TOML list's."""
    return value.split(",") if isinstance(value, str) else list(value)


def parse_routes(value: Any) -> tuple[Route, ...]:
    """Routes from ``db.table=db.table`` rules (a comma list, or a list); a ValueError names the
    rule that is not one."""
    routes = []
    for rule in _items(value):
        if isinstance(rule, tuple) and len(rule) == 2:
            routes.append(Route(str(rule[0]), str(rule[1])))
            continue
        text = str(rule).strip()
        if not text:
            continue
        pattern, sep, target = text.partition("=")
        if not sep or "." not in pattern or "." not in target:
            raise ValueError(f"{text!r} is not db.table=db.table")
        routes.append(Route(pattern.strip(), target.strip()))
    return tuple(routes)


def parse_table_patterns(value: Any) -> tuple[str, ...]:
    """``db.table`` patterns (shell wildcards) from a comma list, or a list; blanks dropped."""
    return tuple(text for text in (str(item).strip() for item in _items(value)) if text)
