"""The worker's writes to staging against the real Redis: replays, DDL once, quiet partitions,
held messages."""

from __future__ import annotations

import pytest
import redis

from core.model import DDLEvent
from core.packed import pack_row
from core.staging import (
    Barrier,
    PartitionProgress,
    StagedMessage,
    Staging,
    framing,
)
from core.staging.layout import member_row_count
from tests.core.staging.changes import BIG_TS, P0, P1, row

pytestmark = pytest.mark.integration


def test_a_replayed_offset_is_skipped_and_copies_collapse(
    redis_client: redis.Redis, staging: Staging
) -> None:
    assert staging.stage(P0, 7, [row(BIG_TS + 1, 1)], watermark=BIG_TS + 1) == 1
    # Kafka re-delivering offset 7 as it was: its rows are the same members, and neither they
    # nor its watermark count again.
    assert staging.stage(P0, 7, [row(BIG_TS + 1, 1)], watermark=BIG_TS + 1) == 0
    assert staging.staged_totals()[0] == 1
    assert redis_client.zcard(staging.keys.resolved(P0)) == 1
    # TiCDC re-sending one row version at a new offset: staged, but released once.
    assert staging.stage(P0, 8, [row(BIG_TS + 1, 1)]) == 1
    assert staging.staged_offset(P0) == 8
    assert [r.new for r in staging.release(0, BIG_TS + 1)] == [{"id": 1, "v": "x"}]  # type: ignore[union-attr]


def test_one_call_stages_the_new_messages_of_a_batch_and_skips_the_replays(
    staging: Staging,
) -> None:
    staging.stage(P0, 4, [], watermark=BIG_TS + 4)
    staging.stage(P0, 5, [row(BIG_TS + 5, 5)])
    packed = {n: [(BIG_TS + n, pack_row(row(BIG_TS + n, n)))] for n in range(5, 8)}
    messages = [
        # Replays: neither their rows (the same members again) nor their watermarks count.
        StagedMessage(4, [], watermark=BIG_TS + 40),
        StagedMessage(5, packed[5]),
        StagedMessage(6, packed[6], [DDLEvent(BIG_TS + 6, "db", "t", "q", 1)]),
        StagedMessage(7, packed[7], watermark=BIG_TS + 7),
    ]
    assert staging.stage_messages(P0, messages) == 1
    assert staging.staged_offset(P0) == 7
    assert staging.staged_totals()[0] == 3
    assert staging.watermarks()[P0] == BIG_TS + 7
    released = list(staging.release(0, BIG_TS + 7))
    assert [r.ddl.query if isinstance(r, Barrier) else r.new["id"] for r in released] == [  # type: ignore[union-attr]
        5,
        6,
        "q",
        7,
    ]
    assert staging.stage_messages(P0, messages) == 0
    assert staging.staged_totals()[0] == 3


@pytest.mark.parametrize(("members", "size"), [(3, 1 << 30), (1 << 30, 600)])
def test_a_batch_past_one_zadds_bounds_goes_in_several(
    staging: Staging, monkeypatch: pytest.MonkeyPatch, members: int, size: int
) -> None:
    monkeypatch.setattr(framing, "ZADD_MEMBERS", members)
    monkeypatch.setattr(framing, "ZADD_BYTES", size)
    rows = [row(BIG_TS + n, n) for n in range(1, 21)]
    messages = [
        StagedMessage(
            offset, [(r.commit_ts, pack_row(r)) for r in rows[2 * offset : 2 * offset + 2]]
        )
        for offset in range(10)
    ]
    assert staging.stage_messages(P0, messages) == 1
    assert staging.staged_totals()[0] == 20
    assert list(staging.release(0, BIG_TS + 20)) == rows


def test_a_late_message_staged_twice_counts_its_rows_once(
    redis_client: redis.Redis, staging: Staging
) -> None:
    # A dead letter replayed with --keep, then again: the second adds no member, and the totals
    # the worker's backpressure reads must not keep rows that trim will never take off.
    rows = [row(BIG_TS + 1, n) for n in range(16)]
    assert staging.stage_late(P1, 9, rows) == 16
    totals = staging.staged_totals()
    assert staging.stage_late(P1, 9, rows) == 0
    assert staging.staged_totals() == totals == (16, totals[1])
    staging.trim(BIG_TS + 1)
    assert staging.staged_totals() == (0, 0)


