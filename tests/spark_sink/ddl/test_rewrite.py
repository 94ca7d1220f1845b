"""Routes applied inside DDL text: each name the statement holds is rewritten, nothing else."""

from __future__ import annotations

import pytest

from config.errors import DDLError
from config.settings import parse_routes, parse_table_patterns
from spark_sink.ddl.rewrite import named_database, named_tables, route_ddl
from spark_sink.ddl.text import is_database_ddl
from spark_sink.routing import Router

ROUTER = Router(
    parse_routes("app.orders=arch.orders_v2,app.*=replica.*"), parse_table_patterns("app.tmp_*")
)

# (DDL run upstream in `app`, the database it runs in downstream, the text downstream).
CASES = [
    ("CREATE DATABASE `app`", None, "CREATE DATABASE `replica`"),
    ("CREATE DATABASE IF NOT EXISTS app", None, "CREATE DATABASE IF NOT EXISTS `replica`"),
    ("DROP DATABASE IF EXISTS app", None, "DROP DATABASE IF EXISTS `replica`"),
    ("DROP SCHEMA app", None, "DROP SCHEMA `replica`"),
    (
        "ALTER DATABASE app CHARACTER SET utf8mb4",
        None,
        "ALTER DATABASE `replica` CHARACTER SET utf8mb4",
    ),
    # Unqualified names of the routed database stay as written: the DDL runs there.
    ("CREATE TABLE t (id INT PRIMARY KEY)", "replica", "CREATE TABLE t (id INT PRIMARY KEY)"),
    (
        "CREATE TABLE `app`.`t` (id INT) /*T![clustered_index] CLUSTERED */",
        "replica",
        "CREATE TABLE `replica`.`t` (id INT) /*T![clustered_index] CLUSTERED */",
    ),
    ("CREATE TABLE app.t2 LIKE t1", "replica", "CREATE TABLE `replica`.`t2` LIKE t1"),
    (
        "ALTER TABLE `app`.`t` ADD COLUMN c INT",
        "replica",
        "ALTER TABLE `replica`.`t` ADD COLUMN c INT",
    ),
    ("ALTER TABLE app.t RENAME TO t9", "replica", "ALTER TABLE `replica`.`t` RENAME TO t9"),
    # A table routed on its own is always written in full.
    ("ALTER TABLE orders ADD c INT", "arch", "ALTER TABLE `arch`.`orders_v2` ADD c INT"),
    ("TRUNCATE TABLE orders", "arch", "TRUNCATE TABLE `arch`.`orders_v2`"),
    ("TRUNCATE TABLE app.t", "replica", "TRUNCATE TABLE `replica`.`t`"),
    (
        "RENAME TABLE app.t1 TO app.t2, orders TO old_orders",
        "replica",
        "RENAME TABLE `replica`.`t1` TO `replica`.`t2`, `arch`.`orders_v2` TO old_orders",
    ),
    (
        "DROP TABLE IF EXISTS t1, app.orders, other.t",
        "replica",
        "DROP TABLE IF EXISTS t1, `arch`.`orders_v2`, other.t",
    ),
    ("DROP INDEX idx ON orders", "arch", "DROP INDEX idx ON `arch`.`orders_v2`"),
    ("CREATE INDEX idx ON app.t (a)", "replica", "CREATE INDEX idx ON `replica`.`t` (a)"),
    (
        "CREATE TABLE c (a INT, FOREIGN KEY (a) REFERENCES orders (id))",
        "replica",
        "CREATE TABLE c (a INT, FOREIGN KEY (a) REFERENCES `arch`.`orders_v2` (id))",
    ),
    # What sqlglot reads only as a command: its subject, by tokens.
    (
        "ALTER TABLE app.t ADD PARTITION (PARTITION p1 VALUES LESS THAN (20))",
        "replica",
        "ALTER TABLE `replica`.`t` ADD PARTITION (PARTITION p1 VALUES LESS THAN (20))",
    ),
    # Skipped tables keep their names; other databases are not routed.
    ("DROP TABLE app.tmp_x", "replica", "DROP TABLE app.tmp_x"),
    ("ALTER TABLE other.t ADD c INT", "replica", "ALTER TABLE other.t ADD c INT"),
]


