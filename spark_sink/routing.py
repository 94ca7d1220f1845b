"""Optional routing of upstream ``db.table`` names to downstream ones, and tables to skip.

Rules are ``pattern=target`` pairs with shell-style wildcards: ``app.*=app_replica.*`` maps every
table of ``app`` into ``app_replica``; ``app.orders=archive.orders_v2`` maps one table. Skip
patterns (``app.tmp_*``) drop matching tables' changes and DDL. The first matching rule wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from config.errors import ConfigError


@dataclass(frozen=True)
class Router:
    routes: tuple[tuple[str, str], ...] = ()
    skips: tuple[str, ...] = field(default=())

    @classmethod
    def parse(cls, routes: str = "", skips: str = "") -> Router:
        """From ``TICDC_SINK_ROUTES`` and ``TICDC_SINK_SKIP`` (comma lists)."""
        pairs = []
        for rule in filter(None, (r.strip() for r in routes.split(","))):
            pattern, sep, target = rule.partition("=")
            if not sep or "." not in pattern or "." not in target:
                raise ConfigError(f"TICDC_SINK_ROUTES: {rule!r} is not db.table=db.table")
            pairs.append((pattern.strip(), target.strip()))
        return cls(tuple(pairs), tuple(s.strip() for s in skips.split(",") if s.strip()))

    def route(self, schema: str, table: str) -> tuple[str, str] | None:
        """The downstream (schema, table), or None when the table is skipped."""
        name = f"{schema}.{table}"
        if any(fnmatchcase(name, pattern) for pattern in self.skips):
            return None
        for pattern, target in self.routes:
            if fnmatchcase(name, pattern):
                target_schema, _, target_table = target.partition(".")
                return (
                    schema if target_schema == "*" else target_schema,
                    table if target_table == "*" else target_table,
                )
        return schema, table

    def route_schema(self, schema: str) -> str:
        """The downstream database of a whole upstream database: the first ``db.*`` route
        whose database matches (a route of single tables does not move the database)."""
        for pattern, target in self.routes:
            pattern_schema, _, pattern_table = pattern.partition(".")
            if pattern_table == "*" and fnmatchcase(schema, pattern_schema):
                target_schema = target.partition(".")[0]
                return schema if target_schema == "*" else target_schema
        return schema
