"""DDL text read by its words: which statements may change what foreign keys reference."""

from __future__ import annotations

import pytest

from spark_sink.ddl.text import may_change_foreign_keys


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
