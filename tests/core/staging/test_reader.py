"""The sink's reads of staging against the real Redis: release order, DDL barriers, trim,
replay offsets."""

from __future__ import annotations

import heapq
import random

import pytest
import redis

from core.model import DDLEvent, Op, RowChange, column_type
from core.packed import unpack_row
from core.staging import Barrier, Staging
from core.staging.layout import TS_DIGITS, member_rows, unpack_ddl_member
from core.staging.reader import RELEASE_PAGE, RELEASE_PAGE_BYTES, page_members
from tests.core.staging.changes import BIG_TS, NO_KEY, P0, P1, row

pytestmark = pytest.mark.integration


def test_release_orders_by_commit_ts_across_partitions(staging: Staging) -> None:
    staging.stage(P0, 0, [row(BIG_TS + 1, 1), row(BIG_TS + 5, 2)])
    staging.stage(P1, 0, [row(BIG_TS + 2, 3)])
    staging.stage(P1, 1, [row(BIG_TS + 4, 4)])
    released = list(staging.release(BIG_TS, BIG_TS + 4))
    assert [(r.commit_ts, r.new["id"]) for r in released] == [  # type: ignore[union-attr]
        (BIG_TS + 1, 1),
        (BIG_TS + 2, 3),
        (BIG_TS + 4, 4),
    ]
    # Nothing newer than the resolved ts it is released at.
    later = list(staging.release(BIG_TS + 4, BIG_TS + 10))
    assert [r.commit_ts for r in later] == [BIG_TS + 5]  # type: ignore[union-attr]


def test_identical_rows_of_a_keyless_table_stay_apart_unless_one_offset(staging: Staging) -> None:
    same = RowChange(BIG_TS + 1, "db", "n", Op.INSERT, NO_KEY, {"a": 1, "b": "x"}, None)
    # Two identical rows in one message, and a third at the next offset (TiDB tells them apart
    # by a hidden row id; the stream does not).
    assert staging.stage(P0, 3, [same, same]) == 1
    assert staging.stage(P0, 4, [same], watermark=BIG_TS + 1) == 1
    # Kafka re-delivering offset 3: the same members, nothing new.
    assert staging.stage(P0, 3, [same, same]) == 0
    staging.stage(P1, 0, [], watermark=BIG_TS + 1)
    assert [r.new for r in staging.release(0, BIG_TS + 1)] == [{"a": 1, "b": "x"}] * 3  # type: ignore[union-attr]


def test_trim_removes_what_was_applied_and_counts_down(staging: Staging) -> None:
    staging.stage(P0, 0, [row(BIG_TS + 1, 1), row(BIG_TS + 2, 2)])
    staging.stage(P1, 0, [row(BIG_TS + 3, 3)], ddls=[DDLEvent(BIG_TS + 2, "db", None, "q", 1)])
    assert staging.staged_totals()[0] == 3
    assert staging.trim(BIG_TS + 2) == 2
    assert staging.staged_totals()[0] == 1
    assert [r.commit_ts for r in staging.release(0, (1 << 64) - 1)] == [BIG_TS + 3]  # type: ignore[union-attr]


