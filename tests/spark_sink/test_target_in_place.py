"""Loading a table's upserts straight into it against the real MariaDB: LOAD DATA LOCAL ... REPLACE
for a plain keyed table, an append for a key-less one, and never where that would differ from an
upsert (a foreign key pointing at the table, a trigger, a column the batch does not set)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from config.settings import Settings
from core.model import ColumnFlag, Op, RowChange, column_type
from spark_sink.db.connection import connect
from spark_sink.db.tables import (
    referenced_tables,
    schema_columns,
    table_columns,
    table_facts,
    tables_columns,
    tables_facts,
    triggered_tables,
)
from spark_sink.ddl.text import may_change_foreign_keys
from spark_sink.load import loaders
from spark_sink.plan import plan_batch
from spark_sink.target import Target

pytestmark = pytest.mark.integration

PK = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
UNIQUE = int(ColumnFlag.UNIQUE_KEY)
NULLABLE = int(ColumnFlag.NULLABLE)
TS = 449_200_000_000_000_000
COLUMNS = {"id": column_type(3, PK), "v": column_type(15, NULLABLE)}


def query(settings: Settings, sql: str) -> list[tuple[Any, ...]]:
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(sql)
        return list(cursor.fetchall())


@pytest.fixture
def db(settings: Settings, unique: str) -> Iterator[str]:
    query(settings, f"CREATE DATABASE `{unique}`")
    yield unique
    query(settings, f"DROP DATABASE IF EXISTS `{unique}`")
    query(settings, f"DROP DATABASE IF EXISTS `{unique}_meta`")


def target_for(settings: Settings, db: str, **changed: object) -> Target:
    return Target(settings.updated({"group": db, "meta_db": f"{db}_meta", **changed}))


def staged_before_commit(target: Target, db: str) -> list[int]:
    """Arm ``target`` to count, on its own connection just before a batch commits, the rows in
    its staging tables (an in-place load stages none); the counts land in the returned list."""
    counts: list[int] = []
    advance = target.checkpoints.advance

    def advance_then_count(*args: Any) -> None:
        advance(*args)
        with target.connection().cursor() as cursor:
            cursor.execute(
                "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
                (f"{db}_meta",),
            )
            stages = [name for (name,) in cursor.fetchall() if name.startswith("stage_")]
            total = 0
            for name in stages:
                cursor.execute(f"SELECT COUNT(*) FROM `{db}_meta`.`{name}`")
                total += int(cursor.fetchone()[0])
        counts.append(total)

    target.checkpoints.advance = advance_then_count  # type: ignore[method-assign]
    return counts


def upsert(db: str, table: str, ts: int, rows: list[dict[str, Any]], columns: Any = None) -> Any:
    kinds = columns or COLUMNS
    return plan_batch(RowChange(ts, db, table, Op.INSERT, kinds, row, None) for row in rows)


def test_a_plain_keyed_table_loads_in_place_and_its_rows_replace(
    settings: Settings, db: str
) -> None:
    query(settings, f"CREATE TABLE `{db}`.`t` (id INT PRIMARY KEY, v VARCHAR(20))")
    target = target_for(settings, db)
    staged = staged_before_commit(target, db)
    target.apply_batch(
        upsert(db, "t", TS + 1, [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]), TS + 1, 0, {}
    )
    target.apply_batch(
        upsert(db, "t", TS + 2, [{"id": 2, "v": "c"}, {"id": 3, "v": None}]), TS + 2, 0, {}
    )
    assert query(settings, f"SELECT id, v FROM `{db}`.`t` ORDER BY id") == [
        (1, "a"), (2, "c"), (3, None),
    ]  # fmt: skip
    assert staged == [0, 0]
    # The same batches through the staging table stage their rows: the count tells the paths apart.
    query(settings, f"CREATE TABLE `{db}`.`s` (id INT PRIMARY KEY, v VARCHAR(20))")
    through_staging = target_for(settings, db, load_in_place=False)
    staged = staged_before_commit(through_staging, db)
    through_staging.apply_batch(upsert(db, "s", TS + 3, [{"id": 1, "v": "a"}]), TS + 3, 0, {})
    assert staged == [1]


def test_a_unique_value_moving_between_rows_replaces_in_place(settings: Settings, db: str) -> None:
    query(settings, f"CREATE TABLE `{db}`.`u` (id INT PRIMARY KEY, u INT NOT NULL UNIQUE)")
    columns = {"id": column_type(3, PK), "u": column_type(3, UNIQUE)}
    target = target_for(settings, db)
    staged = staged_before_commit(target, db)
    target.apply_batch(upsert(db, "u", TS + 1, [{"id": 1, "u": 10}], columns), TS + 1, 0, {})
    # Row 1 gives its unique value to a new row 2 and takes another one.
    moved = [
        RowChange(TS + 2, db, "u", Op.UPDATE, columns, {"id": 1, "u": 11}, {"id": 1, "u": 10}),
        RowChange(TS + 2, db, "u", Op.INSERT, columns, {"id": 2, "u": 10}, None),
    ]
    target.apply_batch(plan_batch(moved), TS + 2, 0, {})
    assert query(settings, f"SELECT id, u FROM `{db}`.`u` ORDER BY id") == [(1, 11), (2, 10)]
    assert staged == [0, 0]


def test_a_table_a_foreign_key_points_at_keeps_its_children(settings: Settings, db: str) -> None:
    query(settings, f"CREATE TABLE `{db}`.`p` (id INT PRIMARY KEY, v VARCHAR(20))")
    query(
        settings,
        f"CREATE TABLE `{db}`.`c` (id INT PRIMARY KEY, p INT, "
        f"FOREIGN KEY (p) REFERENCES `{db}`.`p` (id) ON DELETE CASCADE)",
    )
    target = target_for(settings, db)
    staged = staged_before_commit(target, db)
    target.apply_batch(upsert(db, "p", TS + 1, [{"id": 1, "v": "a"}]), TS + 1, 0, {})
    query(settings, f"INSERT INTO `{db}`.`c` VALUES (7, 1)")
    # A replace would delete parent 1 first, and the cascade its child.
    target.apply_batch(upsert(db, "p", TS + 2, [{"id": 1, "v": "b"}]), TS + 2, 0, {})
    assert query(settings, f"SELECT id, p FROM `{db}`.`c`") == [(7, 1)]
    assert query(settings, f"SELECT v FROM `{db}`.`p`") == [("b",)]
    assert staged == [1, 1]


def test_a_table_with_triggers_sees_updates_not_deletes(settings: Settings, db: str) -> None:
    query(settings, f"CREATE TABLE `{db}`.`t` (id INT PRIMARY KEY, v VARCHAR(20))")
    query(settings, f"CREATE TABLE `{db}`.`deleted` (id INT)")
    query(
        settings,
        f"CREATE TRIGGER `{db}`.`gone` AFTER DELETE ON `{db}`.`t` FOR EACH ROW "
        f"INSERT INTO `{db}`.`deleted` VALUES (OLD.id)",
    )
    target = target_for(settings, db)
    target.apply_batch(upsert(db, "t", TS + 1, [{"id": 1, "v": "a"}]), TS + 1, 0, {})
    target.apply_batch(upsert(db, "t", TS + 2, [{"id": 1, "v": "b"}]), TS + 2, 0, {})
    assert query(settings, f"SELECT COUNT(*) FROM `{db}`.`deleted`") == [(0,)]
    assert query(settings, f"SELECT v FROM `{db}`.`t`") == [("b",)]


def test_a_column_the_batch_does_not_set_keeps_its_value(settings: Settings, db: str) -> None:
    query(settings, f"CREATE TABLE `{db}`.`t` (id INT PRIMARY KEY, v VARCHAR(20), w INT)")
    query(settings, f"INSERT INTO `{db}`.`t` VALUES (1, 'a', 42)")
    target = target_for(settings, db)
    staged = staged_before_commit(target, db)
    target.apply_batch(upsert(db, "t", TS + 1, [{"id": 1, "v": "b"}]), TS + 1, 0, {})
    assert query(settings, f"SELECT id, v, w FROM `{db}`.`t`") == [(1, "b", 42)]
    assert staged == [1]


def test_table_facts_read_keys_foreign_keys_and_triggers(settings: Settings, db: str) -> None:
    query(
        settings, f"CREATE TABLE `{db}`.`p` (a INT, b INT, u INT, PRIMARY KEY (a, b), UNIQUE (u))"
    )
    query(settings, f"CREATE TABLE `{db}`.`c` (id INT PRIMARY KEY, a INT, b INT, "
          f"FOREIGN KEY (a, b) REFERENCES `{db}`.`p` (a, b))")  # fmt: skip
    query(
        settings, f"CREATE TRIGGER `{db}`.`tr` BEFORE INSERT ON `{db}`.`c` FOR EACH ROW SET @x = 1"
    )
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        parent = table_facts(cursor, db, "p")
        child = table_facts(cursor, db, "c")
        # What the sink reads once a schema for its tables' facts.
        assert referenced_tables(cursor, db) == {"p"}
        assert table_facts(cursor, db, "p", frozenset()).referenced is False
    assert parent.unique_keys == {frozenset({"a", "b"}), frozenset({"u"})}
    assert (parent.referenced, parent.triggers) == (True, False)
    assert child.unique_keys == {frozenset({"id"})}
    assert (child.referenced, child.triggers) == (False, True)


def test_the_facts_of_many_tables_at_once_equal_each_tables_own(
    settings: Settings, db: str
) -> None:
    tables = {
        "p": "a INT, b INT, u INT, PRIMARY KEY (a, b), UNIQUE (u)",
        "c": f"id INT PRIMARY KEY, a INT, b INT, g INT AS (id + 1), "
        f"FOREIGN KEY (a, b) REFERENCES `{db}`.`p` (a, b)",
        "n": "x INT, y TEXT",
        "N": "z INT PRIMARY KEY",
        "pair": "a INT NOT NULL, b INT NOT NULL, v INT, UNIQUE (a, b)",
        "plain": "id INT PRIMARY KEY, k INT, INDEX (k)",
        "led": "id INT PRIMARY KEY, x INT, UNIQUE (id, x)",
    }
    for name, body in tables.items():
        query(settings, f"CREATE TABLE `{db}`.`{name}` ({body})")
    query(
        settings, f"CREATE TRIGGER `{db}`.`tr` BEFORE INSERT ON `{db}`.`c` FOR EACH ROW SET @x = 1"
    )
    names = [*tables, "missing"]
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        referenced = referenced_tables(cursor, db)
        triggered = triggered_tables(cursor, db)
        each = {name: table_columns(cursor, db, name) for name in names}
        columns = tables_columns(cursor, db, names)
        whole = schema_columns(cursor, db)
        facts = tables_facts(cursor, db, columns, referenced, triggered)
        exact = {name: table_facts(cursor, db, name, referenced) for name in columns}
    assert columns == {name: found for name, found in each.items() if found}
    assert whole == columns
    # A unique key led by a primary key column is missed (its rows go through staging)...
    assert exact.pop("led").unique_keys == {frozenset({"id"}), frozenset({"id", "x"})}
    assert facts.pop("led").unique_keys == {frozenset({"id"})}
    # ... every other fact is each table's own.
    assert facts == exact
    assert facts["c"].triggers and facts["p"].referenced
    assert facts["pair"].unique_keys == {frozenset({"a", "b"})}
    assert [c.name for c in columns["c"] if c.generated] == ["g"]


def test_a_table_loaded_in_place_gets_no_staging_table(settings: Settings, db: str) -> None:
    query(settings, f"CREATE TABLE `{db}`.`t` (id INT PRIMARY KEY, v VARCHAR(20))")
    query(settings, f"CREATE TABLE `{db}`.`k` (id INT PRIMARY KEY, v VARCHAR(20))")
    target = target_for(settings, db)
    target.apply_batch(upsert(db, "t", TS + 1, [{"id": 1, "v": "a"}]), TS + 1, 0, {})
    meta = f"SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{db}_meta'"
    # The meta database holds the checkpoint and the split position, no staging table.
    assert query(settings, meta) == [(2,)]
    deletes = plan_batch([RowChange(TS + 2, db, "t", Op.DELETE, COLUMNS, None, {"id": 1})])
    target.apply_batch(deletes, TS + 2, 0, {})
    assert query(settings, meta) == [(2,)]
    # Through staging, a table's first batch makes its staging table.
    target_for(settings, db, load_in_place=False).apply_batch(
        upsert(db, "k", TS + 3, [{"id": 1, "v": "a"}]), TS + 3, 0, {}
    )
    assert query(settings, meta) == [(3,)]
    assert query(settings, f"SELECT id, v FROM `{db}`.`t`") == []


@pytest.mark.parametrize("rows", [1, loaders.VALUES_MAX_ROWS, loaders.VALUES_MAX_ROWS + 1])
def test_few_rows_go_as_values_many_by_load_data_with_the_same_result(
    settings: Settings, db: str, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    tables = ["a", "b", "c"]
    for table in tables:
        query(settings, f"CREATE TABLE `{db}`.`{table}` (id INT PRIMARY KEY, v VARCHAR(20))")
    sent: list[str] = []
    run = loaders.run_statements

    def counted(cursor: Any, dialect: Any, statements: list[str]) -> None:
        sent.extend(statements)
        run(cursor, dialect, statements)

    monkeypatch.setattr("spark_sink.load.merge.run_statements", counted)
    target = target_for(settings, db)
    # A quote and a backslash, written into the statement.
    first = [{"id": i, "v": f"'{i}\\"} for i in range(rows)]
    plans = [p for t in tables for p in upsert(db, t, TS + 1, first)]
    target.apply_batch(plans, TS + 1, 0, {})
    # A statement a table, or none past the rows a statement takes.
    assert len(sent) == (0 if rows > loaders.VALUES_MAX_ROWS else 3)
    again = [{"id": i, "v": f"v{i}"} for i in range(0, rows, 2)]
    target.apply_batch([p for t in tables for p in upsert(db, t, TS + 2, again)], TS + 2, 0, {})
    expected = [(i, f"v{i}" if i % 2 == 0 else f"'{i}\\") for i in range(rows)]
    for table in tables:
        assert query(settings, f"SELECT id, v FROM `{db}`.`{table}` ORDER BY id") == expected
    assert len(sent) == (3 if rows > loaders.VALUES_MAX_ROWS else 6)
    assert all(s.startswith("REPLACE INTO") for s in sent)


def test_a_keyless_table_appends_its_copies_and_stages_only_its_deletes(
    settings: Settings, db: str
) -> None:
    query(settings, f"CREATE TABLE `{db}`.`n` (a INT, b VARCHAR(8))")
    columns = {"a": column_type(3, NULLABLE), "b": column_type(15, NULLABLE)}
    target = target_for(settings, db)
    staged = staged_before_commit(target, db)

    def change(ts: int, op: Op, new: Any = None, old: Any = None) -> RowChange:
        image = {"a": new[0], "b": new[1]} if new else None
        before = {"a": old[0], "b": old[1]} if old else None
        return RowChange(ts, db, "n", op, columns, image, before)

    x, y, z = (1, "x"), (2, None), (3, "z")
    target.apply_batch(
        plan_batch([change(TS + 1, Op.INSERT, x)] * 3 + [change(TS + 1, Op.INSERT, y)]),
        TS + 1,
        0,
        {},
    )
    # One copy of x out, y becomes z, one more z: the delete images are staged, the copies appended.
    batch = [
        change(TS + 2, Op.DELETE, old=x),
        change(TS + 2, Op.UPDATE, z, y),
        change(TS + 2, Op.INSERT, z),
    ]
    target.apply_batch(plan_batch(batch), TS + 2, 0, {})
    rows = query(settings, f"SELECT a, b, COUNT(*) FROM `{db}`.`n` GROUP BY a, b ORDER BY a")
    assert rows == [(1, "x", 2), (3, "z", 2)]
    assert staged == [0, 2]


def test_a_foreign_key_made_by_a_ddl_stops_its_parent_loading_in_place(
    settings: Settings, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    query(settings, f"CREATE TABLE `{db}`.`p` (id INT PRIMARY KEY, v VARCHAR(20))")
    reads = []
    read = referenced_tables

    def counted(cursor: Any, schema: str) -> frozenset[str]:
        reads.append(schema)
        return read(cursor, schema)

    monkeypatch.setattr("spark_sink.load.staging_tables.referenced_tables", counted)
    target = target_for(settings, db)
    staged = staged_before_commit(target, db)
    target.apply_batch(upsert(db, "p", TS + 1, [{"id": 1, "v": "a"}]), TS + 1, 0, {})
    # A DDL that makes no foreign key: the referenced tables are not read again.
    plain = "ALTER TABLE p ADD COLUMN n INT"
    query(settings, f"ALTER TABLE `{db}`.`p` ADD COLUMN n INT")
    target.tables.forget_layouts(foreign_keys=may_change_foreign_keys(plain))
    columns = {**COLUMNS, "n": column_type(3, NULLABLE)}
    target.apply_batch(
        upsert(db, "p", TS + 2, [{"id": 2, "v": "b", "n": 1}], columns), TS + 2, 0, {}
    )
    assert reads == [db] and staged == [0, 0]
    child = "CREATE TABLE c (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES p (id))"
    query(settings, child.replace("TABLE c", f"TABLE `{db}`.c").replace("ES p", f"ES `{db}`.p"))
    query(settings, f"INSERT INTO `{db}`.c VALUES (1, 1)")
    target.tables.forget_layouts(foreign_keys=may_change_foreign_keys(child))
    target.apply_batch(
        upsert(db, "p", TS + 3, [{"id": 1, "v": "c", "n": 2}], columns), TS + 3, 0, {}
    )
    # Read again, p is a parent now: its row is upserted through staging, its child kept.
    assert reads == [db, db] and staged == [0, 0, 1]
    assert query(settings, f"SELECT id, p FROM `{db}`.c") == [(1, 1)]
    assert query(settings, f"SELECT id, v, n FROM `{db}`.p ORDER BY id") == [
        (1, "c", 2), (2, "b", 1),
    ]  # fmt: skip
