"""Telling the downstream servers apart, the SQL each dialect writes and the errors each
classifies: text checks for every dialect (there is no MySQL 8 server here), and the statements
run on the real MariaDB and TiDB."""

from __future__ import annotations

from typing import Any

import pymysql
import pytest
from pymysql.constants import CLIENT

from config.errors import TransientApplyError
from config.settings import Settings
from spark_sink.db.connection import connect
from spark_sink.db.dialect import (
    ANY_SERVER,
    SPARK_DEFAULT_ISOLATION,
    TIDB_ISOLATION,
    TRUNCATE_MIN_ROWS,
    MariaDBDialect,
    MySQLDialect,
    Server,
    StagingCleanup,
    TiDBDialect,
    dialect_for,
    parse_version,
    server_dialect,
)
from spark_sink.load.loaders import run_statements

MYSQL_8_0_36 = dialect_for("8.0.36")
MYSQL_8_0_19 = dialect_for("8.0.19-log")
MARIADB = dialect_for("10.11.14-MariaDB-0+deb12u2")
TIDB = dialect_for("8.0.11-TiDB-v8.5.0")


@pytest.mark.parametrize(
    ("version", "server", "kind"),
    [
        ("8.0.11-TiDB-v8.4.0-this-is-a-placeholder", Server.TIDB, TiDBDialect),
        ("5.7.25-TiDB-v7.5.1", Server.TIDB, TiDBDialect),
        ("10.11.14-MariaDB-0+deb12u2", Server.MARIADB, MariaDBDialect),
        ("11.4.2-MariaDB-log", Server.MARIADB, MariaDBDialect),
        ("8.0.36", Server.MYSQL, MySQLDialect),
        ("8.4.0-commercial", Server.MYSQL, MySQLDialect),
    ],
)
def test_the_server_comes_from_its_version(version: str, server: Server, kind: type) -> None:
    dialect = dialect_for(version)
    assert (dialect.server, dialect.version, type(dialect)) == (server, version, kind)


@pytest.mark.parametrize(
    ("version", "parsed"),
    [
        ("8.0.20", (8, 0, 20)),
        ("8.0.19-log", (8, 0, 19)),
        ("8.4.0-commercial", (8, 4, 0)),
        ("9.1.0", (9, 1, 0)),
        ("5.7.44-48-log", (5, 7, 44)),
        ("8.0.11-TiDB-v8.5.0", (8, 0, 11)),
        ("unknown", (0, 0, 0)),
    ],
)
def test_a_version_is_its_first_three_numbers(version: str, parsed: tuple[int, int, int]) -> None:
    assert parse_version(version) == parsed


@pytest.mark.parametrize(
    ("version", "row_alias"),
    [("8.0.19", False), ("8.0.20", True), ("8.0.36", True), ("8.4.3", True), ("5.7.44", False)],
)
def test_mysql_upserts_name_the_new_row_from_8_0_20(version: str, row_alias: bool) -> None:
    dialect = dialect_for(version)
    sql = dialect.upsert_values("`m`.`c`", ["k", "v"], f"v = {dialect.inserted('v')}")
    if row_alias:
        assert sql == (
            "INSERT INTO `m`.`c` (`k`, `v`) VALUES (%s, %s) AS new "
            "ON DUPLICATE KEY UPDATE v = new.`v`"
        )
    else:
        assert sql == (
            "INSERT INTO `m`.`c` (`k`, `v`) VALUES (%s, %s) ON DUPLICATE KEY UPDATE v = VALUES(`v`)"
        )


def test_mysql_8_merges_staged_rows_by_the_select_alias_not_values() -> None:
    sql = MYSQL_8_0_36.upsert_staged("`d`.`t`", "`m`.`s1`", ["id", "v"], "_f")
    assert sql == (
        "INSERT INTO `d`.`t` (`id`, `v`) SELECT s.`id`, s.`v` FROM `m`.`s1` AS s "
        "WHERE s.`_f` = 0 ON DUPLICATE KEY UPDATE `id` = s.`id`, `v` = s.`v`"
    )
    assert "VALUES(" not in sql
    older = MYSQL_8_0_19.upsert_staged("`d`.`t`", "`m`.`s1`", ["id", "v"], "_f")
    assert older == MARIADB.upsert_staged("`d`.`t`", "`m`.`s1`", ["id", "v"], "_f")
    assert older == (
        "INSERT INTO `d`.`t` (`id`, `v`) SELECT `id`, `v` FROM `m`.`s1` "
        "WHERE `_f` = 0 ON DUPLICATE KEY UPDATE `id` = VALUES(`id`), `v` = VALUES(`v`)"
    )