def test_a_message_stages_a_member_per_run_of_rows_at_one_commit_ts(
    redis_client: redis.Redis, staging: Staging
) -> None:
    rows = [row(BIG_TS + 1, n) for n in range(3)] + [row(BIG_TS + 2, 3), row(BIG_TS + 1, 4)]
    assert staging.stage(P0, 0, rows) == 1
    # Framed (the worker's path) and written directly (a dead letter replayed): the same runs.
    assert staging.stage_late(P1, 0, rows) == 5
    for tp in (P0, P1):
        members = redis_client.zrange(staging.keys.rows(tp), 0, -1)
        assert [member_row_count(m) for m in members] == [3, 1, 1]
        assert staging.staged_rows(tp) == 5
    size = sum(len(m) for tp in (P0, P1) for m in redis_client.zrange(staging.keys.rows(tp), 0, -1))
    assert staging.staged_totals() == (10, size)
    # A re-delivery adds nothing; the copies across partitions collapse row by row.
    assert staging.stage(P0, 0, rows) == 0
    assert redis_client.zcard(staging.keys.rows(P0)) == 3
    released = [(r.commit_ts, r.new["id"]) for r in staging.release(0, BIG_TS + 2)]  # type: ignore[union-attr]
    assert released == [(BIG_TS + 1, n) for n in (0, 1, 2, 4)] + [(BIG_TS + 2, 3)]


def test_a_broadcast_ddl_is_staged_once_and_split_ddls_are_kept(staging: Staging) -> None:
    create = DDLEvent(BIG_TS + 3, "db", "t", "CREATE TABLE t (id INT)", 3)
    second = DDLEvent(BIG_TS + 3, "db", "u", "CREATE TABLE u (id INT)", 3)
    for offset, tp in enumerate([P0, P1]):
        staging.stage(tp, offset, [], ddls=[create, second])
    staging.stage(P0, 5, [row(BIG_TS + 1, 1), row(BIG_TS + 4, 2)])
    staging.stage(P1, 5, [row(BIG_TS + 3, 3)])
    released = list(staging.release(0, BIG_TS + 4))
    shape = [
        ("ddl", r.ddl.table) if isinstance(r, Barrier) else ("row", r.new["id"]) for r in released
    ]  # type: ignore[index]
    assert shape == [("row", 1), ("row", 3), ("ddl", "t"), ("ddl", "u"), ("row", 2)]


def test_a_quiet_partition_resolves_as_a_resolved_event_at_its_last_offset(
    redis_client: redis.Redis,
    staging: Staging,
) -> None:
    staging.stage(P0, 0, [row(BIG_TS + 1, 1)], watermark=BIG_TS)
    staging.stage(P0, 1, [row(BIG_TS + 7, 2), row(BIG_TS + 3, 3)])
    progress = staging.progress([P0, P1])
    assert progress[P0] == PartitionProgress(1, BIG_TS, False, BIG_TS + 7)
    assert progress[P1] == PartitionProgress(None, None, False, None)
    # Not while more was staged since the worker looked.
    assert not staging.resolve_idle(P0, 0, BIG_TS + 7)
    assert staging.resolve_idle(P0, 1, BIG_TS + 7)
    assert staging.watermarks()[P0] == BIG_TS + 7
    # Recorded as a resolved event at offset 1 would be: a replay after a checkpoint there
    # starts at that offset.
    assert staging.replay_offsets(BIG_TS + 7)["topic:0"] == 1
    # Never backwards, never twice.
    assert not staging.resolve_idle(P0, 1, BIG_TS + 7)
    assert not staging.resolve_idle(P0, 1, BIG_TS + 2)
    assert staging.watermarks()[P0] == BIG_TS + 7
    assert redis_client.zcard(staging.keys.resolved(P0)) == 2


def test_a_partition_holding_a_message_does_not_resolve_when_quiet(staging: Staging) -> None:
    staging.stage(P1, 0, [row(BIG_TS + 4, 1)])
    staging.hold(P1, 1, None, b"dml before its schema", BIG_TS + 6)
    staging.stage(P1, 1, [])
    assert staging.progress([P1])[P1].holding
    assert not staging.resolve_idle(P1, 1, BIG_TS + 4)
    assert staging.watermarks()[P1] is None
