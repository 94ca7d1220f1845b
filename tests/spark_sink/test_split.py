"""A transaction the downstream refuses as too large, committed in chunks with
``TICDC_SINK_SPLIT_LARGE_TXN``: against a model database, every chunk's removals then every
chunk's images, resumed at any chunk, end where the upstream is; against real servers (a MariaDB
with a binary log that refuses it, and MariaDB and TiDB split directly) row by row what the
upstream holds, a sink stopped or SIGKILLed between chunks going on at the next chunk, none
applied twice nor skipped, a stale leader's chunk refused."""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections.abc import Iterator
from itertools import groupby
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config.errors import LostLeadershipError
from config.settings import Settings
from core.model import ColumnFlag, Op, RowChange, column_type
from core.outage import Outage
from core.staging import Staging, TopicPartition
from spark_sink.db.connection import connect
from spark_sink.db.split_position import SplitPass, SplitPosition, SplitPositionTable
from spark_sink.leader import LeaderLock
from spark_sink.loop import SinkLoop
from spark_sink.plan import plan_batch
from spark_sink.run import lead
from spark_sink.split import apply_split, chunks, pass_changes, pass_plans
from spark_sink.target import Target
from tests.spark_sink.big_transaction import TS, create_table, stage_big_transaction, table_rows
from tests.spark_sink.test_parts import Downstream, _key, transactions
from tests.ticdc_sink.pipelines import (
    ON_EVERY_SERVER,
    applied_resolved_ts,
    pipeline_env,
    spawn,
    stop,
    wait_for,
)
from ticdc_sink.status_command import read_split

SINK_LOG = logging.getLogger("ticdc_sink.sink")
CHUNK_LINE = re.compile(
    r"applied the chunk of changes (\d+)-(\d+) of the split transaction at ts (\d+), (\w+) pass"
)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), keyless=st.booleans())
def test_every_removal_then_every_image_chunk_by_chunk_resumed_anywhere_is_the_upstream(
    data: st.DataObject, keyless: bool
) -> None:
    upstream, changes = data.draw(transactions(keyless))
    size = data.draw(st.integers(1, 8), "chunk_rows")
    downstream = Downstream(keyless)
    for _, grouped in groupby(changes, key=lambda change: change.commit_ts):
        transaction = list(grouped)
        # A crash after any chunk: the rest goes on from the position, in chunks of any size.
        crash_after = data.draw(st.integers(0, 2 * len(transaction)), "crash after")
        resumed = data.draw(st.integers(1, 8), "chunk_rows after the crash")
        for pass_ in SplitPass:
            done = 0
            sizes = [size]
            while True:
                chunked = list(chunks(transaction, done, sizes[-1]))
                if not chunked:
                    break
                chunk, done = chunked[0]
                for plan in pass_plans(plan_batch(pass_changes(chunk, pass_)), pass_):
                    for key in plan.deletes:
                        downstream.delete(key, plan.copies.get(key, 1))
                    for key, row in plan.upserts.items():
                        downstream.upsert(key, row, plan.copies.get(key, 1))
                crash_after -= 1
                if crash_after == 0:
                    sizes.append(resumed)
    assert downstream.table() == sorted(_key(row, keyless) for row in upstream)


def test_chunks_skip_what_is_done_and_count_from_the_start() -> None:
    assert list(chunks(range(7), 0, 3)) == [([0, 1, 2], 3), ([3, 4, 5], 6), ([6], 7)]
    assert list(chunks(range(7), 3, 2)) == [([3, 4], 5), ([5, 6], 7)]
    assert list(chunks(range(7), 7, 2)) == []


def _position(settings: Settings) -> SplitPosition | None:
    table = SplitPositionTable(settings.downstream.meta_db, settings.group)
    try:
        with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
            return table.read(cursor)
    except Exception:  # no meta database or table yet
        return None


def _chunk_lines(*logs: Path) -> list[tuple[int, int, int, str]]:
    """Each chunk committed, as the logs say: first and last change, commit ts, pass."""
    found = []
    for log in logs:
        for match in CHUNK_LINE.finditer(log.read_text(errors="replace")):
            first, last, ts, pass_ = match.groups()
            found.append((int(first), int(last), int(ts), pass_))
    return found


def _assert_tiled(ranges: list[tuple[int, int]], changes: int) -> None:
    """``ranges`` cover 1..changes exactly once each (a chunk applied twice overlaps)."""
    covered = [n for first, last in ranges for n in range(first, last + 1)]
    assert sorted(covered) == list(range(1, changes + 1))


