"""The same row changes spread over 1, 100, 1,000 and 10,000 tables, end to end.

For each table count, on a topic, pipeline and database of its own: the CREATE TABLE of every
table is produced and applied first (its time is printed apart: one DDL a table), then the row
changes, in transactions of mixed tables, are produced and replicated by one worker and one sink.
Rows/s runs from the start of producing the rows until the checkpoint covers them. The 1-table
rate is the baseline of the same run (target: >= 0.5x at 10,000 tables). Also the peak RSS of
the sink and of the worker over the whole run of each table count. With ``--ddl-every N``, the
rows are interleaved with schema changes: after every N transactions, an ALTER TABLE of a table
picked at random (its comment: the rows stay as they are), as a changefeed of many tables meets.

With ``--connections 1,2,4,8`` each table count runs once per count of sink connections
(``TICDC_SINK_APPLY_CONNECTIONS``), each against the best plain SQL over as many connections,
each owning a share of the tables (benchmarks/raw_tables.py), in the same run.

    python -m benchmarks.bench_tables [--rows N] [--tables 1,100,1000,10000] [--ddl-every N]
        [--connections 1,2,4,8] [--downstream mysql://USER@HOST:PORT/]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import subprocess
import time
import uuid
from dataclasses import dataclass
from typing import Any

from benchmarks import script
from benchmarks.bench_e2e import rss_mb, spawn, stop
from benchmarks.downstream import add_downstream_option, server_version, settings_for
from benchmarks.raw_tables import final_rows, raw_tables_rate
from benchmarks.topics import delete_topics
from config.settings import Settings
from core.model import ColumnFlag, DDLEvent, Op, RowChange, Value, column_type
from core.sql import quote
from spark_sink.db.checkpoint import CheckpointWatch
from spark_sink.db.connection import connect
from ticdc_sink.dispatchers import Dispatcher
from ticdc_sink.produce import history_messages, send
from ticdc_sink.scenario import START_TS, Transaction

PARTITIONS = 4
# Rows of one upstream transaction, over tables picked at random.
TRANSACTION_ROWS = 20
# A share of the changes that update a row inserted earlier (the rest insert).
UPDATES = 0.25
TS_STEP = 1 << 18
# Staging tables one DROP TABLE statement names.
DROP_AT_ONCE = 500
# Rows spread over the partitions by key whatever the table count, so that one table is not one
# partition (TiCDC's default dispatcher) and every run keeps every partition busy.
BY_KEY = Dispatcher.INDEX_VALUE
COLUMNS = {
    "id": column_type(8, int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)),
    "v": column_type(15, int(ColumnFlag.NULLABLE)),
    "n": column_type(3, int(ColumnFlag.NULLABLE)),
}
TABLE_DDL = "CREATE TABLE {table} (id BIGINT PRIMARY KEY, v VARCHAR(32), n INT)"
# The schema change of --ddl-every, and TiDB's action code for it (ActionModifyTableComment).
COMMENT_DDL = "ALTER TABLE {table} COMMENT = 'change {n}'"
ACTION_MODIFY_TABLE_COMMENT = 17


@dataclass
class Run:
    tables: int
    connections: int
    ddl_s: float
    rows: int
    rows_s: float
    raw_s: float
    sink_mib: float
    worker_mib: float


def table_name(index: int) -> str:
    return f"t{index:05d}"


def ddl_history(schema: str, tables: int) -> list[Transaction]:
    """CREATE DATABASE, then one CREATE TABLE a table, each its own commit ts."""
    ts = START_TS + TS_STEP
    history = [Transaction(ts, ddl=DDLEvent(ts, schema, None, f"CREATE DATABASE {schema}", 1))]
    for index in range(tables):
        ts += TS_STEP
        name = f"{quote(schema)}.{quote(table_name(index))}"
        ddl = DDLEvent(ts, schema, table_name(index), TABLE_DDL.format(table=name), 3)
        history.append(Transaction(ts, ddl=ddl))
    return history


def row_history(
    schema: str, tables: int, rows: int, after: int, ddl_every: int = 0
) -> list[Transaction]:
    """``rows`` inserts and updates over ``tables`` tables, in transactions after ``after``;
    with ``ddl_every``, an ALTER TABLE of a random table after every that many transactions."""
    rng = random.Random(tables)
    inserted: list[list[int]] = [[] for _ in range(tables)]
    history = []
    ts = after
    made = 0
    while made < rows:
        ts += TS_STEP
        txn = Transaction(ts)
        touched: set[tuple[int, int]] = set()
        for _ in range(min(TRANSACTION_ROWS, rows - made)):
            table = rng.randrange(tables)
            image: dict[str, Value] = {"v": f"value {rng.randrange(10**9)}", "n": made}
            earlier = inserted[table]
            if earlier and rng.random() < UPDATES:
                key = rng.choice(earlier)
                if (table, key) in touched:
                    continue
                old: dict[str, Value] | None = {"id": key, "v": None, "n": None}
                op = Op.UPDATE
            else:
                key = len(earlier)
                earlier.append(key)
                old, op = None, Op.INSERT
            touched.add((table, key))
            image["id"] = key
            txn.rows.append(RowChange(ts, schema, table_name(table), op, COLUMNS, image, old))
            made += 1
        history.append(txn)
        if ddl_every and len(history) % (ddl_every + 1) == ddl_every:
            ts += TS_STEP
            name = table_name(rng.randrange(tables))
            query = COMMENT_DDL.format(table=f"{quote(schema)}.{quote(name)}", n=len(history))
            ddl = DDLEvent(ts, schema, name, query, ACTION_MODIFY_TABLE_COMMENT)
            history.append(Transaction(ts, ddl=ddl))
    return history


def wait_applied(
    watch: CheckpointWatch, ts: int, processes: list[subprocess.Popen[bytes]], peaks: list[float]
) -> None:
    """Until the checkpoint reaches ``ts``, keeping each process's peak RSS in ``peaks``."""
    while watch.applied_resolved_ts() < ts:
        for index, process in enumerate(processes):
            if process.poll() is not None:
                raise SystemExit(f"the {('sink', 'worker')[index]} exited: see its log")
            peaks[index] = max(peaks[index], rss_mb(process.pid))
        time.sleep(0.1)


