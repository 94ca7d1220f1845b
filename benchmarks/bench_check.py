"""`ticdc-sink check` of a table of 1M rows, beside the floor: a plain SELECT of both tables.

A table of ``--rows`` rows (BIGINT key, VARCHAR, INT, DECIMAL, DATETIME) is written to a database
of its own on the upstream TiDB and the same rows to the downstream, with the pipeline's
checkpoint at a ts past the upstream's last commit, as the sink would have left them. Then, each
as a process of its own, timed with its peak RSS (``wait4``'s ``ru_maxrss``):

- ``floor``: ``SELECT`` every column of the table on both servers, rows streamed and dropped;
- ``check``: ``ticdc-sink check`` of that table (``--chunk-rows`` 10,000, then 50,000).

    python -m benchmarks.bench_check [--rows 1000000] [--upstream mysql://root@127.0.0.1:4000/]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

from benchmarks import script
from config.settings import Downstream, Settings, load_settings
from spark_sink.db.checkpoint import CheckpointTable
from spark_sink.db.connection import connect

TABLE_DDL = (
    "CREATE TABLE {table} (id BIGINT PRIMARY KEY, v VARCHAR(32), n INT, "
    "amount DECIMAL(12,2), at DATETIME)"
)
# Rows per INSERT while the tables are written.
INSERT_ROWS = 2_000
# TiDB refuses a snapshot read without a GC safe point; the local unistore TiDB records none.
SAFE_POINT = (
    "INSERT IGNORE INTO mysql.tidb (VARIABLE_NAME, VARIABLE_VALUE, COMMENT)"
    " VALUES ('tikv_gc_safe_point', '20000101-00:00:00.000 +0000', 'ticdc-sink benchmarks')"
)


@dataclass(frozen=True)
class Run:
    what: str
    seconds: float
    rss_mb: float
    code: int


def _rows(first: int, count: int) -> list[tuple[object, ...]]:
    return [
        (i, f"value {i:010d}", i % 1000, f"{i % 100000}.{i % 100:02d}", "2026-11-28 09:00:00")
        for i in range(first, first + count)
    ]


def _fill(settings: Settings, database: str, rows: int) -> None:
    table = f"`{database}`.`t`"
    with connect(settings) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{database}`")
        cursor.execute(TABLE_DDL.format(table=table))
        for first in range(0, rows, INSERT_ROWS):
            cursor.executemany(
                f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s)",
                _rows(first, min(INSERT_ROWS, rows - first)),
            )
            conn.commit()


def _timed(what: str, command: list[str], env: dict[str, str]) -> Run:
    started = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return Run(what, time.monotonic() - started, usage.ru_maxrss / 1024, process.returncode)


def floor(upstream: str, table: str) -> None:
    """Read every row of ``table`` on both servers, streamed, and drop them."""
    import pymysql.cursors

    settings = load_settings()
    for where in (settings.updated({"downstream": Downstream.parse(upstream)}), settings):
        with (
            connect(where, cursorclass=pymysql.cursors.SSCursor) as conn,
            conn.cursor() as cursor,
        ):
            cursor.execute(f"SELECT id, v, n, amount, at FROM {table}")
            for _ in cursor:
                pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--upstream", default="mysql://root@127.0.0.1:4000/")
    parser.add_argument("--floor", metavar="TABLE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor:
        floor(args.upstream, args.floor)
        return
    base = load_settings()
    name = "bench_check_" + uuid.uuid4().hex[:8]
    settings = base.updated({"group": name, "meta_db": f"{name}_meta"})
    upstream = base.updated({"downstream": Downstream.parse(args.upstream)})
    started = time.monotonic()
    with connect(upstream, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(SAFE_POINT)
    _fill(upstream, name, args.rows)
    _fill(settings, name, args.rows)
    with connect(upstream) as conn, conn.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SELECT @@tidb_current_ts")
        ts = int(cursor.fetchone()[0])
        conn.rollback()
    with connect(settings) as conn, conn.cursor() as cursor:
        checkpoint = CheckpointTable(settings.downstream.meta_db, settings.group)
        checkpoint.create(cursor)
        checkpoint.advance(cursor, ts, 1, {})
        conn.commit()
    print(f"{args.rows} rows written to both servers in {time.monotonic() - started:.0f} s")
    env = {**os.environ, "TICDC_SINK_GROUP": name, "TICDC_SINK_META_DB": f"{name}_meta"}
    table = f"`{name}`.`t`"
    reader = [sys.executable, "-m", "benchmarks.bench_check", "--upstream", args.upstream]
    check = [sys.executable, "-m", "ticdc_sink", "check", "--upstream", args.upstream]
    runs = [
        _timed("floor: SELECT of both tables", [*reader, "--floor", table], env),
        _timed("check, --chunk-rows 10000", [*check, "--tables", f"{name}.t"], env),
        _timed(
            "check, --chunk-rows 50000",
            [*check, "--tables", f"{name}.t", "--chunk-rows", "50000"],
            env,
        ),
    ]
    try:
        print(f"\n| {args.rows:,} rows | seconds | rows/s (one side) | peak RSS MiB | exit |")
        print("|---|---|---|---|---|")
        for run in runs:
            print(
                f"| {run.what} | {run.seconds:.1f} | {args.rows / run.seconds:,.0f} | "
                f"{run.rss_mb:.0f} | {run.code} |"
            )
    finally:
        for where in (upstream, settings):
            with connect(where, autocommit=True) as conn, conn.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
                cursor.execute(f"DROP DATABASE IF EXISTS `{name}_meta`")


if __name__ == "__main__":
    script.run(main)