@pytest.fixture
def on_server(downstream_settings: Settings, unique: str, staging: Staging) -> Iterator[Settings]:
    """The pipeline's settings on the test's server, with a database of its own there."""
    configured = downstream_settings.updated({"group": unique, "meta_db": f"{unique}_meta"})
    staging.set_partition_count("topic", 1)
    with connect(configured, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{unique}`")
    yield configured
    with connect(configured, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}`")
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")


@pytest.mark.integration
@ON_EVERY_SERVER
def test_a_split_stopped_between_chunks_goes_on_at_the_next_and_fences_a_stale_leader(
    on_server: Settings, staging: Staging, unique: str
) -> None:
    settings = on_server.updated({"chunk_rows": 40})
    create_table(settings, unique)
    big = stage_big_transaction(staging, unique, base=200, base_alone=True)
    assert big.stage_rest is not None
    target = Target(settings)
    sink = SinkLoop(settings, staging, target, epoch=2)
    assert sink.run_once() == TS
    big.stage_rest()
    assert big.changes > 8 * 40
    positions: list[SplitPosition] = []
    apply_chunk = target.apply_chunk
    halt = threading.Event()

    def counted(plans: Any, position: SplitPosition, epoch: int) -> int:
        positions.append(position)
        merged = apply_chunk(plans, position, epoch)
        if len(positions) == 3:
            halt.set()
        return merged

    target.apply_chunk = counted  # type: ignore[method-assign]
    assert not apply_split(staging, target, TS + 1, 40, 2, halt)
    # Three chunks of removals committed, with their position; the checkpoint before them.
    assert _position(settings) == SplitPosition(TS + 1, SplitPass.REMOVALS, 120)
    assert applied_resolved_ts(settings) == TS
    # `status` shows it.
    assert read_split(settings) == SplitPosition(TS + 1, SplitPass.REMOVALS, 120)
    # A stale leader's chunk is refused, and moves nothing.
    with pytest.raises(LostLeadershipError):
        target.apply_chunk([], SplitPosition(TS + 1, SplitPass.REMOVALS, 160), 1)
    assert _position(settings) == SplitPosition(TS + 1, SplitPass.REMOVALS, 120)
    # The next sink goes on at the fourth chunk, without the opt-in (half of it is applied).
    sink.close()
    positions.clear()
    sink = SinkLoop(settings, staging, target, epoch=3)
    assert sink.run_once() == TS + 1
    assert positions[0] == SplitPosition(TS + 1, SplitPass.REMOVALS, 160)
    removals = [p.done for p in positions if p.pass_ is SplitPass.REMOVALS]
    images = [p.done for p in positions if p.pass_ is SplitPass.IMAGES]
    assert removals == [*range(160, big.changes, 40), big.changes]
    assert images == [*range(40, big.changes, 40), big.changes]
    assert table_rows(settings, unique) == big.after
    assert _position(settings) is None
    assert read_split(settings) is None
    sink.close()


@pytest.mark.integration
def test_a_refused_transaction_is_committed_in_chunks_with_the_opt_in_row_exact(
    limited: Settings,
    staging: Staging,
    unique: str,
    redis_client: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = limited.updated({"chunk_rows": 256, "split_large_txn": True})
    create_table(settings, unique)
    # Keys deleted and inserted again in the transaction: rows moved onto keys deleted rows
    # freed, some by TiCDC's split update (a delete and an insert).
    big = stage_big_transaction(staging, unique, base=600)
    assert big.changes > 5 * 256
    sink = SinkLoop(settings, staging, Target(settings))
    lock = LeaderLock(redis_client, staging.keys)
    assert lock.acquire()
    halt = threading.Event()
    leading = threading.Thread(
        target=lead, args=(sink, lock, lambda: False, Outage("Redis", SINK_LOG), False, halt)
    )
    with caplog.at_level(logging.INFO, SINK_LOG.name):
        leading.start()
        try:
            wait_for(lambda: applied_resolved_ts(settings) == TS + 1, "the split transaction", 120)
        finally:
            halt.set()
            leading.join(timeout=60)
            lock.release()
    assert table_rows(settings, unique) == big.after
    assert _position(settings) is None
    said = [r.getMessage() for r in caplog.records]
    assert any(f"at ts {TS + 1} is larger" in line and "in chunks" in line for line in said)
    lines = [(m.groups()) for line in said if (m := CHUNK_LINE.search(line))]
    big_chunks = [(int(a), int(b), p) for a, b, ts, p in lines if int(ts) == TS + 1]
    for pass_ in ("removals", "images"):
        ranges = [(a, b) for a, b, p in big_chunks if p == pass_]
        _assert_tiled(ranges, big.changes)
        assert len(ranges) >= big.changes // 256
    assert "Traceback" not in caplog.text


def _lock_waits(settings: Settings) -> int:
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM information_schema.INNODB_LOCK_WAITS")
        return int(cursor.fetchone()[0])


@pytest.mark.integration
def test_a_sink_killed_between_chunks_goes_on_at_the_next_chunk(
    limited: Settings, staging: Staging, unique: str, redis_client: Any, tmp_path: Path
) -> None:
    create_table(limited, unique)
    big = stage_big_transaction(staging, unique, base=400, base_alone=True)
    assert big.stage_rest is not None
    env = pipeline_env(
        limited, "open", TICDC_SINK_CHUNK_ROWS="8", TICDC_SINK_SPLIT_LARGE_TXN="true"
    )
    sink = spawn("apply", env, tmp_path / "base.log")
    try:
        wait_for(lambda: applied_resolved_ts(limited) == TS, "the base rows", 120)
    finally:
        stop(sink)
    big.stage_rest()
    first_log = tmp_path / "sink.log"
    sink = spawn("apply", env, first_log)
    meta = limited.downstream.meta_db
    try:
        deadline = time.monotonic() + 120
        while True:
            found = _position(limited)
            if found is not None and found.commit_ts == TS + 1 and found.pass_ is SplitPass.IMAGES:
                break
            assert time.monotonic() < deadline and sink.poll() is None, first_log.read_text()
            time.sleep(0.01)
        # Another session holds the checkpoint row: the sink's next chunk waits at its epoch
        # check, uncommitted, where it is killed.
        with connect(limited) as holder, holder.cursor() as cursor:
            cursor.execute(
                f"SELECT * FROM `{meta}`.checkpoint WHERE pipeline = %s FOR UPDATE",
                (limited.group,),
            )
            wait_for(lambda: _lock_waits(limited) > 0, "the sink at the checkpoint's lock", 60)
            killed_at = _position(limited)
            stop(sink, signal.SIGKILL)
            holder.rollback()
    finally:
        stop(sink, signal.SIGKILL)
    # The lease a killed sink leaves lapses after its term: the test lets it go at once.
    redis_client.delete(staging.keys.leader)
    assert killed_at is not None and killed_at.pass_ is SplitPass.IMAGES
    assert 0 < killed_at.done < big.changes
    assert _position(limited) == killed_at
    assert applied_resolved_ts(limited) == TS
    before = _chunk_lines(first_log)
    # The position says exactly the chunks the log says committed.
    assert max(b for _, b, ts, p in before if ts == TS + 1 and p == "images") == killed_at.done
    again_log = tmp_path / "again.log"
    sink = spawn("apply", env, again_log)
    try:
        wait_for(lambda: applied_resolved_ts(limited) == TS + 1, "the split transaction", 120)
    finally:
        stop(sink)
    assert table_rows(limited, unique) == big.after
    assert _position(limited) is None
    after = [line for line in _chunk_lines(again_log) if line[2] == TS + 1]
    # The restart starts at the chunk after the position, and no chunk is applied twice.
    assert after[0][:2] == (killed_at.done + 1, min(killed_at.done + 8, big.changes))
    assert all(p == "images" for *_, p in after)
    for pass_ in ("removals", "images"):
        ranges = [(a, b) for a, b, ts, p in before + after if ts == TS + 1 and p == pass_]
        _assert_tiled(ranges, big.changes)


@pytest.mark.integration
def test_a_chunk_the_downstream_refuses_too_is_halved_until_it_fits(
    limited: Settings, staging: Staging, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = limited.updated({"chunk_rows": 100, "split_large_txn": True})
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE `{unique}`.wide (id INT PRIMARY KEY, v VARCHAR(400))")
    key = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
    columns = {"id": column_type(3, key), "v": column_type(15, int(ColumnFlag.NULLABLE))}
    # 300-byte rows: far more than the binary log's cache takes in a chunk of 100.
    rows = [
        RowChange(TS, unique, "wide", Op.INSERT, columns, {"id": i, "v": f"{i:0300d}"}, None)
        for i in range(200)
    ]
    staging.stage(TopicPartition("topic", 0), 0, rows, watermark=TS)
    sink = SinkLoop(settings, staging, Target(settings))
    with caplog.at_level(logging.INFO, SINK_LOG.name):
        assert sink.run_once() == TS
    sink.close()
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT id, v FROM `{unique}`.wide ORDER BY id")
        assert [(int(i), str(v)) for i, v in cursor.fetchall()] == [
            (i, f"{i:0300d}") for i in range(200)
        ]
    said = [r.getMessage() for r in caplog.records]
    halved = [line for line in said if "changes from now on" in line]
    assert halved and "chunks of 50 changes from now on" in halved[0]
    found = [m.groups() for line in said if (m := CHUNK_LINE.search(line))]
    images = [(int(a), int(b)) for a, b, _, p in found if p == "images"]
    _assert_tiled(images, 200)
    assert max(b - a + 1 for a, b in images) < 100
