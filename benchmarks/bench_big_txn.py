"""One upstream transaction of N inserts, as users meet it: the worker and the sink started
together on a changefeed's backlog, the resolved ts past the transaction; against the same N rows
in transactions of 1,000 (the baseline) in the same run.

Per N, three Open Protocol streams (4 partitions, 16-row messages, the 10-column rows of
``workload``), each produced into a topic of its own before its run:

- ``one txn``: N inserts at one commit ts, then a resolved event past it on every partition, as
  TiCDC sends one;
- ``one txn + traffic``: the same, followed by ``--then-rows`` rows in 100-row transactions with
  a resolved event past every tenth of them (what a busy upstream writes after a bulk load);
- ``1k txns`` (the baseline): the N rows in transactions of 1,000, a resolved event past every
  tenth.

Each run starts a worker and a sink (``apply``, default settings) at once, each into a database
of its own, and ends when the downstream's checkpoint reaches the stream's last resolved ts. Per
run: that time and its rows/s, the peak RSS (``VmHWM``) of the worker, of the sink's Python
process and of its Spark JVM (0 when nothing loaded through Spark), and the rows the downstream
holds; per N, each run's time over the baseline's.

    python -m benchmarks.bench_big_txn [--rows 1000000,3000000] [--then-rows 100000]
        [--downstream mysql://root@127.0.0.1:4000/]

Services: Kafka, Redis and the downstream of the settings (or ``--downstream``). Into TiDB (6.5
and later, with its default ``txn-total-size-limit``) a transaction counts against the session's
``tidb_mem_quota_query``: the run raises the global quota to :data:`TIDB_QUOTA` and puts it back.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks import script
from benchmarks.downstream import add_downstream_option, server_version, settings_for
from benchmarks.topics import delete_topics
from config.settings import Settings
from core.model import Op, Resolved, RowChange
from core.redis_client import redis_client
from core.staging import Staging
from spark_sink.db.checkpoint import CheckpointWatch
from spark_sink.db.connection import connect
from streams.codecs import codec_for
from workload import COLUMNS, START_TS, row_image

PARTITIONS = 4
DB = "bench_big_txn"
TABLE = """(
  id BIGINT PRIMARY KEY, account INT, name VARCHAR(64), amount DECIMAL(20,2),
  created_at DATETIME(6), score DOUBLE, note TEXT, flag TINYINT, counter BIGINT UNSIGNED,
  tag VARBINARY(16)
)"""
# Rows encoded and sent per step: the producer holds this many, never the transaction.
PRODUCE_STEP = 50_000
SAMPLE_S = 0.1
# The baseline's transactions, and the traffic's after the big one.
BASELINE_TXN_ROWS = 1_000
TRAFFIC_TXN_ROWS = 100
# Transactions between two resolved events (TiCDC sends one about every second).
TXNS_PER_RESOLVED = 10
# How long a run may take before it is called stuck.
RUN_TIMEOUT_S = 3_600
KINDS = ("1k txns", "one txn", "one txn + traffic")
# TiDB's session memory quota during a run: one transaction of 3M rows held ~6 GiB there.
TIDB_QUOTA = 16 << 30


@dataclass
class Run:
    kind: str
    # The N of the set of runs, and the rows this run's stream holds (N, and the traffic's).
    n: int
    rows: int
    seconds: float
    worker_mib: float
    sink_mib: float
    jvm_mib: float
    applied: int


@dataclass(frozen=True)
class Stream:
    """What a run's topic holds: (commit ts, rows) per transaction, a resolved event past every
    ``resolved_every``-th and past the last."""

    transactions: list[tuple[int, int]]
    resolved_every: int

    @property
    def rows(self) -> int:
        return sum(count for _, count in self.transactions)

    @property
    def final(self) -> int:
        """The last resolved ts: past the last transaction."""
        return self.transactions[-1][0] + 1


def stream_of(kind: str, rows: int, then_rows: int) -> Stream:
    ts = START_TS
    if kind == "1k txns":
        sizes = [BASELINE_TXN_ROWS] * (rows // BASELINE_TXN_ROWS)
        return Stream([(ts + 2 * n, size) for n, size in enumerate(sizes)], TXNS_PER_RESOLVED)
    transactions = [(ts, rows)]
    if kind == "one txn + traffic":
        after = then_rows // TRAFFIC_TXN_ROWS
        transactions += [(ts + 2 * (n + 1), TRAFFIC_TXN_ROWS) for n in range(after)]
    # The big transaction alone between two resolved events, as TiCDC's come.
    return Stream(transactions, 1 if kind == "one txn" else TXNS_PER_RESOLVED)


def rows_of(stream: Stream) -> Iterator[RowChange | Resolved]:
    """The stream's inserts (the rows of ``workload.make_rows``, keys counting up) and resolved
    events, in commit-ts order."""
    rng = random.Random(7)
    key = 0
    for n, (ts, count) in enumerate(stream.transactions, 1):
        for _ in range(count):
            yield RowChange(ts, DB, "orders", Op.INSERT, COLUMNS, row_image(rng, key), None)
            key += 1
        if n % stream.resolved_every == 0 or n == len(stream.transactions) or n == 1:
            yield Resolved(ts + 1)


async def produce(settings: Settings, topic: str, stream: Stream) -> None:
    """The stream to a new ``topic``, a step at a time: rows by key to the partitions, each
    resolved event to every partition."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from core.kafka_client import kafka_options

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    options = kafka_options(settings, linger_ms=20, max_batch_size=1 << 20, acks=1)
    producer = AIOKafkaProducer(**options)
    await producer.start()
    codecs = [codec_for("open") for _ in range(PARTITIONS)]
    try:
        step: list[list[RowChange | Resolved]] = [[] for _ in range(PARTITIONS)]
        held = 0

        async def flush() -> None:
            pending = []
            for partition, events in enumerate(step):
                for message in codecs[partition].encode(events):
                    sent = producer.send(topic, message.value, key=message.key, partition=partition)
                    pending.append(await sent)
                events.clear()
            await asyncio.gather(*pending)

        for event in rows_of(stream):
            if isinstance(event, Resolved):
                for events in step:
                    events.append(event)
                continue
            step[int(event.new["id"]) % PARTITIONS].append(event)  # type: ignore[index, arg-type]
            held += 1
            if held >= PRODUCE_STEP:
                await flush()
                held = 0
        await flush()
        await producer.flush()
    finally:
        await producer.stop()