def test_trim_goes_page_by_page_and_counts_bytes_down(
    redis_client: redis.Redis, staging: Staging, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("core.staging.reader.TRIM_PAGE", 2)
    staging.stage(P0, 0, [row(BIG_TS + n, n) for n in range(1, 6)])
    staging.stage(P0, 1, [row(BIG_TS + 9, 9)])
    assert staging.trim(BIG_TS + 5) == 5
    # What is left is exactly the one row above the checkpoint, bytes included.
    left = redis_client.zrange(staging.keys.rows(P0), 0, -1)
    assert staging.staged_totals() == (1, sum(map(len, left)))
    assert [r.commit_ts for r in staging.release(0, (1 << 64) - 1)] == [BIG_TS + 9]  # type: ignore[union-attr]


def test_trim_counts_the_rows_of_each_member_it_removes(
    redis_client: redis.Redis, staging: Staging, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("core.staging.reader.TRIM_PAGE", 2)
    # Runs of 3, 2 and 1 rows, and one past the checkpoint: three members, then one.
    staging.stage(P0, 0, [*[row(BIG_TS + 1, n) for n in range(3)], row(BIG_TS + 2, 7)])
    staging.stage(P0, 1, [row(BIG_TS + 3, 8), row(BIG_TS + 3, 9), row(BIG_TS + 9, 9)])
    assert redis_client.zcard(staging.keys.rows(P0)) == 4
    assert staging.staged_rows(P0) == 7
    assert staging.trim(BIG_TS + 5) == 6
    left = redis_client.zrange(staging.keys.rows(P0), 0, -1)
    assert staging.staged_totals() == (1, sum(map(len, left)))
    assert staging.staged_rows(P0) == 1


def test_values_survive_staging_exactly(staging: Staging) -> None:
    columns = {"u": column_type(8, 0x80 | 10), "b": column_type(252, 65), "f": column_type(5, 64)}
    original = RowChange(
        (1 << 64) - 2,
        "库",
        "表`x",
        Op.UPDATE,
        columns,
        {"u": (1 << 64) - 1, "b": b"\x00\xff", "f": 0.1},
        {"u": 0, "b": None, "f": None},
        partition_id=7,
    )
    staging.stage(P0, 0, [original])
    assert list(staging.release(0, (1 << 64) - 1)) == [original]


def test_replay_offsets_start_at_the_last_watermark_at_or_below_the_checkpoint(
    redis_client: redis.Redis,
    staging: Staging,
) -> None:
    ddl = DDLEvent(BIG_TS + 15, "db", "t", "ALTER TABLE t ADD c INT", 5)
    staging.stage(P0, 0, [row(BIG_TS + 1, 1)])
    staging.stage(P0, 1, [], watermark=BIG_TS + 10)
    # A DDL after the checkpoint in a message of its own, before any later row: a replay that
    # started at the first unapplied row would miss it.
    staging.stage(P0, 2, [], [ddl])
    staging.stage(P0, 3, [], watermark=BIG_TS + 20)
    staging.stage(P0, 4, [row(BIG_TS + 25, 2)])
    staging.stage(P1, 0, [], watermark=BIG_TS + 12)
    assert staging.replay_offsets(BIG_TS + 12) == {"topic:0": 1, "topic:1": 0}
    assert staging.replay_offsets(BIG_TS + 20) == {"topic:0": 3, "topic:1": 0}
    # A partition without a watermark at or below the checkpoint replays from its start.
    assert staging.replay_offsets(BIG_TS + 5) == {"topic:0": 0, "topic:1": 0}
    # Trimming keeps the entry a replay starts from.
    staging.trim(BIG_TS + 12)
    assert staging.replay_offsets(BIG_TS + 12) == {"topic:0": 1, "topic:1": 0}
    assert redis_client.zcard(staging.keys.resolved(P0)) == 2


def test_paged_release_with_ddls_is_the_heapq_merge_release(
    redis_client: redis.Redis, staging: Staging, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small pages, partitions sharing commit ts, copies, DDLs between them: release yields
    what merging every partition's members keyed by the commit ts did, DDLs in their place."""
    monkeypatch.setattr("core.staging.reader.RELEASE_PAGE", 3)
    monkeypatch.setattr("core.staging.reader.FIRST_RELEASE_PAGE", 2)
    monkeypatch.setattr("core.staging.reader.UNPACK_CHUNK", 2)
    rng = random.Random(11)
    for offset in range(30):
        ts = BIG_TS + rng.randint(1, 12)
        # Runs of rows at one or two commit ts: members of several rows, copies within them.
        rows = [
            row(ts + rng.randint(0, 1), rng.randint(0, 3), rng.choice("xy"))
            for _ in range(rng.randint(1, 6))
        ]
        rows.sort(key=lambda change: change.commit_ts)
        ddls = [DDLEvent(ts, "db", "t", f"ALTER {offset}", 5)] if rng.random() < 0.15 else []
        staging.stage(rng.choice([P0, P1]), offset, rows, ddls)
    upto = BIG_TS + 10
    partitions = [redis_client.zrange(staging.keys.rows(tp), 0, -1) for tp in (P0, P1)]
    ddl_members = redis_client.zrange(staging.keys.ddl, 0, -1)
    expected = _heapq_release(partitions, ddl_members, BIG_TS + 2, upto)
    assert any(isinstance(item, Barrier) for item in expected)
    assert list(staging.release(BIG_TS + 2, upto)) == expected


def _heapq_release(
    partitions: list[list[bytes]], ddls: list[bytes], after: int, upto: int
) -> list[RowChange | Barrier]:
    """Release as one ``heapq.merge`` keyed by the commit-ts prefix did it."""

    def within(member: bytes) -> bool:
        return after < int(member[:TS_DIGITS], 16) <= upto

    pending = [m for m in ddls if within(m)]
    merged = heapq.merge(*[[m for m in p if within(m)] for p in partitions], key=lambda m: m[:16])
    out: list[RowChange | Barrier] = []
    seen: set[bytes] = set()
    current = b""
    for member in merged:
        ts = member[:TS_DIGITS]
        while pending and pending[0][:TS_DIGITS] < ts:
            out.append(Barrier(unpack_ddl_member(pending.pop(0))))
        if ts != current:
            current = ts
            seen.clear()
        for body in member_rows(member):
            if body in seen:
                continue
            seen.add(body)  # every staged row here has a key
            out.append(unpack_row(int(ts, 16), body))
    return out + [Barrier(unpack_ddl_member(m)) for m in pending]


def test_copies_past_the_remembered_bodies_come_twice_and_plan_as_once(
    staging: Staging, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction of millions of keyed rows is not held again as bodies to collapse copies:
    past the bound, a copy comes out again, and the plan (one final action a key) is the same."""
    from core.staging import reader
    from spark_sink.plan import plan_batch

    monkeypatch.setattr(reader, "UNPACK_CHUNK", 1)
    monkeypatch.setattr(reader, "COPIES_REMEMBERED", 10)
    rows = [row(BIG_TS + 1, key, f"v{key}") for key in range(40)]
    # TiCDC re-sent the transaction's rows at later offsets, and to the other partition.
    staging.stage(P0, 0, rows[:20])
    staging.stage(P0, 1, rows[20:])
    staging.stage(P0, 2, rows, watermark=BIG_TS + 1)
    staging.stage(P1, 0, rows, watermark=BIG_TS + 1)
    released = [r for r in staging.release(0, BIG_TS + 1) if isinstance(r, RowChange)]
    # Each member (a run of rows of one message) past the bound is remembered no more.
    assert len(released) == 3 * 40
    (plan,) = plan_batch(released)
    (once,) = plan_batch(rows)
    assert plan.upserts == once.upserts and not plan.deletes
    monkeypatch.setattr(reader, "COPIES_REMEMBERED", 1_000)
    assert len([r for r in staging.release(0, BIG_TS + 1) if isinstance(r, RowChange)]) == 40


def test_a_page_of_big_members_makes_the_next_page_fit_the_page_bytes() -> None:
    # Rows larger than a member's bytes are members alone: 1 MB members, 8 a page.
    assert page_members([b"x" * (1 << 20)] * 4) == RELEASE_PAGE_BYTES >> 20
    # Small members: the whole page; a member larger than the page bytes: one at a time.
    assert page_members([b"x" * 100] * 10) == RELEASE_PAGE
    assert page_members([b"x" * (RELEASE_PAGE_BYTES + 1)]) == 1
