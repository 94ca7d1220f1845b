"""Staging with 1, 2 and 4 workers over a 16-partition topic, and the sink's cost per row by stage.

Part 1, scaling: a seeded Open Protocol workload is produced to a fresh 16-partition topic. For
each worker count a fresh consumer group of that many `ticdc-sink worker` processes is started
and waited for (every partition assigned, a warm-up watermark staged on each), then the backlog
is produced and the staged rows/s are timed from the first staged row until the global resolved
ts covers it. The single worker is the baseline of the ratio. The CPU seconds the workers and
Redis spent per 1,000 rows say which one a bigger machine would have to feed.

Part 2, the sink by stage: the rows the single worker staged are taken through the sink's stages
in this process, each timed on its own: read from Redis (ZRANGEBYLEX pages of members, each a
run of a message's rows at one commit ts, every partition),
release (merging the partitions by commit ts, DDL barriers; read and unpack excluded), unpack
(members -> RowChange, copies dropped: one native call per run of members), plan (cut into
batches of TICDC_SINK_BATCH_ROWS, one action per key),
load (the staging tables: LOAD DATA or Spark's JDBC writer, as the settings choose; each batch
is applied once untimed first, as a running sink's JVM is warm) and merge (deletes, upserts and
the checkpoint in one transaction, staging tables emptied; a table that loads in place loads
here, so TICDC_SINK_LOAD_IN_PLACE=false splits load and merge as a staging table does). Each
with us per row and its share of the sum. TICDC_SINK_SPARK_MIN_ROWS=1000000 in the environment
keeps Spark out of the staging tables' loads.

    python -m benchmarks.bench_scale [--rows N] [--workers 1,2,4] [--staging-only]
        [--transaction-rows N]

By default every row is its own transaction: a partition's message holds 16 commit ts, and each
row is a staged member of its own. ``--transaction-rows 96`` gives a partition's 16-row message
2-3 commit ts, as bench_e2e's transactions do: 2-3 members a message.

One script for both parts, longer than a module should be: part 2 times the rows part 1 staged,
so they share the run's topic, workers and staging area.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from benchmarks import script
from benchmarks.bench_e2e import spawn, stop
from benchmarks.cpu import cpu_seconds, redis_cpu
from benchmarks.downstream import add_downstream_option, server_version, settings_for
from benchmarks.topics import delete_topics
from config.settings import Settings
from core.model import DDLEvent, Resolved, RowChange
from core.redis_client import redis_client
from core.staging import Staging
from core.staging.layout import member_row_count
from core.staging.members import Copies, member_reader, merge_by_ts
from core.staging.reader import UNPACK_CHUNK
from spark_sink.batches import PlannedBatch, planned_batches
from spark_sink.db.connection import connect
from spark_sink.interpreter import reading_ahead
from spark_sink.load.loaders import Loader, LoadPath
from spark_sink.load.staged import StagedTable
from spark_sink.target import Target
from streams.codecs import KafkaMessage, codec_for
from ticdc_sink.produce import send
from workload import make_rows

PARTITIONS = 16
DB = "bench_scale"
TABLE_DDL = f"""
CREATE TABLE {DB}.orders (
  id BIGINT PRIMARY KEY, account INT, name VARCHAR(64), amount DECIMAL(20,2),
  created_at DATETIME(6), score DOUBLE, note TEXT, flag TINYINT, counter BIGINT UNSIGNED,
  tag VARBINARY(16)
)
"""
# How long a group may take to start and settle (four Python workers on a busy 2-core machine).
GROUP_READY_S = 180.0
# Bytes per produce batch: big batches keep the producer ahead of four workers.
PRODUCE_BATCH_BYTES = 1 << 20
# The stages of the sink, in the order a row meets them.
STAGES = ("read from Redis", "release", "unpack", "plan", "load", "merge")


def workload(
    rows: int, transaction_rows: int = 1
) -> tuple[list[RowChange], list[tuple[int, KafkaMessage]]]:
    """The rows (into this benchmark's database) and their messages: by key to 16 partitions,
    16 rows to a message as TiCDC batches them, then a watermark on every partition. Each run
    of ``transaction_rows`` rows shares a commit ts (one transaction)."""
    made = make_rows(rows)
    changes = [
        RowChange(
            made[i - i % transaction_rows].commit_ts, DB, "orders", r.op, r.columns, r.new, r.old
        )
        for i, r in enumerate(made)
    ]
    codecs = [codec_for("open") for _ in range(PARTITIONS)]
    messages: list[tuple[int, KafkaMessage]] = []
    for partition in range(PARTITIONS):
        mine = [c for c in changes if _key(c) % PARTITIONS == partition]
        messages += [(partition, m) for m in codecs[partition].encode(mine)]
    last = changes[-1].commit_ts
    for partition in range(PARTITIONS):
        messages += [(partition, m) for m in codecs[partition].encode([Resolved(last)])]
    return changes, messages


def _key(row: RowChange) -> int:
    image = row.new if row.new is not None else row.old
    return int((image or {})["id"])  # type: ignore[arg-type]


def warm_up_marks(before: int) -> list[tuple[int, KafkaMessage]]:
    """A watermark just before the workload on every partition: staged once a worker owns it."""
    codec = codec_for("open")
    return [(p, m) for p in range(PARTITIONS) for m in codec.encode([Resolved(before)])]


@dataclass
class StagingRun:
    workers: int
    rows: int
    seconds: float
    worker_cpu: float
    redis_cpu: float
    # Seconds the producer took to send the backlog (it runs while the workers stage).
    producing: float

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


def stage_with(
    settings: Settings, topic: str, workers: int, changes: list[RowChange],
    messages: list[tuple[int, KafkaMessage]],
) -> tuple[StagingRun, Staging]:  # fmt: skip
    """``workers`` worker processes of a fresh group stage the backlog; the timed run."""
    group = topic
    run = settings.updated({"group": group, "topics": (topic,)})
    client = redis_client(run)
    staging = Staging(client, group)
    processes = [spawn(run, "worker") for _ in range(workers)]
    produced: list[float] = []
    try:
        # The group settles first (every worker assigned its share, each partition's warm-up
        # watermark staged): a rebalance in the middle would be timed as staging.
        waited = time.monotonic() + GROUP_READY_S
        while asyncio.run(_members(run, group)) < workers or len(staging.watermarks()) < PARTITIONS:
            if time.monotonic() > waited:
                raise RuntimeError(f"{workers} workers did not settle in {GROUP_READY_S:.0f} s")
            time.sleep(0.5)
        while any(mark is None for mark in staging.watermarks().values()):
            time.sleep(0.05)
        cpu_before = sum(cpu_seconds(p.pid) for p in processes)
        redis_before = redis_cpu(client)
        # Produced while the workers stage (they would start on a backlog before settling);
        # the producer's own rate is printed beside, the ceiling of this measure.
        producer = threading.Thread(target=_produce, args=(run, topic, messages, produced))
        producer.start()
        while staging.staged_totals()[0] == 0:
            time.sleep(0.005)
        started = time.monotonic()
        last = changes[-1].commit_ts
        while (staging.global_resolved_ts() or 0) < last:
            time.sleep(0.01)
        seconds = time.monotonic() - started
        worker_cpu = sum(cpu_seconds(p.pid) for p in processes) - cpu_before
        redis_spent = redis_cpu(client) - redis_before
        producer.join()
    finally:
        stop(processes)
    result = StagingRun(workers, len(changes), seconds, worker_cpu, redis_spent, produced[0])
    return result, staging


def _produce(
    settings: Settings, topic: str, messages: list[tuple[int, KafkaMessage]], took: list[float]
) -> None:
    started = time.monotonic()
    asyncio.run(_send_fast(settings, topic, messages))
    took.append(time.monotonic() - started)


async def _send_fast(
    settings: Settings, topic: str, messages: list[tuple[int, KafkaMessage]]
) -> None:
    """``messages`` to the existing ``topic``, in order per partition, in big batches without
    awaiting each: the produce command's settings (idempotent, small batches) send ~17k rows/s,
    slower than one worker stages."""
    from aiokafka import AIOKafkaProducer

    from core.kafka_client import kafka_options

    options = kafka_options(settings, linger_ms=20, max_batch_size=PRODUCE_BATCH_BYTES, acks=1)
    producer = AIOKafkaProducer(**options)
    await producer.start()
    try:
        sent = [
            await producer.send(topic, message.value, key=message.key, partition=partition)
            for partition, message in messages
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def _members(settings: Settings, group: str) -> int:
    """Members of ``group`` that hold an assignment once the group is stable (else 0)."""
    from aiokafka.admin import AIOKafkaAdminClient

    from core.kafka_client import kafka_options

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        responses = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    for response in responses:
        for described in response.groups:
            # (error_code, group_id, state, protocol_type, protocol, members, ...)
            if described[1] == group and described[2] == "Stable":
                return len(described[5])
    return 0


@dataclass
class StageTimes:
    """Seconds spent per stage."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    # Redis's own CPU seconds for the sink's reads and its trim (the whole server's: neighbours
    # on a shared Redis add theirs).
    redis: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def timing(self, stage: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - started

    def timed(self, stage: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self.timing(stage):
                return call(*args, **kwargs)

        return wrapper


def profile_sink(settings: Settings, staging: Staging, client: Any) -> tuple[StageTimes, int]:
    """The staged rows through each of the sink's stages, one stage at a time."""
    clock = StageTimes()
    resolved = staging.global_resolved_ts() or 0
    steps, rows = read_ahead_stages(settings, staging, clock, resolved, client)
    target = Target(settings.updated({"group": staging.keys.pipeline}))
    batches = [step for step in steps if isinstance(step, PlannedBatch)]
    # A running sink has started Spark before it leads, and its JVM is warm after a few batches:
    # every batch is applied once untimed, then again (from an emptied table) timed.
    for batch in batches:
        target.apply_batch(batch.plans, batch.upto, 0, {})
    reset_downstream(settings)
    # The loads are timed inside the apply; the rest of the apply is the merge transaction.
    loader_for = target.batches.loader

    def timed_loader(path: LoadPath) -> Loader:
        return TimedLoader(loader_for(path), clock)

    target.batches.loader = timed_loader  # type: ignore[method-assign]
    for batch in batches:
        started = time.perf_counter()
        target.apply_batch(batch.plans, batch.upto, 0, {})
        clock.seconds["merge"] += time.perf_counter() - started
    clock.seconds["merge"] -= clock.seconds["load"]
    redis_before = redis_cpu(client)
    staging.trim(resolved)
    clock.redis["trim"] = redis_cpu(client) - redis_before
    return clock, rows


def read_ahead_stages(
    settings: Settings, staging: Staging, clock: StageTimes, resolved: int, client: Any = None
) -> tuple[list[PlannedBatch | DDLEvent], int]:
    """What the read-ahead thread does with the rows staged up to ``resolved``, each stage timed
    on its own: read (every partition's pages), the release as a whole less read and unpack
    (merging by commit ts, DDL barriers, the hand-over), unpack (the member reader over the
    merged windows: copies collapsed, rows made), plan (batches cut and planned). Returns the
    planned steps and the rows read; with ``client``, Redis's CPU for the read in ``clock``."""
    partitions = staging.partitions()
    redis_before = redis_cpu(client) if client is not None else 0.0
    with clock.timing("read from Redis"):
        pages = [list(staging._pages(staging.keys.rows(tp), 0, resolved)) for tp in partitions]
    if client is not None:
        clock.redis["read"] = redis_cpu(client) - redis_before
    # A member holds a run of rows (core/staging/layout.py): the rows are counted, not it.
    rows = sum(member_row_count(m) for partition in pages for page in partition for m in page)
    started = time.perf_counter()
    released = list(staging.release(0, resolved))
    whole = time.perf_counter() - started
    windows = list(merge_by_ts([iter(partition) for partition in pages]))
    read_members = member_reader()
    copies = Copies()
    with clock.timing("unpack"):
        for window in windows:
            for first in range(0, len(window), UNPACK_CHUNK):
                read_members(window, first, min(first + UNPACK_CHUNK, len(window)), copies)
    clock.seconds["release"] = max(
        0.0, whole - clock.seconds["read from Redis"] - clock.seconds["unpack"]
    )
    with clock.timing("plan"):
        steps = list(planned_batches(iter(released), settings.sink.batch_rows, resolved))
    return steps, rows


def reset_downstream(settings: Settings) -> None:
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {DB}")
        cursor.execute(f"CREATE DATABASE {DB}")
        cursor.execute(TABLE_DDL)


@dataclass
class TimedLoader:
    """A loader whose loads are charged to the clock's ``load`` stage."""

    inner: Loader
    clock: StageTimes

    def load(self, cursor: Any, item: StagedTable) -> None:
        with self.clock.timing("load"):
            self.inner.load(cursor, item)


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256_000)
    parser.add_argument("--workers", default="1,2,4", help="worker counts, the first the baseline")
    parser.add_argument(
        "--staging-only", action="store_true", help="part 1 only: the workers, not the sink"
    )
    parser.add_argument(
        "--transaction-rows",
        type=int,
        default=1,
        help="rows per transaction (one commit ts); 96 puts 2-3 in a partition's 16-row message",
    )
    add_downstream_option(parser)
    args = parser.parse_args()
    settings = settings_for(args.downstream)
    counts = [int(n) for n in args.workers.split(",")]
    prefix = f"bench-scale-{uuid.uuid4().hex[:8]}"
    topics: list[str] = []
    changes, messages = workload(args.rows, args.transaction_rows)
    runs: list[tuple[StagingRun, str]] = []
    profiled: tuple[StageTimes, int, StagingRun] | None = None
    try:
        for count in counts:
            # A topic per group: the backlog is produced only once the group has settled.
            topic = f"{prefix}-w{count}"
            topics.append(topic)
            marks = warm_up_marks(changes[0].commit_ts - 1)
            asyncio.run(send(settings, topic, PARTITIONS, marks))
            run, staging = stage_with(settings, topic, count, changes, messages)
            runs.append((run, load_average()))
            if profiled is None and not args.staging_only:
                reset_downstream(settings)
                # As the sink runs its stages: the interpreter tuned as while reading ahead.
                with reading_ahead():
                    profiled = (*profile_sink(settings, staging, redis_client(settings)), run)
            staging.clear()
    finally:
        asyncio.run(delete_topics(settings, topics))
    _print_scaling(runs, args.rows, args.transaction_rows)
    if profiled is not None:
        _print_profile(settings, *profiled)


def _print_scaling(runs: list[tuple[StagingRun, str]], rows: int, transaction_rows: int) -> None:
    base = runs[0][0].rate
    print(
        f"{rows} Open Protocol row events, 16 per message, {PARTITIONS} partitions, "
        f"{transaction_rows} rows per transaction"
    )
    print(
        f"{'workers':>7} {'staged rows/s':>14} {'ratio':>6} {'worker CPU us/row':>18} "
        f"{'Redis CPU us/row':>17} {'producer rows/s':>16}  load average"
    )
    for run, load in runs:
        print(
            f"{run.workers:7d} {run.rate:14,.0f} {run.rate / base:6.2f} "
            f"{run.worker_cpu / run.rows * 1e6:18.2f} {run.redis_cpu / run.rows * 1e6:17.2f}"
            f" {run.rows / run.producing:16,.0f}  {load}"
        )


def _print_profile(settings: Settings, clock: StageTimes, rows: int, staged: StagingRun) -> None:
    us = {stage: seconds / rows * 1e6 for stage, seconds in clock.seconds.items()}
    total = sum(us.values())
    print()
    print(
        f"sink stages over the same {rows} staged rows, "
        f"batches of up to {settings.sink.batch_rows}, "
        f"downstream {server_version(settings)}"
    )
    print(f"{'stage':18} {'us/row':>8} {'share':>6}")
    for stage in STAGES:
        print(f"{stage:18} {us[stage]:8.2f} {us[stage] / total:6.0%}")
    print(f"{'total':18} {total:8.2f} {1:6.0%}")
    reading = sum(us[stage] for stage in STAGES[:4])
    applying = us["load"] + us["merge"]
    print(f"read-ahead thread (read .. plan) {1e6 / reading:10,.0f} rows/s")
    print(f"apply (load, merge)              {1e6 / applying:10,.0f} rows/s")
    print(f"both in turn                     {1e6 / total:10,.0f} rows/s")
    redis = {
        "stage": staged.redis_cpu / staged.rows * 1e6,
        **{name: seconds / rows * 1e6 for name, seconds in clock.redis.items()},
    }
    shown = ", ".join(f"{name} {value:.2f}" for name, value in redis.items())
    print(
        f"Redis CPU us/row: {shown}; one pipeline's slot saturates at "
        f"{1e6 / sum(redis.values()):,.0f} rows/s"
    )
    print(f"load average {load_average()}")


if __name__ == "__main__":
    script.run(main)