def test_deletes_by_key_bind_every_value_and_double_percent_signs() -> None:
    for dialect in (MARIADB, TIDB, MYSQL_8_0_36):
        assert dialect.delete_by_key("`d`.`100%`", ["id"], 3) == (
            "DELETE FROM `d`.`100%%` WHERE `id` IN (%s, %s, %s)"
        )
        assert dialect.delete_by_key("`d`.`t`", ["a", "b"], 2) == (
            "DELETE FROM `d`.`t` WHERE (`a`, `b`) IN ((%s, %s), (%s, %s))"
        )


def test_keyless_deletes_match_nulls() -> None:
    sql = MARIADB.delete_staged("`d`.`t`", "`m`.`s`", ["a", "b"], "_f", "> 0")
    assert sql == (
        "DELETE t FROM `d`.`t` AS t JOIN `m`.`s` AS s ON t.`a` <=> s.`a` AND t.`b` <=> s.`b` "
        "WHERE s.`_f` > 0"
    )
    copies = MARIADB.delete_copies("`d`.`t`", "`m`.`s`", ["a"], "_f", 2, 3)
    assert copies == (
        "DELETE FROM `d`.`t` WHERE EXISTS (SELECT 1 FROM `m`.`s` AS s "
        "WHERE s.`_f` = 2 AND `d`.`t`.`a` <=> s.`a`) LIMIT 3"
    )


def test_only_tidb_empties_small_batches_staging_inside_the_batch() -> None:
    big = TRUNCATE_MIN_ROWS
    for dialect in (MARIADB, MYSQL_8_0_36, TIDB):
        for committed in (False, True):
            # A fresh key range for a big batch (TiDB: rather than MVCC versions until GC).
            assert dialect.empty_staging("`m`.`s`", big, committed) == StagingCleanup(
                "TRUNCATE TABLE `m`.`s`", in_batch=False
            )
    for committed in (False, True):
        for dialect in (MARIADB, MYSQL_8_0_36):
            assert dialect.empty_staging("`m`.`s`", big - 1, committed) == StagingCleanup(
                "DELETE FROM `m`.`s`", in_batch=False
            )
        # TiDB: no DDL and no second commit for a small batch.
        assert TIDB.empty_staging("`m`.`s`", big - 1, committed) == StagingCleanup(
            "DELETE FROM `m`.`s`", in_batch=True
        )


def test_staging_tables_and_bulk_loads() -> None:
    create = TIDB.create_staging("`m`.`s`", ["`a` int NULL"], "_f", ["`a`"])
    assert create == (
        "CREATE TABLE IF NOT EXISTS `m`.`s` (`a` int NULL, `_f` INT UNSIGNED NOT NULL, "
        "KEY tcs_probe (`a`)) ENGINE=InnoDB"
    )
    load = MARIADB.load_data_local("/tmp/it's.csv", "`m`.`s`", ["`a`", "@h1"], ["`b` = UNHEX(@h1)"])
    assert load.startswith("LOAD DATA LOCAL INFILE '/tmp/it\\'s.csv' INTO TABLE `m`.`s` ")
    assert load.endswith("LINES TERMINATED BY '\\n' (`a`, @h1) SET `b` = UNHEX(@h1)")
    replace = MARIADB.load_data_local("/tmp/x.csv", "`d`.`t`", ["`a`"], [], replace=True)
    assert replace.startswith("LOAD DATA LOCAL INFILE '/tmp/x.csv' REPLACE INTO TABLE `d`.`t` ")
    # Only where LOAD DATA joins the batch's transaction (InnoDB), not TiDB's chunked commits.
    assert MARIADB.loads_in_place() and MYSQL_8_0_36.loads_in_place()
    assert not TIDB.loads_in_place()


