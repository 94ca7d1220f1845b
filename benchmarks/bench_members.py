"""Redis's CPU per row change for the staged row members, layout 1 (a member a row) against
layout 2 (a member per run of a message's rows at one commit ts), in one run.

bench_scale's workload (Open Protocol, 16 partitions, 16 rows a message) is decoded natively as
the worker decodes it, then staged, read and trimmed straight through the staging area, once per
layout and round, alternating: stage (MULTI { ZADD ; stage.lua } EXEC per partition, 64
messages a transaction, as the worker batches), read (every partition's ZRANGEBYLEX pages),
release (read, merge by commit ts, unpack: the sink's whole read), trim (trim.lua). Layout 1 is
the baseline: its members are made by ``layout1_member`` and go through the same writer, with
the page sizes it had (5,000 members a read page, 20,000 a trim call). The order alternates by
round; the medians are printed. Redis's CPU is the whole
server's (``INFO cpu``): on a shared Redis, neighbours add theirs to both layouts alike.

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

from benchmarks.bench_scale import PARTITIONS, workload
from benchmarks.cpu import redis_cpu
from config.settings import load_settings
from core.packed import PackedEvents
from core.redis_client import redis_client
from core.resp import Arg, encode_args
from core.staging import Staging, TopicPartition, reader
from core.staging.framing import FramedMessage, frame_packed
from core.staging.layout import layout1_member
from streams.codecs import codec_for

# Messages per staging transaction: a worker's batch of a partition.
MESSAGES_PER_STAGE = 64
# Layout 1's page sizes, as it ran with them.
LAYOUT1_RELEASE_PAGE = 5_000
LAYOUT1_TRIM_PAGE = 20_000
PHASES = ("stage", "read", "release", "trim")
TOPIC = "bench-members"


def layout1_frames(messages: list[tuple[int, PackedEvents]]) -> list[FramedMessage]:
    """Each message framed as layout 1 framed it: a member a row."""
    frames = []
    for offset, packed in messages:
        rows = packed.rows()
        members = [layout1_member(ts, offset, i, row) for i, (ts, row) in enumerate(rows)]
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


def one_run(
    client: Any,
    frames: dict[int, list[FramedMessage]],
    release_page: int,
    trim_page: int,
) -> tuple[Phases, int]:
    """``frames`` staged, read, released and trimmed in a fresh pipeline; the phases and the
    rows released."""
    staging = Staging(client, f"bench-members-{uuid.uuid4().hex[:8]}")
    staging.set_partition_count(TOPIC, PARTITIONS)
    phases = Phases(client)
    saved = reader.RELEASE_PAGE, reader.TRIM_PAGE
    reader.RELEASE_PAGE, reader.TRIM_PAGE = release_page, trim_page
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
        reader.RELEASE_PAGE, reader.TRIM_PAGE = saved
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
    layouts: dict[
        str, tuple[Callable[[list[tuple[int, PackedEvents]]], list[FramedMessage]], int, int]
    ] = {
        "layout 1 (baseline)": (layout1_frames, LAYOUT1_RELEASE_PAGE, LAYOUT1_TRIM_PAGE),
        "layout 2": (frame_packed, reader.RELEASE_PAGE, reader.TRIM_PAGE),
    }
    frames = {
        name: {p: frame(messages) for p, messages in by_partition.items()}
        for name, (frame, _, _) in layouts.items()
    }
    members = {
        name: sum(f.member_count for framed in per.values() for f in framed)
        for name, per in frames.items()
    }
    results: dict[str, list[Phases]] = {name: [] for name in layouts}
    for round_ in range(args.rounds):
        # Every other round the baseline goes second: neither layout always follows the other.
        order = list(layouts.items())[:: 1 if round_ % 2 == 0 else -1]
        for name, (_, release_page, trim_page) in order:
            phases, released = one_run(client, frames[name], release_page, trim_page)
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
        f"{'layout':20} {'members':>8} "
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
    print(f"Redis CPU per row, layout 2 / layout 1: {new / base:.2f}")


if __name__ == "__main__":
    main()
