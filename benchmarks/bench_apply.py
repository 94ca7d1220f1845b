"""The sink applying 200k mixed changes to a 200k-row table, next to raw PyMySQL upserts.

Prints changes/s of ``Target.apply_batch`` (planning, a bulk load into a staging table by Spark's
JDBC writer or by the driver's LOAD DATA LOCAL, deletes by key, INSERT ... SELECT ... ON DUPLICATE
KEY UPDATE and the checkpoint in one transaction; or the deletes, then LOAD DATA LOCAL ... REPLACE
straight into the table, where the server allows) and, in the same run, of raw PyMySQL multi-row
``INSERT ... ON DUPLICATE KEY UPDATE`` of the same rows, plus the fixed cost of a 10-row batch.
Targets: ratio >= 1.0; a 10-row batch under 300 ms.
Needs `ticdc-sink services up`; ``--downstream`` points both at another server (the local TiDB:
``mysql://root@127.0.0.1:4000/``).

    python -m benchmarks.bench_apply [--rows N] [--downstream mysql://USER@HOST:PORT/]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from benchmarks import script
from benchmarks.downstream import add_downstream_option, server_version, settings_for
from core.model import Op, RowChange
from spark_sink.db.connection import connect
from spark_sink.plan import plan_batch
from spark_sink.target import Target
from workload import COLUMNS, make_rows

# A database and pipeline of this run's own: runs on one server at once do not drop each other's.
DB = f"bench_{os.getpid()}"
TABLE_DDL = f"""
CREATE TABLE {DB}.orders (
  id BIGINT PRIMARY KEY, account INT, name VARCHAR(64), amount DECIMAL(20,2),
  created_at DATETIME(6), score DOUBLE, note TEXT, flag TINYINT, counter BIGINT UNSIGNED,
  tag VARBINARY(16)
)
"""
NAMES = list(COLUMNS)
UPSERT_CHUNK = 1_000


def _upsert_sql(count: int) -> str:
    columns = ", ".join(f"`{n}`" for n in NAMES)
    marks = ", ".join(["(" + ", ".join(["%s"] * len(NAMES)) + ")"] * count)
    updates = ", ".join(f"`{n}` = VALUES(`{n}`)" for n in NAMES[1:])
    return f"INSERT INTO {DB}.orders ({columns}) VALUES {marks} ON DUPLICATE KEY UPDATE {updates}"


def raw_upsert(cursor: Any, images: list[dict[str, Any]]) -> None:
    """The baseline: multi-row upserts of ``UPSERT_CHUNK`` rows per statement."""
    for start in range(0, len(images), UPSERT_CHUNK):
        chunk = images[start : start + UPSERT_CHUNK]
        cursor.execute(_upsert_sql(len(chunk)), [img[n] for img in chunk for n in NAMES])


def reset(settings: Any, base: list[dict[str, Any]]) -> None:
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {DB}")
        cursor.execute(f"CREATE DATABASE {DB}")
        cursor.execute(TABLE_DDL)
        raw_upsert(cursor, base)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    add_downstream_option(parser)
    args = parser.parse_args()
    settings = settings_for(args.downstream).updated({"group": f"bench-apply-{os.getpid()}"})
    base = [r.new or r.old or {} for r in make_rows(args.rows, seed=1)]
    base = [dict(row, id=i) for i, row in enumerate(base)]
    changes = [
        RowChange(r.commit_ts, DB, "orders", r.op, r.columns, r.new, r.old)
        for r in make_rows(args.rows, seed=2)
    ]
    images = [c.new or c.old or {} for c in changes]

    reset(settings, base)
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        start = time.perf_counter()
        raw_upsert(cursor, images)
        raw_rate = len(images) / (time.perf_counter() - start)

    # The ways the sink loads a table: by default (into MariaDB and MySQL) LOAD DATA LOCAL ...
    # REPLACE straight into it; through a staging table, Spark's JDBC writer (from
    # TICDC_SINK_SPARK_MIN_ROWS rows a table) or the driver's LOAD DATA LOCAL (below it).
    staged = settings.updated({"load_in_place": False})
    paths = {
        "sink, default (in place where it can)": settings,
        "sink, Spark JDBC into staging": staged,
        "sink, driver LOAD DATA into staging": staged.updated({"spark_min_rows": 10**12}),
    }
    rates = {}
    for label, configured in paths.items():
        target = Target(configured)
        # A long-running sink pays Spark's start and JIT warm-up once: measure the steady state.
        target.apply_batch(plan_batch(changes), changes[-1].commit_ts, 0, {})
        reset(settings, base)
        start = time.perf_counter()
        target.apply_batch(plan_batch(changes), changes[-1].commit_ts, 0, {})
        rates[label] = len(changes) / (time.perf_counter() - start)

    small = [
        RowChange(changes[-1].commit_ts + 1 + i, DB, "orders", Op.UPDATE, COLUMNS, images[i], None)
        for i in range(10)
    ]
    costs = []
    for attempt in range(5):
        start = time.perf_counter()
        target.apply_batch(plan_batch(small), small[-1].commit_ts + attempt, 0, {})
        costs.append(time.perf_counter() - start)

    print(f"downstream {settings.downstream.url} ({server_version(settings)})")
    print(
        f"{len(changes)} changes (inserts/updates/deletes, 10 columns) on a {len(base)}-row table"
    )
    print("each sink path: plan + load + deletes/merge + checkpoint in one transaction")
    print(f"{'path':42} {'changes/s':>10} {'ratio':>6}")
    print(f"{'raw PyMySQL multi-row upsert (baseline)':42} {raw_rate:10,.0f} {1:6.2f}")
    for label, rate in rates.items():
        print(f"{label:42} {rate:10,.0f} {rate / raw_rate:6.2f}")
    print(f"10-row batch: best {min(costs) * 1000:.0f} ms, median {sorted(costs)[2] * 1000:.0f} ms")
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {DB}")


if __name__ == "__main__":
    script.run(main)
