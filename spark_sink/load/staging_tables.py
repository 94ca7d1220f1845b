"""The tables of a batch as the downstream has them: each routed table's layout (read once, again
after a DDL), the staging table its rows load into (created once per process), the facts that
decide whether its upserts may load in place, and which staging tables are known empty."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from config.settings import Settings
from core.sql import quote
from spark_sink.db.dialect import Dialect
from spark_sink.db.tables import (
    Column,
    TableFacts,
    referenced_tables,
    table_columns,
    table_facts,
    table_name,
)
from spark_sink.drift import missing_columns, missing_table
from spark_sink.load.loaders import in_place
from spark_sink.load.staged import DELETE_FLAG, StagedTable
from spark_sink.plan import TablePlan
from spark_sink.routing import Router

# Part of a staging table's name: a new layout of staging tables gets new tables.
STAGING_LAYOUT = "2"
# Columns of a key-less table's staging index (a selective prefix of its columns).
PROBE_PARTS = 8


class StagingTables:
    """The downstream tables a batch writes and their staging tables, per routed table."""

    def __init__(self, settings: Settings, router: Router) -> None:
        self.settings = settings
        self.router = router
        self._layouts: dict[tuple[str, str], list[Column]] = {}
        # Every downstream column's name, generated ones too (they are no drift).
        self._names: dict[tuple[str, str], frozenset[str]] = {}
        # What decides whether a table's rows may replace in place (keys, foreign keys, triggers).
        self._facts: dict[tuple[str, str], TableFacts] = {}
        # Per downstream schema, its tables a foreign key references (one query a schema).
        self._referenced: dict[str, frozenset[str]] = {}
        # Staging tables created by this process (CREATE is a DDL: TiDB runs it as a job).
        self._created: set[str] = set()
        # Staging tables known empty (emptied after their last batch) on the connection named.
        self._empty_on: Any = None
        self._empty: set[str] = set()

    def staged(
        self,
        cursor: Any,
        dialect: Dialect,
        plan: TablePlan,
        create: Callable[[str], None] | None = None,
    ) -> StagedTable | None:
        """``plan``'s rows as they load into its routed table's staging table (made when this
        process has not yet, by ``create`` where given, else over ``cursor``); None for a table
        the routes skip or that drift leaves out."""
        routed = self.router.route(plan.schema, plan.table)
        if routed is None:
            return None
        schema, table = routed
        columns = self._layouts.get(routed)
        if columns is None:
            every = table_columns(cursor, schema, table)
            if not every:
                missing_table(self.settings, plan, f"{schema}.{table}")
                return None
            self._names[routed] = frozenset(c.name for c in every)
            columns = self._layouts[routed] = [c for c in every if not c.generated]
        missing_columns(self.settings, plan, f"{schema}.{table}", self._names[routed])
        present = {c.name for c in columns}
        keyed = plan.has_key and all(k in present for k in plan.key_columns)
        indexed = None if plan.has_key else _probe_columns(plan, columns)
        stage_name = self._stage_table(
            create or cursor.execute, dialect, schema, table, columns, indexed
        )
        staged_deletes = [] if keyed else list(plan.deletes.values())
        upserts = list(plan.upserts.values())
        if plan.keyless:
            copies = plan.copies
            upserts = [image for key, image in plan.upserts.items() for _ in range(copies[key])]
        return StagedTable(
            plan,
            table_name(schema, table),
            table_name(self.settings.downstream.meta_db, stage_name),
            stage_name,
            columns,
            keyed,
            [*staged_deletes, *upserts],
            len(staged_deletes),
        )

    def in_place(self, cursor: Any, item: StagedTable) -> bool:
        """Whether ``item``'s upserts may load straight into its target (its facts are read
        once per table, again after a DDL)."""
        routed = self.router.route(item.plan.schema, item.plan.table)
        assert routed is not None  # a batch item is a routed table
        facts = self._facts.get(routed)
        if facts is None:
            schema, table = routed
            referenced = self._referenced.get(schema)
            if referenced is None:
                referenced = self._referenced[schema] = referenced_tables(cursor, schema)
            facts = self._facts[routed] = table_facts(cursor, schema, table, referenced)
        return in_place(item.plan, item.keyed, item.columns, facts)

    def forget_layouts(self) -> None:
        """Read every table's layout and facts again: a DDL may have changed any of them."""
        self._layouts.clear()
        self._names.clear()
        self._facts.clear()
        self._referenced.clear()

    def forget_created(self) -> None:
        """Make every staging table again when next needed: a CREATE may not have run."""
        self._created.clear()

    def known_empty(self, connection: Any) -> set[str]:
        """The staging tables known empty on ``connection``, for the caller to update (another
        connection than the last one asked about knows none)."""
        if connection is not self._empty_on:
            self._empty_on = connection
            self._empty = set()
        return self._empty

    def _stage_table(
        self,
        create: Callable[[str], object],
        dialect: Dialect,
        schema: str,
        table: str,
        columns: list[Column],
        indexed: list[Column] | None = None,
    ) -> str:
        """The staging table's name, made the first time this process needs it."""
        layout = "\x00".join(f"{c.name}\x01{c.staging_type}" for c in columns)
        probe = ",".join(c.name for c in indexed) if indexed else ""
        identity = f"{schema}\x00{table}\x00{layout}\x00{probe}\x00{STAGING_LAYOUT}"
        digest = hashlib.sha1(identity.encode()).hexdigest()[:16]
        name = f"stage_{self.settings.group}_{digest}"[:64]
        if name not in self._created:
            create(
                dialect.create_staging(
                    table_name(self.settings.downstream.meta_db, name),
                    [f"{quote(c.name)} {c.staging_type} NULL" for c in columns],
                    DELETE_FLAG,
                    [c.index_part() for c in indexed or []],
                )
            )
            self._created.add(name)
        return name


def _probe_columns(plan: TablePlan, columns: list[Column]) -> list[Column] | None:
    """For a table without a key: the staging columns to index, so that the DELETE JOIN
    scans the target once and probes the staged rows instead of comparing all pairs."""
    by_name = {c.name: c for c in columns}
    candidates = [by_name[k] for k in plan.key_columns if k in by_name]
    return candidates[:PROBE_PARTS] or None