def spawn(env: dict[str, str], log: Path, *command: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "ticdc_sink", *command],
            env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=out,
            start_new_session=True,
        )  # fmt: skip


def peak_mib(pid: int) -> float:
    """A process's peak resident set (VmHWM) so far; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0.0


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (Spark's JVM is the sink's child)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=120)


def run_stream(
    settings: Settings, kind: str, n: int, topic: str, stream: Stream, logs: Path
) -> Run:
    """A worker and a sink started together on ``topic``, until the checkpoint reaches the
    stream's last resolved ts."""
    group = f"{topic}_run"
    database = f"{DB}_{uuid.uuid4().hex[:6]}"
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {database}")
        cursor.execute(f"CREATE TABLE {database}.orders {TABLE}")
    env = {
        "TICDC_SINK_GROUP": group,
        "TICDC_SINK_TOPICS": topic,
        "TICDC_SINK_PROTOCOL": "open",
        "TICDC_SINK_WEB_PORT": "0",
        "TICDC_SINK_ROUTES": f"{DB}.*={database}.*",
    }
    pipeline = settings.updated({"group": group})
    started = time.monotonic()
    worker = spawn(env, logs / f"{group}.worker.log", "worker")
    sink = spawn(env, logs / f"{group}.sink.log", "apply")
    worker_peak = sink_peak = jvm_peak = 0.0
    try:
        with CheckpointWatch(pipeline) as watch:
            while watch.applied_resolved_ts() < stream.final:
                for process in (worker, sink):
                    if process.poll() is not None:
                        raise RuntimeError(f"{kind}: a process exited; logs in {logs}")
                if time.monotonic() - started > RUN_TIMEOUT_S:
                    raise RuntimeError(f"{kind}: not applied in {RUN_TIMEOUT_S} s; logs in {logs}")
                worker_peak = max(worker_peak, peak_mib(worker.pid))
                sink_peak = max(sink_peak, peak_mib(sink.pid))
                jvm = [peak_mib(child) for child in descendants(sink.pid)]
                jvm_peak = max([jvm_peak, *jvm])
                time.sleep(SAMPLE_S)
        seconds = time.monotonic() - started
    finally:
        stop(worker)
        stop(sink)
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {database}.orders")
        applied = int(cursor.fetchone()[0])
        cursor.execute(f"DROP DATABASE {database}")
    Staging(redis_client(settings), group).clear()
    return Run(kind, n, stream.rows, seconds, worker_peak, sink_peak, jvm_peak, applied)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,3000000,10000000", help="comma list of N")
    parser.add_argument(
        "--then-rows", type=int, default=100_000, help="rows of traffic after the transaction"
    )
    parser.add_argument("--kinds", default=",".join(KINDS), help="which streams to run")
    parser.add_argument("--logs", type=Path, default=Path("/tmp"), help="the processes' logs")
    add_downstream_option(parser)
    args = parser.parse_args()
    settings = settings_for(args.downstream)
    print(f"downstream: {server_version(settings)}", flush=True)
    kinds = [kind for kind in args.kinds.split(",") if kind]
    with tidb_quota(settings, TIDB_QUOTA):
        runs = [
            run_kind(settings, kind, rows, args.then_rows, args.logs)
            for rows in (int(n) for n in args.rows.split(","))
            for kind in kinds
        ]
    print_table(runs)


