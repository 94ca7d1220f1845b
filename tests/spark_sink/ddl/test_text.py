"""DDL text read by its words: how many statements it holds, and which may change what foreign
keys reference."""

from __future__ import annotations

import pytest

from spark_sink.ddl.text import may_change_foreign_keys, requoted_drop, statements


@pytest.mark.parametrize(
    "query",
    [
        "CREATE TABLE c (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES p (id))",
        "CREATE TABLE c (id INT PRIMARY KEY, p INT REFERENCES p (id))",
        "ALTER TABLE c ADD CONSTRAINT fk FOREIGN KEY (p) REFERENCES p (id)",
        "RENAME TABLE p TO q",
        "ALTER TABLE p RENAME TO q",
        "alter table p rename to q",
    ],
)
def test_a_statement_that_may_make_a_foreign_key_or_rename_a_table(query: str) -> None:
    assert may_change_foreign_keys(query)


@pytest.mark.parametrize(
    "query",
    [
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(32))",
        "ALTER TABLE t ADD COLUMN n INT",
        "CREATE TABLE `references` (`foreign` INT, `rename` INT)",
        "ALTER TABLE t ADD COLUMN v VARCHAR(8) DEFAULT 'REFERENCES'",
        "TRUNCATE TABLE t",
        "DROP TABLE t",
    ],
)
def test_a_statement_that_cannot(query: str) -> None:
    assert not may_change_foreign_keys(query)


@pytest.mark.parametrize(
    ("query", "count"),
    [
        ("CREATE TABLE t (id INT)", 1),
        ("CREATE TABLE t (id INT);", 1),
        ("CREATE TABLE t (id INT) ; ;", 1),
        ("ALTER TABLE t ADD COLUMN v VARCHAR(8) DEFAULT ';'", 1),
        ("ALTER TABLE `a;b` ADD COLUMN v INT /* ; DROP TABLE x */", 1),
        ("CREATE TABLE t (id INT); DROP TABLE u", 2),
        ("CREATE TABLE t (id INT);DROP TABLE u;", 2),
    ],
)
def test_the_statements_a_ddl_holds(query: str, count: int) -> None:
    assert statements(query) == count


def test_ticdcs_unescaped_drop_of_a_name_with_a_backtick_is_quoted_again() -> None:
    # TiCDC rebuilds DROP TABLE as "DROP TABLE `%s`.`%s`" (cdc/model/sink.go).
    rebuilt = "DROP TABLE `db`.`we`ird tab`"
    assert requoted_drop(rebuilt, "db", "we`ird tab") == "DROP TABLE `db`.`we``ird tab`"
    assert requoted_drop("DROP VIEW `d`b`.`v`", "d`b", "v") == "DROP VIEW `d``b`.`v`"
    # Upstream text, names without a backtick, or another table's: as they are.
    written = "DROP TABLE `db`.`we``ird tab`"
    assert requoted_drop(written, "db", "we`ird tab") == written
    assert requoted_drop("DROP TABLE `db`.`t`", "db", "t") == "DROP TABLE `db`.`t`"
    assert requoted_drop(rebuilt, "db", "other`") == rebuilt
