"""`ticdc-sink check` on real servers: the upstream TiDB, a MariaDB downstream written as the sink
would have written it at a commit ts TiDB reported, with its checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from config.settings import Settings
from spark_sink.db.connection import connect
from tests.ticdc_sink.check.conftest import commit, copy_rows, record_checkpoint
from ticdc_sink.check.record import read_last_check
from ticdc_sink.check.run import CheckRequest, run_check

pytestmark = pytest.mark.integration

UPSTREAM = "mysql://root@127.0.0.1:4000/"
# Every type the sink replicates with a text form of its own, and a key per kind of table.
TABLES = {
    "typed": "CREATE TABLE {db}.typed (id BIGINT UNSIGNED PRIMARY KEY, name VARCHAR(40), "
    "amount DECIMAL(12,3), at DATETIME(6), stamp TIMESTAMP(3) NULL, day DATE, span TIME(2), "
    "ratio DOUBLE, small FLOAT, raw VARBINARY(16), body BLOB, bits BIT(5), "
    "size ENUM('s','m','l'), tags SET('a','b','c'), doc JSON, note TEXT)",
    "pairs": "CREATE TABLE {db}.pairs (a INT NOT NULL, b VARCHAR(10) NOT NULL, v INT, "
    "PRIMARY KEY (a, b))",
    "bag": "CREATE TABLE {db}.bag (v INT, w VARCHAR(10))",
    "skipped": "CREATE TABLE {db}.skipped (id INT PRIMARY KEY)",
    "routed": "CREATE TABLE {db}.routed (id INT PRIMARY KEY, v INT)",
}
TYPED_ROW = (
    "INSERT INTO {db}.typed VALUES ({id}, 'n{id}', {id}.125, '2024-04-11 01:31:12.123456', "
    "'2024-04-11 01:31:12.5', '2024-04-11', '-01:02:03.25', {id}.1, 1.5, x'00ff{id:02d}', "
    "'body {id}', b'10101', 'm', 'a,c', '{{\"k\": [1, 2.5, null], \"a\": \"x{id}\"}}', NULL)"
)


def _workload(db: str, first: int, last: int) -> list[str]:
    return (
        [TYPED_ROW.format(db=db, id=i) for i in range(first, last)]
        + [
            f"INSERT INTO {db}.pairs VALUES ({i}, 'k{i}', {i}), ({i}, 'j{i}', NULL)"
            for i in range(first, last)
        ]
        + [
            f"INSERT INTO {db}.bag VALUES ({i % 3}, 'w'), ({i % 3}, 'w')"
            for i in range(first, last)
        ]
        + [f"INSERT INTO {db}.skipped VALUES ({i})" for i in range(first, last)]
        + [f"INSERT INTO {db}.routed VALUES ({i}, {i})" for i in range(first, last)]
    )


@pytest.fixture
def replica(
    upstream_db: str,
    checked: tuple[Settings, str],
    tidb_connect: Callable[..., pymysql.connections.Connection],
) -> tuple[Settings, int, str]:
    """Upstream: a transaction of rows at ts, then one more the downstream has not reached.
    Downstream: the rows as of ts (``routed`` as ``routed_copy``, ``skipped`` not at all) and
    its checkpoint at ts. The settings route and skip those tables; the downstream database."""
    db = upstream_db
    configured, down_db = checked
    settings = configured.updated(
        {
            "routes": f"{db}.routed={down_db}.routed_copy,{db}.*={down_db}.*",
            "skip_tables": f"{db}.skipped",
        }
    )
    with tidb_connect() as up, connect(settings) as down:
        with up.cursor() as cur, down.cursor() as dcur:
            for name, ddl in TABLES.items():
                cur.execute(ddl.format(db=db))
                if name != "skipped":
                    target = "routed_copy" if name == "routed" else name
                    copy = ddl.format(db=down_db).replace(f".{name} ", f".{target} ", 1)
                    dcur.execute(copy)
        ts = commit(up, _workload(db, 1, 12))
        commit(up, [f"UPDATE {db}.typed SET name = 'later' WHERE id = 1", *_workload(db, 20, 22)])
        for table in ("typed", "pairs", "bag"):
            copy_rows(up, down, f"{db}.{table}", f"{down_db}.{table}", ts)
        copy_rows(up, down, f"{db}.routed", f"{down_db}.routed_copy", ts)
        record_checkpoint(down, settings, ts)
    return settings, ts, down_db


def _request(db: str, **changes: Any) -> CheckRequest:
    fields: dict[str, Any] = {
        "upstream": UPSTREAM,
        "patterns": (f"{db}.*",),
        "chunk_rows": 4,
        "threads": 1,
        "rate_limit": None,
        "as_json": True,
        "fix_sql": None,
    }
    fields.update(changes)
    return CheckRequest(**fields)


@pytest.mark.parametrize("downstream_settings", ["mariadb", "tidb"], indirect=True)
def test_a_replica_at_its_checkpoint_matches_read_at_that_exact_ts(
    replica: tuple[Settings, int, str],
    upstream_db: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    settings, ts, down_db = replica
    metrics = tmp_path / "check.prom"
    assert run_check(settings, _request(upstream_db, threads=2, metrics_file=metrics)) == 0
    document = orjson.loads(capsys.readouterr().out)
    assert document["match"] is True
    assert document["ts"] == ts
    tables = {t["table"].split(" ")[0]: t for t in document["tables"]}
    db = upstream_db
    assert sorted(tables) == [f"{db}.bag", f"{db}.pairs", f"{db}.routed", f"{db}.typed"]
    assert tables[f"{db}.routed"]["table"] == f"{db}.routed (downstream {down_db}.routed_copy)"
    assert tables[f"{db}.typed"]["rows"] == 11
    assert tables[f"{db}.typed"]["chunks"] == 3
    assert tables[f"{db}.pairs"]["rows"] == 22
    assert tables[f"{db}.pairs"]["chunks_read_by_row"] == 0
    assert tables[f"{db}.bag"]["chunks"] == 1
    last = read_last_check(settings)
    assert last is not None and last.matched and last.ts == ts and last.tables == 4
    assert f'ticdc_sink_check_match{{pipeline="{settings.group}"}} 1.0' in metrics.read_text()


def _check(settings: Settings, db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ticdc_sink", "check", "--upstream", UPSTREAM, *args],
        env={
            **os.environ,
            "TICDC_SINK_GROUP": settings.group,
            "TICDC_SINK_META_DB": settings.downstream.meta_db,
            "TICDC_SINK_ROUTES": f"{db}.routed={db}.routed_copy",
            "TICDC_SINK_SKIP_TABLES": f"{db}.skipped",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_changed_a_deleted_and_an_added_row_are_named_by_key_and_the_fix_repairs_them(
    replica: tuple[Settings, int, str],
    upstream_db: str,
    mariadb_connect: Callable[..., pymysql.connections.Connection],
    tmp_path: Path,
) -> None:
    settings, _, _ = replica
    db = upstream_db
    with mariadb_connect() as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE {db}.typed SET amount = 9.5, doc = '[1]' WHERE id = 3")
        cur.execute(f"DELETE FROM {db}.pairs WHERE a = 5 AND b = 'j5'")
        cur.execute(f"INSERT INTO {db}.routed_copy VALUES (99, 0)")
        cur.execute(f"INSERT INTO {db}.bag VALUES (7, 'x')")
    fix = tmp_path / "fix.sql"
    result = _check(settings, db, "--tables", f"{db}.*", "--chunk-rows", "3", "--fix-sql", str(fix))
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert "key id='3': differs: amount: upstream '3.125', downstream '9.500'" in out
    assert 'doc: upstream \'{"a": "x3", "k": [1, 2.5, null]}\', downstream \'[1]\'' in out
    assert "key a='5', b='j5': missing downstream: (a='5', b='j5', v=None)" in out
    assert f"{db}.routed (downstream {db}.routed_copy): 1 rows differ" in out
    assert "key id='99': extra downstream: (id='99', v='0')" in out
    assert "row: extra downstream: (v='7', w='x')" in out
    assert out.splitlines()[-1].endswith(f"statements to review in {fix} (not run)")
    assert "DIFFER: 4 differences in 4 of 4 tables" in out
    statements = [line for line in fix.read_text().splitlines() if not line.startswith("--")]
    assert statements[0] == "SET time_zone = '+00:00';"
    assert len(statements) == 4
    with mariadb_connect() as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
        cur.execute(f"DELETE FROM {db}.bag WHERE v = 7")
    again = _check(settings, db, "--tables", f"{db}.*")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[-1].endswith(": match")


def test_a_checkpoint_past_the_gc_safe_point_says_what_to_set(
    checked: tuple[Settings, str],
    upstream_db: str,
    mariadb_connect: Callable[..., pymysql.connections.Connection],
) -> None:
    settings, _ = checked
    with connect(settings) as conn:
        record_checkpoint(conn, settings, 1 << 18)  # 1970: before the safe point the tests record
    result = _check(settings, upstream_db, "--tables", f"{upstream_db}.*")
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("ticdc-sink check: the checkpoint ts 262144 (1970-01-01T00:00:00.001Z")
    assert "older than the upstream's GC safe point (" in line
    assert "tidb_gc_life_time" in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "the following arguments are required: --upstream"),
        (["--upstream", UPSTREAM, "--chunk-rows", "0"], "0 is not a positive number"),
        (["--upstream", "http://127.0.0.1:4000/"], "--upstream 'http://127.0.0.1:4000/': must"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ticdc_sink", "check", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert says in line


def test_no_checkpoint_or_an_upstream_away_is_one_line_and_exit_1(
    checked: tuple[Settings, str], upstream_db: str
) -> None:
    settings, _ = checked
    result = _check(settings, upstream_db)
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line == (
        f"ticdc-sink check: no checkpoint downstream ({settings.downstream.meta_db}.checkpoint "
        f"of pipeline {settings.group!r}): nothing applied yet"
    )
    with connect(settings) as conn:
        record_checkpoint(conn, settings, 1 << 60)
    away = subprocess.run(
        [sys.executable, "-m", "ticdc_sink", "check", "--upstream", "mysql://root@127.0.0.1:1/"],
        env={
            **os.environ,
            "TICDC_SINK_GROUP": settings.group,
            "TICDC_SINK_META_DB": settings.downstream.meta_db,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert away.returncode == 1
    (line,) = away.stderr.splitlines()
    assert line.startswith(
        "ticdc-sink check: --upstream: cannot reach the upstream TiDB at 127.0.0.1:1 ("
    )