@contextlib.contextmanager
def tidb_quota(settings: Settings, quota: int) -> Iterator[None]:
    """TiDB's global ``tidb_mem_quota_query`` at ``quota`` meanwhile (nothing elsewhere)."""
    if "tidb" not in server_version(settings).lower():
        yield
        return
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT @@global.tidb_mem_quota_query")
        before = int(cursor.fetchone()[0])
        cursor.execute(f"SET GLOBAL tidb_mem_quota_query = {quota}")
    try:
        yield
    finally:
        with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
            cursor.execute(f"SET GLOBAL tidb_mem_quota_query = {before}")


def run_kind(settings: Settings, kind: str, rows: int, then_rows: int, logs: Path) -> Run:
    """One stream produced into a topic of its own, run, and the topic deleted."""
    stream = stream_of(kind, rows, then_rows)
    topic = f"bench_big_txn_{uuid.uuid4().hex[:8]}"
    try:
        asyncio.run(produce(settings, topic, stream))
        run = run_stream(settings, kind, rows, topic, stream, logs)
    finally:
        asyncio.run(delete_topics(settings, [topic]))
    print(run, flush=True)
    return run


def print_table(runs: list[Run]) -> None:
    print(
        "| rows | stream | s | rows/s | time / 1k txns | worker MiB | sink Python MiB "
        "| sink JVM MiB | rows applied |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    baseline = {run.n: run for run in runs if run.kind == "1k txns"}
    for run in runs:
        base = baseline.get(run.n)
        ratio = f"{run.seconds / base.seconds:.2f}" if base else "-"
        print(
            f"| {run.rows:,} | {run.kind} | {run.seconds:.1f} | {run.rows / run.seconds:,.0f} "
            f"| {ratio} | {run.worker_mib:,.0f} | {run.sink_mib:,.0f} | {run.jvm_mib:,.0f} "
            f"| {run.applied:,} |"
        )


if __name__ == "__main__":
    script.run(main)
