"""TiDB-only DDL syntax made safe for MySQL/MariaDB: on real TiDB DDL texts, then run on MariaDB."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from spark_sink.ddl.tidb_syntax import mysql_safe

# (TiDB DDL as users write it, what a MySQL downstream gets).
CLAUSES = [
    (
        "CREATE TABLE t (id BIGINT AUTO_RANDOM PRIMARY KEY, v INT)",
        "CREATE TABLE t (id BIGINT  PRIMARY KEY, v INT)",
    ),
    (
        "CREATE TABLE t (id BIGINT AUTO_RANDOM(5, 54), PRIMARY KEY (id) CLUSTERED)",
        "CREATE TABLE t (id BIGINT , PRIMARY KEY (id) )",
    ),
    (
        "CREATE TABLE t (id INT PRIMARY KEY NONCLUSTERED) SHARD_ROW_ID_BITS=4 PRE_SPLIT_REGIONS=2",
        "CREATE TABLE t (id INT PRIMARY KEY )",
    ),
    (
        "CREATE TABLE t (id INT) ENGINE=InnoDB, SHARD_ROW_ID_BITS = 4, COMMENT='c'",
        "CREATE TABLE t (id INT) ENGINE=InnoDB, COMMENT='c'",
    ),
    (
        "CREATE TABLE t (id INT, at DATETIME) TTL = `at` + INTERVAL 1 DAY TTL_ENABLE = 'OFF' "
        "TTL_JOB_INTERVAL = '1h' COMMENT 'x'",
        "CREATE TABLE t (id INT, at DATETIME)    COMMENT 'x'",
    ),
    ("CREATE TABLE t (id INT) PLACEMENT POLICY=p1", "CREATE TABLE t (id INT)"),
    ("CREATE TABLE t (id INT) PLACEMENT POLICY `p1` AUTO_ID_CACHE 1", "CREATE TABLE t (id INT)"),
    ("ALTER TABLE t PLACEMENT POLICY p1, ADD COLUMN c INT", "ALTER TABLE t  ADD COLUMN c INT"),
    ("ALTER TABLE t ADD COLUMN c INT, SHARD_ROW_ID_BITS=4", "ALTER TABLE t ADD COLUMN c INT"),
]
# Statements that are a TiDB feature only: nothing runs downstream.
TIDB_ONLY = [
    "ALTER TABLE t CACHE",
    "ALTER TABLE `db`.`t` NOCACHE",
    "ALTER TABLE t SHARD_ROW_ID_BITS = 4",
    "ALTER TABLE t AUTO_ID_CACHE=100, PRE_SPLIT_REGIONS=2",
    "ALTER TABLE t SET TIFLASH REPLICA 1",
    "ALTER TABLE t REMOVE TTL",
    "ALTER TABLE t TTL = `created` + INTERVAL 3 MONTH",
    "ALTER TABLE t TTL_ENABLE = 'OFF'",
    "ALTER DATABASE d PLACEMENT POLICY = DEFAULT",
    'CREATE PLACEMENT POLICY p1 PRIMARY_REGION="us-east" REGIONS="us-east,us-west"',
    "DROP PLACEMENT POLICY IF EXISTS p1",
    "CREATE RESOURCE GROUP rg RU_PER_SEC = 500",
]
# Plain MySQL, and names that only look like TiDB's words: left as they are.
UNCHANGED = [
    "ALTER TABLE t ADD COLUMN shard_row_id_bits INT",
    "CREATE TABLE t (auto_random INT, `TTL` INT, placement VARCHAR(8))",
    "CREATE TABLE t (id BIGINT /*T![auto_rand] AUTO_RANDOM(5) */ PRIMARY KEY)",
    "CREATE TABLE t (id INT, PRIMARY KEY (id) /*T![clustered_index] CLUSTERED */) "
    "/*T! SHARD_ROW_ID_BITS=4 */",
    "ALTER TABLE t SET DEFAULT CHARSET utf8mb4",
    "ALTER TABLE t COMMENT 'cache'",
]


@pytest.mark.parametrize(("tidb", "mysql"), CLAUSES)
def test_tidb_only_clauses_are_taken_out(tidb: str, mysql: str) -> None:
    assert mysql_safe(tidb) == mysql


@pytest.mark.parametrize("tidb", TIDB_ONLY)
def test_a_tidb_only_statement_leaves_nothing_to_run(tidb: str) -> None:
    assert mysql_safe(tidb) is None


@pytest.mark.parametrize("query", UNCHANGED)
def test_mysql_text_is_left_as_written(query: str) -> None:
    assert mysql_safe(query) == query


def conformance_ddl(conformance: Path) -> list[str]:
    """Every distinct DDL query in the shared oracle files (real TiCDC output)."""
    found: set[str] = set()
    for path in sorted((conformance / "ticdc_encoded").glob("oracle_*.events.jsonl.gz")):
        with gzip.open(path) as lines:
            found.update(event["ddl"] for line in lines if "ddl" in (event := orjson.loads(line)))
    return sorted(found)


def test_ticdc_ddl_texts_are_kept_as_written(conformance: Path) -> None:
    queries = conformance_ddl(conformance)
    assert len(queries) >= 10
    # TiCDC already writes TiDB's own clauses as /*T![...] */ comments, which MySQL skips.
    assert any("/*T![clustered_index]" in q for q in queries)
    for query in queries:
        assert mysql_safe(query) == query


@pytest.mark.integration
def test_every_made_safe_ddl_runs_on_mariadb(
    conformance: Path, mariadb_connect: Callable[..., pymysql.connections.Connection], unique: str
) -> None:
    # The conformance DDL names its own database; TiDB-only texts run in the scratch one.
    ticdc = [q for q in conformance_ddl(conformance) if "CREATE TABLE" in q]
    databases = {q.split("`")[1] for q in ticdc}
    runs: list[str | None] = [mysql_safe(q) for q, _ in CLAUSES if q.startswith("CREATE")]
    with mariadb_connect() as conn, conn.cursor() as cursor:
        try:
            for database in (unique, *databases):
                cursor.execute(f"CREATE DATABASE `{database}_{unique}`")
            cursor.execute(f"USE `{unique}_{unique}`")
            for index, query in enumerate(runs):
                assert query is not None
                cursor.execute(query.replace("CREATE TABLE t ", f"CREATE TABLE t{index} ", 1))
            cursor.execute("CREATE TABLE t (id INT, at DATETIME)")
            _run_alters(cursor)
            for query in ticdc:
                safe = mysql_safe(query)
                assert safe is not None
                for database in databases:
                    safe = safe.replace(f"`{database}`.", f"`{database}_{unique}`.")
                cursor.execute(safe)
        finally:
            for database in (unique, *databases):
                cursor.execute(f"DROP DATABASE IF EXISTS `{database}_{unique}`")


def _run_alters(cursor: Any) -> None:
    for query, _ in CLAUSES:
        if query.startswith("ALTER"):
            safe = mysql_safe(query)
            assert safe is not None
            cursor.execute(safe.replace("ADD COLUMN c", "ADD COLUMN IF NOT EXISTS c"))