@pytest.mark.parametrize(("query", "home", "routed"), CASES)
def test_names_inside_ddl_are_routed(query: str, home: str | None, routed: str) -> None:
    assert route_ddl(query, "app", ROUTER, home) == routed


def test_without_routes_the_text_is_untouched() -> None:
    query = "RENAME TABLE a TO b"
    assert route_ddl(query, "app", Router(skips=parse_table_patterns("app.tmp_*")), "app") is query


def test_a_statement_whose_names_cannot_be_found_is_refused() -> None:
    with pytest.raises(DDLError, match="cannot route the DDL"):
        route_ddl(
            "ALTER TABLE t EXCHANGE PARTITION p WITH TABLE t2 PARTITION BY HASH(a)",
            "app",
            ROUTER,
            "replica",
        )


def test_database_statements_are_told_apart() -> None:
    assert is_database_ddl("CREATE DATABASE `d`")
    assert is_database_ddl("drop schema if exists d")
    assert not is_database_ddl("CREATE TABLE `database` (id INT)")
    assert not is_database_ddl("ALTER TABLE d ADD c INT")


def test_schema_routes_move_only_whole_databases() -> None:
    assert ROUTER.route_schema("app") == "replica"
    assert ROUTER.route_schema("other") == "other"
    assert Router(parse_routes("app.t=arch.t")).route_schema("app") == "app"


@pytest.mark.parametrize(
    ("query", "database"),
    [
        ("CREATE TABLE app.t (id INT PRIMARY KEY)", "app"),
        ("ALTER TABLE `my db`.`t` ADD COLUMN c INT", "my db"),
        ("RENAME TABLE t1 TO app.t2", "app"),
        ("CREATE TABLE t (id INT)", None),
        ("CREATE DATABASE app", None),
    ],
)
def test_the_database_a_ddl_names_is_found(query: str, database: str | None) -> None:
    assert named_database(query) == database


@pytest.mark.parametrize(
    ("query", "tables"),
    [
        ("CREATE TABLE t (id INT PRIMARY KEY)", {("home", "t")}),
        ("ALTER TABLE `Other`.`T` ADD COLUMN c INT", {("other", "t")}),
        ("ALTER TABLE t RENAME INDEX a TO b", {("home", "t")}),
        ("ALTER TABLE t RENAME TO u", {("home", "t"), ("home", "u")}),
        (
            "RENAME TABLE a TO c, x.b TO d",
            {("home", "a"), ("home", "c"), ("x", "b"), ("home", "d")},
        ),
        ("DROP TABLE IF EXISTS d, e", {("home", "d"), ("home", "e")}),
        ("TRUNCATE TABLE d", {("home", "d")}),
        ("CREATE INDEX i ON t (c)", {("home", "t")}),
        ("DROP INDEX i ON t", {("home", "t")}),
        ("CREATE TABLE b LIKE a", {("home", "a"), ("home", "b")}),
        # Whatever may reach any table, or cannot be read: every table.
        ("CREATE DATABASE x", None),
        ("DROP DATABASE x", None),
        ("ALTER TABLE t EXCHANGE PARTITION p WITH TABLE u", None),
        ("no statement at all", None),
    ],
)
def test_a_ddl_names_the_tables_it_may_change(
    query: str, tables: set[tuple[str, str]] | None
) -> None:
    assert named_tables(query, "home") == (None if tables is None else frozenset(tables))


def test_an_unqualified_name_without_a_home_may_be_any_table() -> None:
    assert named_tables("ALTER TABLE t ADD COLUMN c INT", None) is None
    assert named_tables("ALTER TABLE db.t ADD COLUMN c INT", None) == {("db", "t")}
