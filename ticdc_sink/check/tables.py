"""Which tables a check compares, and where each one is downstream: every upstream base table
the ``--tables`` patterns match, save the system databases, the skipped tables and the meta
database, under the name the routes give it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from config.settings import Settings
from spark_sink.db.dialect import quote
from spark_sink.routing import Router
from ticdc_sink.check.canonical import Column
from ticdc_sink.truth import json_columns_of

# TiDB's own databases: no changefeed replicates them.
SYSTEM_DATABASES = frozenset(
    {"mysql", "information_schema", "performance_schema", "metrics_schema", "sys"}
)


@dataclass(frozen=True, slots=True)
class TablePair:
    """An upstream table and the downstream table it replicates to."""

    upstream: tuple[str, str]
    downstream: tuple[str, str]

    @property
    def name(self) -> str:
        """The upstream name, and the downstream one where a route moves it."""
        up = ".".join(self.upstream)
        down = ".".join(self.downstream)
        return up if up == down else f"{up} (downstream {down})"


def qualified(name: tuple[str, str]) -> str:
    return f"{quote(name[0])}.{quote(name[1])}"


def replicated_tables(
    upstream: Any, settings: Settings, patterns: Sequence[str]
) -> list[TablePair]:
    """The upstream's tables (as of its snapshot) a check compares, by name."""
    router = Router(settings.sink.routes, settings.sink.skip_tables)
    upstream.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
        "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME"
    )
    pairs = []
    for schema, table in upstream.fetchall():
        schema, table = str(schema), str(table)
        if schema.lower() in SYSTEM_DATABASES:
            continue
        if patterns and not any(fnmatchcase(f"{schema}.{table}", p) for p in patterns):
            continue
        target = router.route(schema, table)
        if target is None or target[0] == settings.downstream.meta_db:
            continue
        pairs.append(TablePair((schema, table), target))
    return pairs


def columns_of(cursor: Any, name: tuple[str, str]) -> list[Column]:
    """A table's columns in order (empty: no such table)."""
    cursor.execute(
        "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        name,
    )
    found = [(str(n), str(t).lower()) for n, t in cursor.fetchall()]
    if not found:
        return []
    json_names = json_columns_of(cursor, *name)
    return [Column(n, t, n in json_names or t == "json") for n, t in found]
