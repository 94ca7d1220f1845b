"""The tables of a batch as the downstream has them: each routed table's layout (read once, again
after a DDL; a batch's new tables together), the staging table its rows load into (created once
per process, when rows first load into it), the facts that decide whether its upserts may load
in place, which staging tables are known empty, and whether the downstream keeps as many tables
open as the sink writes."""

from __future__ import annotations

import hashlib
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from config.settings import Protocol, Settings
from core.avro_names import avro_renames
from core.sql import quote
from spark_sink.db.dialect import Dialect
from spark_sink.db.tables import (
    Column,
    TableFacts,
    referenced_tables,
    schema_columns,
    schema_tables,
    table_columns,
    table_facts,
    table_name,
    tables_columns,
    tables_facts,
    triggered_tables,
)
from spark_sink.drift import missing_columns, missing_table
from spark_sink.load.loaders import in_place
from spark_sink.load.staged import DELETE_FLAG, StagedTable
from spark_sink.plan import TablePlan, renamed
from spark_sink.routing import Router

# Part of a staging table's name: a new layout of staging tables gets new tables.
STAGING_LAYOUT = "2"
# Columns of a key-less table's staging index (a selective prefix of its columns).
PROBE_PARTS = 8
# The tables known at which the downstream's table caches are first compared with them (then at
# each doubling, until one warning): MariaDB's smallest default, table_definition_cache, is 400.
TABLE_CACHE_CHECK = 256
# New tables of one schema in a batch from which the whole schema's layouts are read at once: a
# changefeed writing that many of a schema's tables writes most of them, and one query for every
# table costs less than a few queries of many names (each scans the schema's directory).
SCHEMA_READ_TABLES = 100
# The most tables a schema read whole may hold: every one is kept (~2 KiB a table of a few
# columns), and a pipeline may write a few hundred of a schema of many more.
SCHEMA_READ_MAX_TABLES = 20_000

log = logging.getLogger("ticdc_sink.sink")


def table_cache_advice(tables: int, open_cache: int, definition_cache: int) -> str | None:
    """What to tell an operator whose sink writes ``tables`` tables into a server keeping
    ``open_cache`` tables open and ``definition_cache`` definitions (None: they suffice)."""
    short = [
        f"{name}={value:,}"
        for name, value in (
            ("table_open_cache", open_cache),
            ("table_definition_cache", definition_cache),
        )
        if value < tables
    ]
    if not short:
        return None
    return (
        f"the sink writes {tables:,} tables, more than the downstream keeps ({', '.join(short)}): "
        "its batches open tables again and again; raise them above the tables replicated "
        "(docs/scaling.md, Many tables)"
    )


@dataclass(frozen=True)
class Layout:
    """A downstream table as a batch writes it: its quoted name, the columns rows set (not the
    generated ones), and every column's name (generated ones are no drift)."""

    target: str
    columns: list[Column]
    names: frozenset[str]
    present: frozenset[str]

    @classmethod
    def of(cls, schema: str, table: str, every: list[Column]) -> Layout:
        columns = [c for c in every if not c.generated]
        return cls(
            table_name(schema, table),
            columns,
            frozenset(c.name for c in every),
            frozenset(c.name for c in columns),
        )


