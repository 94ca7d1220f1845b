"""Redis's CPU per row change for the staged row members: a member per run of a message's rows
at one commit ts (as the worker stages them) against a member a row, in one run.

bench_scale's workload (Open Protocol, 16 partitions, 16 rows a message) is decoded natively as
the worker decodes it, then staged, read and trimmed straight through the staging area, once per
framing and round, alternating: stage (MULTI { ZADD ; stage.lua } EXEC per partition, 64
messages a transaction, as the worker batches), read (every partition's ZRANGEBYLEX pages),
release (read, merge by commit ts, unpack: the sink's whole read), trim (trim.lua). A member a
row is the baseline: each row framed as a run of one (``row_member``), through the same writer
and page sizes: what runs of rows save is the ratio. The order alternates by round; the medians
are printed. Redis's CPU is the whole server's (``INFO cpu``): on a shared Redis, neighbours add
theirs to both framings alike.

    python -m benchmarks.bench_members [--rows N] [--transaction-rows N] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks import script
from benchmarks.bench_scale import PARTITIONS, workload
from benchmarks.cpu import redis_cpu
from config.settings import load_settings
from core.packed import PackedEvents
from core.redis_client import redis_client
from core.resp import Arg, encode_args
from core.staging import Staging, TopicPartition
from core.staging.framing import FramedMessage, frame_packed
from core.staging.layout import row_member
from streams.codecs import codec_for

# Messages per staging transaction: a worker's batch of a partition.
MESSAGES_PER_STAGE = 64
PHASES = ("stage", "read", "release", "trim")
TOPIC = "bench-members"


def row_frames(messages: list[tuple[int, PackedEvents]]) -> list[FramedMessage]:
    """Each message framed with a member a row (a run of one)."""
    frames = []
    for offset, packed in messages:
        rows = packed.rows()
        members = [row_member(ts, offset, i, [row]) for i, (ts, row) in enumerate(rows)]
        args: list[Arg] = [offset, b"", len(rows), sum(map(len, members)), 0]
        pairs: list[Arg] = [0] * (2 * len(members))
        pairs[1::2] = members
        data = encode_args(args)
        frames.append(
            FramedMessage(offset, len(rows), [], len(args), data, encode_args(pairs), len(members))
        )
    return frames


def decoded(rows: int, transaction_rows: int) -> dict[int, list[tuple[int, PackedEvents]]]:
    """Per partition, its messages' (offset, natively packed rows)."""
    _, messages = workload(rows, transaction_rows)
    codec = codec_for("open")
    by_partition: dict[int, list[tuple[int, PackedEvents]]] = {}
    for partition, message in messages:
        packed = codec.decode_packed(message.key, message.value)
        if packed is not None and len(packed):
            mine = by_partition.setdefault(partition, [])
            mine.append((len(mine), packed))
    return by_partition


class Phases:
    """Wall and Redis CPU seconds per phase."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.wall = dict.fromkeys(PHASES, 0.0)
        self.redis = dict.fromkeys(PHASES, 0.0)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        cpu, started = redis_cpu(self.client), time.perf_counter()
        yield
        self.wall[name] += time.perf_counter() - started
        self.redis[name] += redis_cpu(self.client) - cpu


def one_run(client: Any, frames: dict[int, list[FramedMessage]]) -> tuple[Phases, int]:
    """``frames`` staged, read, released and trimmed in a fresh pipeline; the phases and the
    rows released."""
    staging = Staging(client, f"bench-members-{uuid.uuid4().hex[:8]}")
    staging.set_partition_count(TOPIC, PARTITIONS)
    phases = Phases(client)
    try:
        with phases.phase("stage"):
            for partition, framed in frames.items():
                tp = TopicPartition(TOPIC, partition)
                for at in range(0, len(framed), MESSAGES_PER_STAGE):
                    staging.stage_messages(tp, framed[at : at + MESSAGES_PER_STAGE])
        upto = (1 << 64) - 2
        with phases.phase("read"):
            for partition in frames:
                key = staging.keys.rows(TopicPartition(TOPIC, partition))
                for _ in staging._pages(key, 0, upto):
                    pass
        with phases.phase("release"):
            released = sum(1 for _ in staging.release(0, upto))
        with phases.phase("trim"):
            staging.trim(upto)
    finally:
        staging.clear()
    return phases, released


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256_000)
    parser.add_argument("--transaction-rows", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    client = redis_client(load_settings())
    by_partition = decoded(args.rows, args.transaction_rows)
    rows = sum(len(p) for messages in by_partition.values() for _, p in messages)
    framings: dict[str, Callable[[list[tuple[int, PackedEvents]]], list[FramedMessage]]] = {
        "a row (baseline)": row_frames,
        "runs of rows": frame_packed,
    }
    frames = {
        name: {p: frame(messages) for p, messages in by_partition.items()}
        for name, frame in framings.items()
    }
    members = {
        name: sum(f.member_count for framed in per.values() for f in framed)
        for name, per in frames.items()
    }
    results: dict[str, list[Phases]] = {name: [] for name in framings}
    for round_ in range(args.rounds):
        # Every other round the baseline goes second: neither framing always follows the other.
        order = list(framings)[:: 1 if round_ % 2 == 0 else -1]
        for name in order:
            phases, released = one_run(client, frames[name])
            if released != rows:
                raise RuntimeError(f"{name}: released {released} rows of {rows}")
            results[name].append(phases)
    _print(results, rows, members, args)


def _print(results: dict[str, list[Phases]], rows: int, members: dict[str, int], args: Any) -> None:
    print(
        f"{rows} Open Protocol row events, {PARTITIONS} partitions, 16 rows a message, "
        f"{args.transaction_rows} rows a transaction; median of {args.rounds} rounds, us per row"
    )
    print(
        f"{'a member holds':20} {'members':>8} "
        + " ".join(f"{'Redis ' + p:>13}" for p in PHASES[:2] + PHASES[3:])
        + f" {'Redis all':>10} "
        + " ".join(f"{'wall ' + p:>12}" for p in PHASES)
    )
    medians: dict[str, float] = {}
    for name, runs in results.items():
        redis = {p: statistics.median(r.redis[p] for r in runs) / rows * 1e6 for p in PHASES}
        wall = {p: statistics.median(r.wall[p] for r in runs) / rows * 1e6 for p in PHASES}
        # The release's Redis share is its read's again: counted once, under read.
        total = redis["stage"] + redis["read"] + redis["trim"]
        medians[name] = total
        print(
            f"{name:20} {members[name]:8d} "
            + " ".join(f"{redis[p]:13.2f}" for p in ("stage", "read", "trim"))
            + f" {total:10.2f} "
            + " ".join(f"{wall[p]:12.2f}" for p in PHASES)
        )
    base, new = medians.values()
    print(f"Redis CPU per row, runs of rows / a row a member: {new / base:.2f}")


if __name__ == "__main__":
    script.run(main)
