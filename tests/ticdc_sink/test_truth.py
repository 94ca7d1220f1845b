"""The truth comparison: a workload run into two databases compares equal, row for row as
multisets; one row changed or one identical copy missing does not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from ticdc_sink.cli import main
from ticdc_sink.truth import compare_databases, run_workload

pytestmark = pytest.mark.integration

WORKLOAD = [
    {"kind": "ddl", "sql": "CREATE DATABASE `{DB}`"},
    {
        "kind": "ddl",
        "sql": "CREATE TABLE `{DB}`.`t` (a INT, f FLOAT, b VARBINARY(4), j JSON, "
        "s SET('x','y'), bt BIT(8), d DECIMAL(10,2))",
    },
    {
        "kind": "dml",
        "sql": [
            "INSERT INTO `{DB}`.`t` VALUES (1, 0.1, X'00FF', '{\"b\": 1, \"a\": [1, 2]}', "
            "'x,y', b'101', 1.50)",
            "INSERT INTO `{DB}`.`t` VALUES (2, NULL, NULL, NULL, NULL, NULL, NULL), "
            "(2, NULL, NULL, NULL, NULL, NULL, NULL)",
        ],
    },
]


@pytest.fixture
def two_databases(unique: str, mariadb_connect: Any) -> Iterator[tuple[str, str]]:
    names = (f"{unique}_a", f"{unique}_b")
    yield names
    with mariadb_connect() as conn, conn.cursor() as cursor:
        for name in names:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")


def test_a_workload_compares_equal_to_itself_and_a_difference_shows(
    settings: Settings, two_databases: tuple[str, str], tmp_path: Path, mariadb_connect: Any
) -> None:
    workload = tmp_path / "workload.jsonl"
    workload.write_bytes(b"\n".join(orjson.dumps(step) for step in WORKLOAD))
    replica, truth = two_databases
    assert run_workload(settings, workload, replica) == 1
    args = ["verify", "--db", replica, "--truth-db", truth, "--workload", str(workload)]
    assert main(args) == 0
    with mariadb_connect() as conn, conn.cursor() as cursor:
        # The same JSON written differently is the same value.
        cursor.execute(f'UPDATE `{replica}`.`t` SET j = \'{{"a":[1,2],"b":1}}\' WHERE a = 1')
        assert compare_databases(settings, truth, replica) == []
        cursor.execute(f"DELETE FROM `{replica}`.`t` WHERE a = 2 LIMIT 1")
    report = compare_databases(settings, truth, replica)
    assert report[0] == "t: truth 3 rows, replica 2: 1 missing, 0 unexpected"
    assert main(["verify", "--db", replica, "--truth-db", truth]) == 1


def test_the_same_database_twice_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["verify", "--db", "shop", "--truth-db", "shop"]) == 1
    assert capsys.readouterr().err == (
        "ticdc-sink verify: --db and --truth-db both name 'shop': a database always matches"
        " itself\n"
    )


def test_missing_databases_are_an_error_not_a_match(
    unique: str, capsys: pytest.CaptureFixture[str], mariadb_connect: Any
) -> None:
    assert main(["verify", "--db", f"{unique}_r", "--truth-db", f"{unique}_t"]) == 1
    captured = capsys.readouterr()
    assert "match" not in captured.out
    assert captured.err.startswith(f"ticdc-sink verify: no database '{unique}_r', '{unique}_t' ")


def test_a_truth_without_tables_is_an_error_not_a_match(
    two_databases: tuple[str, str], capsys: pytest.CaptureFixture[str], mariadb_connect: Any
) -> None:
    replica, truth = two_databases
    with mariadb_connect() as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{replica}`")
        cursor.execute(f"CREATE DATABASE `{truth}`")
    assert main(["verify", "--db", replica, "--truth-db", truth]) == 1
    assert capsys.readouterr().err == (
        f"ticdc-sink verify: the truth database {truth!r} holds no table: nothing to compare"
        " the replica with\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--db", "a", "--truth-db", "b", "--expected", "x.json"],
        ["--expected", "x.json", "--workload", "w.jsonl"],
    ],
)
def test_conflicting_options_are_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", *argv]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_an_expected_state_of_no_table_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = tmp_path / "expected.json"
    expected.write_bytes(b"{}")
    assert main(["verify", "--expected", str(expected)]) == 1
    assert capsys.readouterr().err == (
        f"ticdc-sink verify: {expected} expects no table: nothing to compare\n"
    )