class StagingTables:
    """The downstream tables a batch writes and their staging tables, per routed table."""

    def __init__(self, settings: Settings, router: Router, lane: int = 0) -> None:
        self.settings = settings
        self.router = router
        # The sink's connection these staging tables are for: each connection applying
        # batches beside the others loads into staging tables of its own.
        self.lane = lane
        self._layouts: dict[tuple[str, str], Layout] = {}
        # What decides whether a table's rows may replace in place (keys, foreign keys, triggers).
        self._facts: dict[tuple[str, str], TableFacts] = {}
        # Per downstream schema, its tables a foreign key references, and those with triggers
        # (one query a schema each).
        self._referenced: dict[str, frozenset[str]] = {}
        self._triggered: dict[str, frozenset[str]] = {}
        # Per routed table and probe: its staging table's name, qualified name and CREATE.
        self._stages: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        # Staging tables created by this process (CREATE is a DDL: TiDB runs it as a job).
        self._created: set[str] = set()
        # The tables known when the downstream's table caches are next compared with them.
        self._cache_check = TABLE_CACHE_CHECK
        # Staging tables known empty (emptied after their last batch) on the connection named.
        self._empty_on: Any = None
        self._empty: set[str] = set()

    def learn(self, cursor: Any, plans: Sequence[TablePlan], facts: bool) -> None:
        """Read the layouts (and, with ``facts``, the facts) of the tables of ``plans`` not
        known yet: a few queries a schema (every table of the schema at once when the batch
        meets :data:`SCHEMA_READ_TABLES` of them new and the schema holds at most
        :data:`SCHEMA_READ_MAX_TABLES`), where one batch of thousands of tables
        new to the sink would otherwise cost three a table. A table not found is left to
        :meth:`staged`, which names it."""
        unknown: dict[str, list[str]] = {}
        for plan in plans:
            routed = self.router.route(plan.schema, plan.table)
            if routed is not None and routed not in self._layouts:
                unknown.setdefault(routed[0], []).append(routed[1])
        for schema, tables in unknown.items():
            names = sorted(set(tables))
            if (
                len(names) >= SCHEMA_READ_TABLES
                and schema_tables(cursor, schema) <= SCHEMA_READ_MAX_TABLES
            ):
                found = schema_columns(cursor, schema)
                found = {t: c for t, c in found.items() if (schema, t) not in self._layouts}
            else:
                found = tables_columns(cursor, schema, names)
            for table, every in found.items():
                self._layouts[schema, table] = Layout.of(schema, table, every)
            if facts:
                referenced = _per_schema(self._referenced, referenced_tables, cursor, schema)
                triggered = _per_schema(self._triggered, triggered_tables, cursor, schema)
                known = tables_facts(cursor, schema, found, referenced, triggered)
                self._facts.update(((schema, table), f) for table, f in known.items())

    def staged_batch(
        self, cursor: Any, dialect: Dialect, plans: Sequence[TablePlan], facts: bool
    ) -> list[StagedTable]:
        """:meth:`staged` of every table of ``plans`` (None left out), the new ones learned
        together first (with ``facts``: :meth:`learn`); then the downstream's table caches are
        compared with the tables written, this batch's among them (:meth:`check_caches`)."""
        self.learn(cursor, plans, facts)
        staged = [s for plan in plans if (s := self.staged(cursor, dialect, plan)) is not None]
        self.check_caches(cursor, dialect)
        return staged

    def check_caches(self, cursor: Any, dialect: Dialect) -> None:
        """Warn once when the sink writes more tables than the downstream keeps open or its
        definitions cached (:func:`table_cache_advice`), read as the tables written double
        (their staging names: a table's layout may be known unwritten, a schema's being read
        whole)."""
        known = len(self._stages)
        if known < self._cache_check:
            return
        self._cache_check = known * 2
        query = dialect.table_cache_query()
        if query is None:
            return
        cursor.execute(query)
        open_cache, definition_cache = (int(value) for value in cursor.fetchone())
        advice = table_cache_advice(known, open_cache, definition_cache)
        if advice is not None:
            log.warning(advice)
            self._cache_check = sys.maxsize

    def staged(self, cursor: Any, dialect: Dialect, plan: TablePlan) -> StagedTable | None:
        """``plan``'s rows as they load into its routed table's staging table (made by
        :meth:`make`, only when rows load into it); None for a table the routes skip or that
        drift leaves out."""
        routed = self.router.route(plan.schema, plan.table)
        if routed is None:
            return None
        schema, table = routed
        layout = self._layouts.get(routed)
        if layout is None:
            every = table_columns(cursor, schema, table)
            if not every:
                hint = self._avro_route(cursor, plan, schema, table)
                missing_table(self.settings, plan, f"{schema}.{table}", hint)
                return None
            layout = self._layouts[routed] = Layout.of(schema, table, every)
        if self.settings.kafka.protocol is Protocol.AVRO:
            # Avro carries names of [A-Za-z0-9_] only: a column is matched by its Avro name.
            names = avro_renames(plan.columns, layout.names)
            if names:
                plan = renamed(plan, names)
        missing_columns(self.settings, plan, f"{schema}.{table}", layout.names)
        columns = layout.columns
        has_key = plan.has_key
        keyed = has_key and all(k in layout.present for k in plan.key_columns)
        indexed = None if has_key else _probe_columns(plan, columns)
        stage_name, stage, create = self._stage_table(dialect, schema, table, columns, indexed)
        staged_deletes = [] if keyed else list(plan.deletes.values())
        upserts = list(plan.upserts.values())
        if plan.keyless:
            copies = plan.copies
            upserts = [image for key, image in plan.upserts.items() for _ in range(copies[key])]
        return StagedTable(
            plan,
            layout.target,
            stage,
            stage_name,
            columns,
            keyed,
            [*staged_deletes, *upserts],
            len(staged_deletes),
            create,
        )

    def _avro_route(self, cursor: Any, plan: TablePlan, schema: str, table: str) -> str | None:
        """With Avro, the route that takes rows of ``plan`` (its table named as Avro names it)
        to the one downstream table of ``schema`` whose Avro name that is; None without one."""
        if self.settings.kafka.protocol is not Protocol.AVRO:
            return None
        cursor.execute(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (schema,)
        )
        renames = avro_renames([table], [row[0] for row in cursor.fetchall()])
        if table not in renames:
            return None
        return f"{plan.schema}.{plan.table}={schema}.{renames[table]}"

    def make(self, item: StagedTable, run: Callable[[str], object]) -> None:
        """Make ``item``'s staging table by ``run`` (its CREATE) unless this process has: only
        a table that loads rows into its staging table needs one, which a table loaded in
        place seldom does."""
        if item.stage_name not in self._created:
            run(item.create)
            self._created.add(item.stage_name)

    def made(self, item: StagedTable) -> bool:
        """Whether this process has made ``item``'s staging table."""
        return item.stage_name in self._created

    def in_place(self, cursor: Any, item: StagedTable) -> bool:
        """Whether ``item``'s upserts may load straight into its target (its facts are read
        once per table, again after a DDL)."""
        routed = self.router.route(item.plan.schema, item.plan.table)
        assert routed is not None  # a batch item is a routed table
        facts = self._facts.get(routed)
        if facts is None:
            schema, table = routed
            referenced = _per_schema(self._referenced, referenced_tables, cursor, schema)
            facts = self._facts[routed] = table_facts(cursor, schema, table, referenced)
        return in_place(item.plan, item.keyed, item.columns, facts)

    def knows_tables(self) -> bool:
        """Whether any table's layout, facts or staging table is known (else a DDL has nothing
        to make this forget)."""
        return bool(self._layouts or self._facts or self._stages)

    def forget_layouts(
        self, foreign_keys: bool = True, tables: frozenset[tuple[str, str]] | None = None
    ) -> None:
        """Read layouts and facts again after a DDL: of ``tables`` (routed, as (database,
        table) lowered: :func:`~spark_sink.ddl.rewrite.named_tables`), or of every table when
        None, as for a DDL that may have changed any. With ``foreign_keys`` false (a DDL that
        makes no foreign key and renames no table), which tables foreign keys reference is kept:
        MariaDB answers that query by opening every table on the server (seconds with
        thousands). A dropped foreign key leaves its table counted as referenced, which only
        sends its rows through its staging table."""
        if foreign_keys:
            self._referenced.clear()
        if tables is None:
            self._layouts.clear()
            self._facts.clear()
            self._stages.clear()
            self._triggered.clear()
            return
        # A scan of what is known, not a lookup: the statement may name a table in another
        # case than its rows do.
        names = {table for _, table in tables}
        named = {
            key
            for key in self._layouts.keys() | self._facts.keys()
            if key[1].lower() in names and (key[0].lower(), key[1].lower()) in tables
        }
        for key in named:
            self._layouts.pop(key, None)
            self._facts.pop(key, None)
        for stage in [stage for stage in self._stages if stage[:2] in named]:
            del self._stages[stage]
        # Which tables have triggers is kept: no replicated DDL makes one (TiDB has none), and
        # reading them again costs a scan of the schema (tens of ms with thousands of tables).

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
        dialect: Dialect,
        schema: str,
        table: str,
        columns: list[Column],
        indexed: list[Column] | None = None,
    ) -> tuple[str, str, str]:
        """The staging table's name, its name qualified and quoted, and the CREATE that makes
        it (a digest to compute: once a table, again after a DDL)."""
        probe = ",".join(c.name for c in indexed) if indexed else ""
        known = self._stages.get((schema, table, probe))
        if known is not None:
            return known
        layout = "\x00".join(f"{c.name}\x01{c.staging_type}" for c in columns)
        identity = f"{schema}\x00{table}\x00{layout}\x00{probe}\x00{STAGING_LAYOUT}"
        digest = hashlib.sha1(identity.encode()).hexdigest()[:16]
        lane = f"_{self.lane}" if self.lane else ""
        name = f"stage_{self.settings.group}_{digest}"[: 64 - len(lane)] + lane
        qualified = table_name(self.settings.downstream.meta_db, name)
        create = dialect.create_staging(
            qualified,
            [f"{quote(c.name)} {c.staging_type} NULL" for c in columns],
            DELETE_FLAG,
            [c.index_part() for c in indexed or []],
        )
        self._stages[schema, table, probe] = (name, qualified, create)
        return name, qualified, create


def _probe_columns(plan: TablePlan, columns: list[Column]) -> list[Column] | None:
    """For a table without a key: the staging columns to index, so that the DELETE JOIN
    scans the target once and probes the staged rows instead of comparing all pairs."""
    by_name = {c.name: c for c in columns}
    candidates = [by_name[k] for k in plan.key_columns if k in by_name]
    return candidates[:PROBE_PARTS] or None


def _per_schema(
    cache: dict[str, frozenset[str]],
    read: Callable[[Any, str], frozenset[str]],
    cursor: Any,
    schema: str,
) -> frozenset[str]:
    """``read(cursor, schema)`` (tables of ``schema`` a foreign key references, or with
    triggers), read once a schema and kept in ``cache`` until a DDL may change it."""
    found = cache.get(schema)
    if found is None:
        found = cache[schema] = read(cursor, schema)
    return found
