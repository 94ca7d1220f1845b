"""Redis memory per staged row: a worker stages N rows of the workload (workload/__init__.py, 10
columns), no sink applies them, and Redis's ``used_memory`` (INFO memory) and the pipeline's keys'
``MEMORY USAGE`` are read before and after.

Two shapes: one commit ts per row (nothing packs into one member with another transaction), and
transactions of ``--txn-rows`` rows sharing a commit ts (rows packed into members of up to
MEMBER_ROWS rows / MEMBER_BYTES).

    python -m benchmarks.bench_redis_memory [--rows N] [--txn-rows 20]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from dataclasses import replace

from benchmarks import script
from benchmarks.bench_e2e import spawn, stop
from benchmarks.topics import delete_topics
from config.settings import Settings, load_settings
from core.redis_client import redis_client
from core.staging import Keys, Staging
from ticdc_sink.produce import history_messages, send
from ticdc_sink.scenario import Transaction
from workload import make_rows

PARTITIONS = 4


def staged(rows: int, txn_rows: int) -> list[Transaction]:
    """``rows`` rows of the workload in transactions of ``txn_rows`` rows each."""
    changes = make_rows(rows)
    history = []
    for first in range(0, rows, txn_rows):
        ts = changes[first].commit_ts
        part = [replace(change, commit_ts=ts) for change in changes[first : first + txn_rows]]
        history.append(Transaction(ts, part))
    return history


def measure(settings: Settings, rows: int, txn_rows: int) -> tuple[float, float, float]:
    """Bytes of Redis per staged row: by ``used_memory``, by the pipeline's keys, and as the
    staging counts them against ``TICDC_SINK_MAX_STAGED_BYTES``."""
    name = f"bench_redis_{uuid.uuid4().hex[:8]}"
    configured = settings.updated({"group": name, "topics": (name,)})
    client = redis_client(configured)
    messages, final = history_messages(staged(rows, txn_rows), "open", PARTITIONS)
    asyncio.run(send(configured, name, PARTITIONS, messages))
    before = int(client.info("memory")["used_memory"])
    worker = spawn(configured, "worker")
    staging = Staging(client, name)
    try:
        deadline = time.monotonic() + 600
        while (staging.global_resolved_ts() or 0) < final:
            assert worker.poll() is None and time.monotonic() < deadline, "staging stopped"
            time.sleep(0.5)
        after = int(client.info("memory")["used_memory"])
        keys = list(client.scan_iter(Keys(name).pattern))
        usage = sum(int(client.memory_usage(key, samples=0) or 0) for key in keys)
        counted = staging.staged_totals()[1]
    finally:
        stop([worker])
        for key in client.scan_iter(Keys(name).pattern):
            client.delete(key)
        asyncio.run(delete_topics(configured, [name]))
    return (after - before) / rows, usage / rows, counted / rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--txn-rows", type=int, default=20)
    args = parser.parse_args()
    settings = load_settings()
    print(f"{args.rows:,} rows of the 10-column workload, {PARTITIONS} partitions, Open Protocol")
    print(
        "| rows a commit ts | used_memory a row | MEMORY USAGE of the keys a row "
        "| staged bytes a row (MAX_STAGED_BYTES) |"
    )
    print("|---|---|---|---|")
    for txn_rows in (1, args.txn_rows):
        used, keys, counted = measure(settings, args.rows, txn_rows)
        print(f"| {txn_rows} | {used:.0f} B | {keys:.0f} B | {counted:.0f} B |")


if __name__ == "__main__":
    script.run(main)