def test_each_server_classifies_its_own_errors() -> None:
    operational = pymysql.err.OperationalError
    killed = operational(1927, "Connection was killed")
    assert MARIADB.is_transient(killed) and not TIDB.is_transient(killed)
    idle = operational(4031, "The client was disconnected by the server")
    assert MYSQL_8_0_36.is_connection_error(idle) and not MARIADB.is_connection_error(idle)
    conflict = pymysql.err.InternalError(9007, "Write conflict")
    assert TIDB.is_transient(conflict) and not MARIADB.is_transient(conflict)
    too_large = pymysql.err.InternalError(8004, "Transaction is too large, size: 104857600")
    assert TIDB.transaction_too_large(too_large) and not TIDB.is_transient(too_large)
    assert not MARIADB.transaction_too_large(too_large)
    quota = pymysql.err.OperationalError(8175, "Your query has been cancelled due to exceeding")
    assert TIDB.transaction_too_large(quota)
    entry = pymysql.err.InternalError(8025, "entry too large, the max entry size is 6291456")
    assert not TIDB.transaction_too_large(entry)
    for dialect in (ANY_SERVER, MARIADB, TIDB, MYSQL_8_0_36):
        assert dialect.is_transient(operational(1213, "Deadlock found"))
        assert dialect.is_transient(TransientApplyError("a Spark load lost its connection"))
        assert not dialect.is_transient(pymysql.err.DataError(1406, "Data too long"))
        assert dialect.already_applied(operational(1050, "Table 't' already exists"))
        assert not dialect.already_applied(operational(1064, "syntax"))
        assert dialect.refuses_local_infile(operational(3948, "Loading local data is disabled"))


def test_only_tidb_runs_tidb_ddl_and_loads_spark_at_another_isolation_level() -> None:
    assert TIDB.runs_tidb_ddl() and not MARIADB.runs_tidb_ddl()
    assert TIDB.spark_write_options() == {"isolationLevel": TIDB_ISOLATION}
    for dialect in (MARIADB, MYSQL_8_0_36):
        assert dialect.spark_write_options() == {"isolationLevel": SPARK_DEFAULT_ISOLATION}


# --- on the real servers -------------------------------------------------------------------------


