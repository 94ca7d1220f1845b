"""Optional routing of upstream ``db.table`` names to downstream ones, and tables to skip.

Rules are ``pattern=target`` pairs with shell-style wildcards: ``app.*=app_replica.*`` maps every
table of ``app`` into ``app_replica``; ``app.orders=archive.orders_v2`` maps one table. Skip
patterns (``app.tmp_*``) drop matching tables' changes and DDL. The first matching rule wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from config.settings import Route


@dataclass(frozen=True)
class Router:
    """Where each upstream table's changes go downstream: the settings' routes and skipped
    tables (``settings.sink.routes``, ``settings.sink.skip_tables``)."""

    routes: tuple[Route, ...] = ()
    skips: tuple[str, ...] = field(default=())

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
