"""One worker staging Open Protocol messages from Kafka into Redis, next to decode alone.

Produces a seeded workload to a fresh 4-partition topic, runs one `ticdc-sink worker` on it, and
prints the staging rate (rows/s from the first staged row until the global resolved ts covers the
workload) and the worker's CPU per row over that time, beside the codec-only decode rate of the
same messages and the rate at which orjson.loads reads their JSON documents (keys and values),
both measured in the same run. Ratios are against orjson.loads, which no change here moves.
Target: staging at >= 0.50 of the decode-only rate. Needs `ticdc-sink services up`.

It also runs the same worker with staging replaced by counting: the rate at which Faust alone
delivers the messages, the ceiling of any staging.

    python -m benchmarks.bench_streams [--rows N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

import orjson

from benchmarks import script
from benchmarks.cpu import cpu_seconds
from benchmarks.topics import delete_topics
from config.settings import load_settings
from core.model import Resolved, RowChange
from core.redis_client import redis_client
from core.staging import Staging
from streams.codecs import KafkaMessage, codec_for
from ticdc_sink.produce import send
from workload import make_rows

PARTITIONS = 4


def _key(row: RowChange) -> int:
    image = row.new if row.new is not None else row.old
    return int((image or {})["id"])  # type: ignore[arg-type]


def _json_documents(message: KafkaMessage) -> list[bytes]:
    """The JSON documents of an Open Protocol message: its key's (after the version) and its
    value's, each length-prefixed."""
    documents = []
    for data, start in ((message.key or b"", 8), (message.value, 0)):
        at = start
        while at < len(data):
            length = int.from_bytes(data[at : at + 8], "big")
            documents.append(data[at + 8 : at + 8 + length])
            at += 8 + length
    return documents


def _deliver_only(messages: int) -> None:
    """Run the worker with each batch counted, not staged; print the seconds from the first
    batch to the last message."""
    from streams.worker import line, run, stager

    first: list[float] = []
    seen = [0]

    async def count(
        self: line.StagingLine,
        records: Sequence[stager.Record],
        acknowledge: Callable[[], Awaitable[None]],
    ) -> None:
        first[:] = first or [time.perf_counter()]
        seen[0] += len(records)
        await acknowledge()
        if seen[0] >= messages:
            # The Faust worker redirects sys.stdout into its log: write to the pipe itself.
            os.write(1, b"%f\n" % (time.perf_counter() - first[0]))

    line.StagingLine.submit = count  # type: ignore[method-assign]
    run.run_worker(load_settings())


def _time_delivery(topic: str, messages: int) -> float:
    env = {**os.environ, "TICDC_SINK_TOPICS": topic, "TICDC_SINK_GROUP": f"{topic}-deliver"}
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_streams", "--deliver-only", str(messages)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    try:
        assert child.stdout is not None
        return float(child.stdout.readline())
    finally:
        os.killpg(child.pid, signal.SIGTERM)
        child.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64_000)
    parser.add_argument("--deliver-only", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.deliver_only:
        _deliver_only(args.deliver_only)
        return
    settings = load_settings()
    topic = f"bench-streams-{uuid.uuid4().hex[:8]}"
    rows = make_rows(args.rows)
    codec = codec_for("open")
    messages: list[tuple[int, KafkaMessage]] = []
    for partition in range(PARTITIONS):
        mine = [r for r in rows if _key(r) % PARTITIONS == partition]
        messages += [(partition, m) for m in codec.encode(mine)]
        messages += [(partition, m) for m in codec.encode([Resolved(rows[-1].commit_ts)])]

    decoder = codec_for("open")
    start = time.perf_counter()
    for _, message in messages:
        decoder.decode(message.key, message.value)
    decode_rate = len(rows) / (time.perf_counter() - start)
    documents = [d for _, message in messages for d in _json_documents(message) if d]
    start = time.perf_counter()
    for document in documents:
        orjson.loads(document)
    orjson_rate = len(rows) / (time.perf_counter() - start)

    asyncio.run(send(settings, topic, PARTITIONS, messages))
    staging = Staging(redis_client(settings), topic)
    env = {**os.environ, "TICDC_SINK_TOPICS": topic, "TICDC_SINK_GROUP": topic}
    worker = subprocess.Popen(
        [sys.executable, "-m", "ticdc_sink", "worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while staging.staged_totals()[0] == 0:
            time.sleep(0.01)
        first = time.perf_counter()
        cpu_before = cpu_seconds(worker.pid)
        while (staging.global_resolved_ts() or 0) < rows[-1].commit_ts:
            time.sleep(0.01)
        stage_rate = len(rows) / (time.perf_counter() - first)
        worker_us = (cpu_seconds(worker.pid) - cpu_before) / len(rows) * 1e6
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
        staging.clear()

    try:
        deliver_rate = len(rows) / _time_delivery(topic, len(messages))
    finally:
        Staging(redis_client(settings), f"{topic}-deliver").clear()
        asyncio.run(delete_topics(settings, [topic]))
    print(
        f"{len(rows)} Open Protocol row events, 16 per message, {PARTITIONS} partitions, 1 worker"
    )
    print(f"{'path':36} {'rows/s':>10} {'ratio':>7}")
    for label, rate in [
        ("orjson.loads (same JSON documents)", orjson_rate),
        ("decode only (same messages)", decode_rate),
        ("Kafka -> worker -> Redis staging", stage_rate),
        ("Kafka -> worker, counted, not staged", deliver_rate),
    ]:
        print(f"{label:36} {rate:10,.0f} {rate / orjson_rate:7.2f}")
    print(f"staging at {stage_rate / decode_rate:.2f} of decode only")
    print(f"worker CPU while staging: {worker_us:.2f} us/row")


if __name__ == "__main__":
    script.run(main)