@pytest.fixture(params=["mariadb", "tidb"])
def server(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    """The settings of MariaDB, or of the local TiDB (which fails under CI when it is away)."""
    if request.param == "tidb":
        request.getfixturevalue("tidb_connect")
        tidb: Settings = request.getfixturevalue("tidb_settings")
        return tidb
    return settings


@pytest.fixture
def database(server: Settings, unique: str) -> Any:
    with connect(server, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{unique}`")
    yield unique
    with connect(server, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}`")


@pytest.mark.integration
def test_the_real_servers_are_told_apart(server: Settings) -> None:
    with connect(server, autocommit=True) as conn, conn.cursor() as cursor:
        dialect = server_dialect(cursor)
    wanted = TiDBDialect if server.downstream.url.port == 4000 else MariaDBDialect
    assert type(dialect) is wanted


@pytest.mark.integration
def test_each_dialect_statement_runs_on_its_server(server: Settings, database: str) -> None:
    table, stage = f"`{database}`.`t`", f"`{database}`.`s`"
    with connect(server) as conn, conn.cursor() as cursor:
        dialect = server_dialect(cursor)
        # Multi-table DELETE resolves its alias list in the current database, as the sink's does.
        cursor.execute(f"USE `{database}`")
        cursor.execute(f"CREATE TABLE {table} (a INT PRIMARY KEY, b VARCHAR(8))")
        cursor.execute(dialect.create_staging(stage, ["`a` int NULL", "`b` varchar(8) NULL"], "_f"))
        cursor.execute(dialect.create_staging(stage, ["`a` int NULL", "`b` varchar(8) NULL"], "_f"))
        cursor.execute(f"INSERT INTO {table} VALUES (1, 'old'), (2, 'gone'), (3, 'kept')")
        cursor.execute(f"INSERT INTO {stage} VALUES (1, 'new', 0), (4, 'added', 0), (3, 'kept', 1)")
        assert cursor.execute(dialect.upsert_staged(table, stage, ["a", "b"], "_f")) == 3
        assert cursor.execute(dialect.delete_by_key(table, ["a"], 1), [2]) == 1
        new = dialect.inserted("b")
        upsert = dialect.upsert_values(table, ["a", "b"], f"b = CONCAT({new}, '!')")
        cursor.execute(upsert, (4, "again"))
        deleted = cursor.execute(dialect.delete_staged(table, stage, ["a", "b"], "_f", "> 0"))
        assert deleted == 1
        cursor.execute(dialect.clear_staging(stage))
        conn.commit()
        cursor.execute(f"SELECT a, b FROM {table} ORDER BY a")
        assert cursor.fetchall() == ((1, "new"), (4, "again!"))
        cursor.execute(f"SELECT COUNT(*) FROM {stage}")
        assert cursor.fetchone() == (0,)


@pytest.mark.integration
def test_a_replayed_ddl_is_recognised_as_applied_on_each_server(
    server: Settings, database: str
) -> None:
    with connect(server, autocommit=True) as conn, conn.cursor() as cursor:
        dialect = server_dialect(cursor)
        cursor.execute(f"CREATE TABLE `{database}`.`t` (a INT PRIMARY KEY)")
        for replay in (
            f"CREATE TABLE `{database}`.`t` (a INT PRIMARY KEY)",
            f"ALTER TABLE `{database}`.`t` DROP COLUMN missing",
            f"DROP TABLE `{database}`.`absent`",
        ):
            with pytest.raises(pymysql.MySQLError) as raised:
                cursor.execute(replay)
            assert dialect.already_applied(raised.value), raised.value
            assert not dialect.is_transient(raised.value)


def test_only_mariadb_gets_connector_j_bulk_statements() -> None:
    assert "useBulkStmts=true" in MARIADB.jdbc_batching()
    for dialect in (TIDB, MYSQL_8_0_36):
        assert "rewriteBatchedStatements=true" in dialect.jdbc_batching()
        assert "useBulkStmts=false" in dialect.jdbc_batching()


@pytest.mark.integration
def test_a_script_runs_in_order_and_stops_at_its_first_failure(
    server: Settings, database: str
) -> None:
    table = f"`{database}`.`t`"
    rows = [f"INSERT INTO {table} VALUES ({n}, 'abc')" for n in range(1, 4)]
    # As the sink's connection: a script goes in one round trip.
    with connect(server, client_flag=CLIENT.MULTI_STATEMENTS) as conn, conn.cursor() as cursor:
        dialect = server_dialect(cursor)
        cursor.execute(f"CREATE TABLE {table} (a INT PRIMARY KEY, b VARCHAR(3))")
        cursor.execute("SET SESSION sql_mode = ''")
        run_statements(cursor, dialect, rows)
        # The strict mode was the script's only: the session has its own back.
        cursor.execute("SELECT @@SESSION.sql_mode")
        assert cursor.fetchone() == ("",)
        late = [f"INSERT INTO {table} VALUES (4, 'abc')", f"INSERT INTO {table} VALUES (5, 'abcd')"]
        with pytest.raises(pymysql.MySQLError) as raised:
            run_statements(cursor, dialect, [*late, f"INSERT INTO {table} VALUES (6, 'abc')"])
        # Strict, a value too long for its column is refused (1406), never clipped.
        assert raised.value.args[0] == 1406
        cursor.execute(f"SELECT a FROM {table} ORDER BY a")
        assert [a for (a,) in cursor.fetchall()] == [1, 2, 3, 4]
        conn.rollback()
        if isinstance(dialect, MariaDBDialect):
            # MariaDB's Oracle mode reads BEGIN ... END its own way; the compound still runs.
            cursor.execute("SET SESSION sql_mode = 'ORACLE'")
            run_statements(cursor, dialect, [f"INSERT INTO {table} VALUES (7, 'abc')"])
            cursor.execute(f"SELECT a FROM {table} WHERE a = 7")
            assert cursor.fetchall() == ((7,),)
            conn.rollback()
