"""One upstream transaction of N inserts, through a worker and the sink, against the sink of
another checkout (the code before a change) in the same run.

The transaction (Open Protocol, 4 partitions, 16-row messages, the 10-column rows of
``workload``, one commit ts, then a watermark on every partition) is produced once; each code
stages it with its own worker (its own consumer group of the one topic), then its sink applies it
with default settings (``apply --once``) into a database of its own. Per code and N: the worker's
staging time (first staged message to the watermark) and peak RSS, the sink's time (process start
to exit) and the peak RSS of its Python process and, apart, of its Spark JVM (none when nothing
loaded through Spark), and the rows the downstream holds after.

    python -m benchmarks.bench_big_txn --baseline /path/to/checkout [--rows 1000000,3000000]

``--baseline`` is a checkout of the code to compare with (``git worktree add DIR COMMIT``); the
same Python runs both. Services: Kafka, Redis and the downstream of the settings.
"""

from __future__ import annotations

import argparse
import asyncio
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

from benchmarks.topics import delete_topics
from config.settings import Settings, load_settings
from core.model import Op, Resolved, RowChange
from core.redis_client import redis_client
from core.staging import Staging
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


@dataclass
class Run:
    code: str
    rows: int
    worker_s: float
    worker_mib: float
    sink_s: float
    sink_mib: float
    jvm_mib: float
    applied: int


def rows_of(count: int, ts: int) -> Iterator[RowChange]:
    """``count`` inserts at one commit ts (the rows of ``workload.make_rows``)."""
    rng = random.Random(7)
    for i in range(count):
        image = row_image(rng, i)
        yield RowChange(ts, DB, "orders", Op.INSERT, COLUMNS, image, None)


async def produce(settings: Settings, topic: str, count: int, ts: int) -> None:
    """The transaction to a new ``topic``, a step at a time, by key to the partitions."""
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
        step: list[list[RowChange]] = [[] for _ in range(PARTITIONS)]

        async def flush() -> None:
            pending = []
            for partition, rows in enumerate(step):
                for message in codecs[partition].encode(rows):
                    sent = producer.send(topic, message.value, key=message.key, partition=partition)
                    pending.append(await sent)
                rows.clear()
            await asyncio.gather(*pending)

        for n, row in enumerate(rows_of(count, ts), 1):
            step[int(row.new["id"]) % PARTITIONS].append(row)  # type: ignore[index, arg-type]
            if n % PRODUCE_STEP == 0:
                await flush()
        await flush()
        for partition in range(PARTITIONS):
            for message in codecs[partition].encode([Resolved(ts)]):
                await producer.send(topic, message.value, key=message.key, partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


def spawn(checkout: Path, env: dict[str, str], *command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "ticdc_sink", *command],
        env={**os.environ, "PYTHONPATH": str(checkout), **env}, cwd=checkout,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
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


def run_code(settings: Settings, code: str, checkout: Path, topic: str, rows: int, ts: int) -> Run:
    """Stage the transaction with ``checkout``'s worker, then apply it with its sink."""
    group = f"{topic}_{code}"
    database = f"{DB}_{code}"
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {database}")
        cursor.execute(f"CREATE DATABASE {database}")
        cursor.execute(f"CREATE TABLE {database}.orders {TABLE}")
    env = {
        "TICDC_SINK_GROUP": group,
        "TICDC_SINK_TOPICS": topic,
        "TICDC_SINK_PROTOCOL": "open",
        "TICDC_SINK_WEB_PORT": "0",
        "TICDC_SINK_ROUTES": f"{DB}.*={database}.*",
    }
    staging = Staging(redis_client(settings), group)
    worker = spawn(checkout, env, "worker")
    worker_peak = 0.0
    try:
        while staging.staged_totals()[0] == 0:
            worker_peak = max(worker_peak, peak_mib(worker.pid))
            time.sleep(0.01)
        started = time.monotonic()
        while (staging.global_resolved_ts() or 0) < ts:
            worker_peak = max(worker_peak, peak_mib(worker.pid))
            time.sleep(SAMPLE_S)
        worker_s = time.monotonic() - started
    finally:
        stop(worker)
    started = time.monotonic()
    sink = spawn(checkout, env, "apply", "--once")
    sink_peak = jvm_peak = 0.0
    while sink.poll() is None:
        sink_peak = max(sink_peak, peak_mib(sink.pid))
        jvm = [peak_mib(child) for child in descendants(sink.pid)]
        jvm_peak = max([jvm_peak, *jvm])
        time.sleep(SAMPLE_S)
    sink_s = time.monotonic() - started
    if sink.returncode:
        raise RuntimeError(f"the {code} sink exited with {sink.returncode}")
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {database}.orders")
        applied = int(cursor.fetchone()[0])
        cursor.execute(f"DROP DATABASE {database}")
    staging.clear()
    return Run(code, rows, worker_s, worker_peak, sink_s, sink_peak, jvm_peak, applied)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,3000000,10000000", help="comma list of N")
    parser.add_argument("--baseline", type=Path, required=True, help="checkout to compare with")
    parser.add_argument("--codes", default="base,new", help="which to run: base, new or both")
    args = parser.parse_args()
    settings = load_settings()
    here = Path(__file__).resolve().parents[1]
    checkouts = {"base": args.baseline.resolve(), "new": here}
    codes = [c for c in args.codes.split(",") if c]
    runs: list[Run] = []
    for rows in (int(n) for n in args.rows.split(",")):
        topic = f"bench_big_txn_{uuid.uuid4().hex[:8]}"
        ts = START_TS + rows
        try:
            asyncio.run(produce(settings, topic, rows, ts))
            for code in codes:
                run = run_code(settings, code, checkouts[code], topic, rows, ts)
                runs.append(run)
                print(run, flush=True)
        finally:
            asyncio.run(delete_topics(settings, [topic]))
    print_table(runs)


def print_table(runs: list[Run]) -> None:
    print(
        "| rows | code | worker s | worker MiB | sink s | sink rows/s | sink Python MiB "
        "| sink JVM MiB | rows applied |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    base = {run.rows: run for run in runs if run.code == "base"}
    for run in runs:
        print(
            f"| {run.rows:,} | {run.code} | {run.worker_s:.1f} | {run.worker_mib:,.0f} "
            f"| {run.sink_s:.1f} | {run.rows / run.sink_s:,.0f} | {run.sink_mib:,.0f} "
            f"| {run.jvm_mib:,.0f} | {run.applied:,} |"
        )
    for rows, old in base.items():
        for run in runs:
            if run.code == "new" and run.rows == rows:
                print(
                    f"{rows:,} rows, new / base: sink time {run.sink_s / old.sink_s:.2f}, "
                    f"sink Python RSS {run.sink_mib / old.sink_mib:.2f}, "
                    f"worker time {run.worker_s / old.worker_s:.2f}"
                )


if __name__ == "__main__":
    main()
