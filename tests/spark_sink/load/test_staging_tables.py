"""The tables of a batch as the downstream has them: the advice when the downstream keeps fewer
tables open than the sink writes (pure, then read from the real MariaDB)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from config.settings import Settings
from core.model import ColumnFlag, Op, RowChange, column_type
from spark_sink.db.connection import connect
from spark_sink.db.dialect import server_dialect
from spark_sink.db.tables import Column, schema_columns, tables_columns
from spark_sink.load.staging_tables import StagingTables, table_cache_advice
from spark_sink.plan import TablePlan, plan_batch
from spark_sink.routing import Router

COLUMNS = {"id": column_type(3, int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY))}


def test_the_advice_names_each_cache_smaller_than_the_tables() -> None:
    assert table_cache_advice(400, 400, 400) is None
    both = table_cache_advice(10_000, 2_000, 400)
    assert both is not None
    assert "10,000 tables" in both
    assert "table_open_cache=2,000, table_definition_cache=400" in both
    one = table_cache_advice(5_000, 9_000, 400)
    assert one is not None and "table_open_cache" not in one


@pytest.fixture
def small_definition_cache(settings: Settings) -> Iterator[None]:
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT @@GLOBAL.table_definition_cache")
        (before,) = cursor.fetchone()
        cursor.execute("SET GLOBAL table_definition_cache = 400")
        try:
            yield
        finally:
            cursor.execute(f"SET GLOBAL table_definition_cache = {int(before)}")


@pytest.mark.integration
def test_a_sink_writing_more_tables_than_the_server_caches_says_so_once(
    settings: Settings,
    unique: str,
    small_definition_cache: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tables = 450
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{unique}`")
        try:
            for index in range(tables):
                cursor.execute(f"CREATE TABLE `{unique}`.`t{index}` (id INT PRIMARY KEY)")
            changes = [
                RowChange(1, unique, f"t{index}", Op.INSERT, COLUMNS, {"id": 1}, None)
                for index in range(tables)
            ]
            staging = StagingTables(settings, Router())
            dialect = server_dialect(cursor)
            plans = plan_batch(changes)
            with caplog.at_level(logging.WARNING, "ticdc_sink.sink"):
                staging.learn(cursor, plans, facts=True)
                # Known, not yet written: nothing to say.
                staging.check_caches(cursor, dialect)
                assert not caplog.records
                # Written, all in one batch: said at that batch, and once.
                staging.staged_batch(cursor, dialect, plans, facts=True)
                staging.staged_batch(cursor, dialect, plans, facts=True)
        finally:
            cursor.execute(f"DROP DATABASE `{unique}`")
    warnings = [r.getMessage() for r in caplog.records if "tables" in r.getMessage()]
    assert len(warnings) == 1
    assert "450 tables" in warnings[0] and "table_definition_cache=400" in warnings[0]
    assert "table_open_cache" not in warnings[0]


@pytest.mark.integration
def test_a_table_named_in_another_case_is_forgotten_alone(
    settings: Settings, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[list[str]] = []

    def counted(cursor: Any, schema: str, tables: Sequence[str]) -> dict[str, list[Column]]:
        reads.append(sorted(tables))
        return tables_columns(cursor, schema, tables)

    monkeypatch.setattr("spark_sink.load.staging_tables.tables_columns", counted)
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{unique}`")
        try:
            for table in ("Orders", "items"):
                cursor.execute(f"CREATE TABLE `{unique}`.`{table}` (id INT PRIMARY KEY)")
            plans = plan_batch(
                RowChange(1, unique, table, Op.INSERT, COLUMNS, {"id": 1}, None)
                for table in ("Orders", "items")
            )
            staging = StagingTables(settings, Router())
            staging.learn(cursor, plans, facts=True)
            # As a DDL names it (named_tables lowers every name).
            staging.forget_layouts(
                foreign_keys=False, tables=frozenset({(unique.lower(), "orders")})
            )
            staging.learn(cursor, plans, facts=True)
        finally:
            cursor.execute(f"DROP DATABASE `{unique}`")
    assert reads == [["Orders", "items"], ["Orders"]]


@pytest.mark.integration
def test_a_batch_meeting_many_new_tables_of_a_schema_reads_the_whole_schema(
    settings: Settings, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []

    def whole(cursor: Any, schema: str) -> dict[str, list[Column]]:
        reads.append("schema")
        return schema_columns(cursor, schema)

    def named(cursor: Any, schema: str, tables: Sequence[str]) -> dict[str, list[Column]]:
        reads.append(",".join(sorted(tables)))
        return tables_columns(cursor, schema, tables)

    monkeypatch.setattr("spark_sink.load.staging_tables.SCHEMA_READ_TABLES", 3)
    monkeypatch.setattr("spark_sink.load.staging_tables.schema_columns", whole)
    monkeypatch.setattr("spark_sink.load.staging_tables.tables_columns", named)

    def plans(*tables: str) -> list[TablePlan]:
        return plan_batch(
            RowChange(1, unique, table, Op.INSERT, COLUMNS, {"id": 1}, None) for table in tables
        )

    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{unique}`")
        try:
            for table in ("a", "b", "c", "d", "e"):
                cursor.execute(f"CREATE TABLE `{unique}`.`{table}` (id INT PRIMARY KEY)")
            staging = StagingTables(settings, Router())
            dialect = server_dialect(cursor)
            staging.learn(cursor, plans("a", "b"), facts=True)
            staging.learn(cursor, plans("a", "c", "d", "missing"), facts=True)
            # Every table of the schema is known now, with its facts.
            staging.learn(cursor, plans("b", "e"), facts=True)
            found = [staging.staged(cursor, dialect, plan) for plan in plans("a", "e")]
            assert all(item is not None and staging.in_place(cursor, item) for item in found)
            cursor.execute(f"CREATE TABLE `{unique}`.`f` (id INT PRIMARY KEY)")
            staging.learn(cursor, plans("f"), facts=True)
            # A schema of more tables than a read whole may keep: only the batch's are read.
            monkeypatch.setattr("spark_sink.load.staging_tables.SCHEMA_READ_MAX_TABLES", 5)
            StagingTables(settings, Router()).learn(cursor, plans("a", "c", "d"), facts=True)
        finally:
            cursor.execute(f"DROP DATABASE `{unique}`")
    assert reads == ["a,b", "schema", "f", "a,c,d"]