def drop_staging_tables(cursor: Any, meta_db: str, group: str) -> None:
    """The staging tables pipeline ``group``'s sink made (one a table): left in the meta
    database, each run's thousands would slow every later information_schema scan."""
    cursor.execute(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (meta_db,)
    )
    names = [n for (n,) in cursor.fetchall() if n.startswith(f"stage_{group}_")]
    for first in range(0, len(names), DROP_AT_ONCE):
        part = names[first : first + DROP_AT_ONCE]
        cursor.execute("DROP TABLE " + ", ".join(f"{quote(meta_db)}.{quote(n)}" for n in part))


def measure(
    settings: Settings, tables: int, rows: int, ddl_every: int = 0, connections: int = 1
) -> Run:
    name = f"bench_tables_{uuid.uuid4().hex[:8]}"
    run = settings.updated({"group": name, "topics": (name,)})
    ddl_messages, ddl_final = history_messages(
        ddl_history(name, tables), "open", PARTITIONS, dispatcher=BY_KEY
    )
    changes = row_history(name, tables, rows, ddl_final, ddl_every)
    row_messages, final = history_messages(changes, "open", PARTITIONS, dispatcher=BY_KEY)
    processes = [spawn(run, "apply", connections), spawn(run, "worker")]
    peaks = [0.0, 0.0]
    watch = CheckpointWatch(run)
    try:
        started = time.monotonic()
        asyncio.run(send(run, name, PARTITIONS, ddl_messages))
        wait_applied(watch, ddl_final, processes, peaks)
        ddl_s = time.monotonic() - started
        started = time.monotonic()
        asyncio.run(send(run, name, PARTITIONS, row_messages))
        wait_applied(watch, final, processes, peaks)
        elapsed = time.monotonic() - started
    finally:
        watch.close()
        stop(processes)
        asyncio.run(delete_topics(settings, [name]))
        with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {quote(name)}")
            drop_staging_tables(cursor, settings.downstream.meta_db, name)
    count = sum(len(t.rows) for t in changes)
    raw = raw_tables_rate(settings, TABLE_DDL, final_rows(changes), count, connections)
    return Run(tables, connections, ddl_s, count, count / elapsed, raw, peaks[0], peaks[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--tables", default="1,100,1000,10000", help="comma list of table counts")
    parser.add_argument(
        "--ddl-every",
        type=int,
        default=0,
        metavar="N",
        help="an ALTER TABLE of a random table after every N transactions (default 0: none)",
    )
    parser.add_argument(
        "--connections", default="1", help="sink connections to run with, comma-separated"
    )
    add_downstream_option(parser)
    args = parser.parse_args()
    settings = settings_for(args.downstream)
    counts = [int(part) for part in args.tables.split(",")]
    lanes = [int(part) for part in args.connections.split(",")]
    runs = [
        measure(settings, tables, args.rows, args.ddl_every, n) for tables in counts for n in lanes
    ]
    baseline = {run.connections: run.rows_s for run in runs if run.tables == counts[0]}
    print(f"one worker, one sink, {PARTITIONS} partitions, Open Protocol, local services")
    print(f"downstream {settings.downstream.url} ({server_version(settings)})")
    print(f"{args.rows:,} row changes, {TRANSACTION_ROWS} a transaction over random tables")
    if args.ddl_every:
        print(f"an ALTER TABLE of a random table after every {args.ddl_every} transactions")
    print(
        f"{'tables':>7} {'conns':>5} {'DDL s':>8} {'rows/s':>9} {'ratio':>6} {'raw rows/s':>10} "
        f"{'/ raw':>6} {'sink MiB':>9} {'worker MiB':>11}"
    )
    for run in runs:
        print(
            f"{run.tables:7,} {run.connections:5} {run.ddl_s:8.1f} {run.rows_s:9,.0f} "
            f"{run.rows_s / baseline[run.connections]:6.2f} {run.raw_s:10,.0f} "
            f"{run.rows_s / run.raw_s:6.2f} {run.sink_mib:9.0f} {run.worker_mib:11.0f}"
        )
    print(
        f"ratio: against {counts[0]:,} table(s) on as many connections in this run (target >= "
        "0.5 at 10,000); / raw: against the best plain SQL on as many connections, each owning "
        "a share of the tables (benchmarks/raw_tables.py)"
    )


if __name__ == "__main__":
    script.run(main)
