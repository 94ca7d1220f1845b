"""A transaction many times larger than TICDC_SINK_CHUNK_ROWS, applied in parts inside one
downstream transaction against real Redis and MariaDB (and TiDB): row by row what the upstream
holds, and nothing of it visible before its last part commits, even to a sink killed mid-way."""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from config.settings import Settings
from core.model import Op, RowChange
from core.staging import Staging, TopicPartition
from spark_sink.db.checkpoint import CheckpointWatch
from spark_sink.db.connection import connect
from spark_sink.loop import SinkLoop
from spark_sink.target import Target
from tests.spark_sink.big_transaction import (
    COLUMNS,
    TS,
    create_table,
    stage_big_transaction,
    table_rows,
)
from tests.ticdc_sink.pipelines import (
    ON_EVERY_SERVER,
    applied_resolved_ts,
    pipeline_env,
    spawn,
    stop,
    wait_for,
)

pytestmark = pytest.mark.integration

SINK_LOG = logging.getLogger("ticdc_sink.sink")


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


@ON_EVERY_SERVER
def test_a_transaction_many_chunks_large_applies_row_exact_in_one_downstream_transaction(
    on_server: Settings, staging: Staging, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = on_server.updated({"chunk_rows": 100})
    scratch_db = unique
    create_table(settings, scratch_db)
    big = stage_big_transaction(staging, scratch_db, base=400)
    assert big.changes > 8 * 100
    seen: list[tuple[list[Any], int]] = []
    target = Target(settings)
    apply_part = target.apply_part

    def watched(*args: Any) -> int:
        # What another connection sees while the big one's parts apply.
        if args[1] == TS + 1:
            with CheckpointWatch(settings) as watch:
                seen.append((table_rows(settings, scratch_db), watch.applied_resolved_ts()))
        return apply_part(*args)

    target.apply_part = watched  # type: ignore[method-assign]
    sink = SinkLoop(settings, staging, target)
    counted = {"pipeline": settings.group}
    with caplog.at_level(logging.INFO, SINK_LOG.name):
        # A call ends where a restart of the big transaction leaves it (below).
        calls = 1
        while sink.run_once() < TS + 1:
            calls += 1
            assert calls <= 2
    assert table_rows(settings, scratch_db) == big.after
    # Before every part, another connection saw the rows before the transaction, and the
    # checkpoint there.
    assert len(seen) >= big.changes // 100
    assert all(rows == big.before and at == TS for rows, at in seen)
    assert "applied the last part" in caplog.text
    # Each transaction counted once, when its last part committed (a restart's parts not).
    applied = REGISTRY.get_sample_value("ticdc_sink_changes_applied_total", counted)
    assert applied == len(big.before) + big.changes
    # Where rows load in place (MariaDB) the 400 inserts at TS did, part by part; the big
    # transaction's removals met rows a part before them loaded in place, so it went again,
    # staging every image. TiDB stages every image from the start.
    restarts = [r.getMessage() for r in caplog.records if "is applied again" in r.getMessage()]
    if sink.target.dialect.loads_in_place():
        assert len(restarts) == 1 and f"at ts {TS + 1} " in restarts[0]
        assert calls == 2
    else:
        assert restarts == [] and calls == 1
    sink.close()


@ON_EVERY_SERVER
def test_a_transaction_in_parts_that_ends_the_round_commits_once_and_the_checkpoint_passes_it(
    on_server: Settings, staging: Staging, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The round's resolved ts past the big transaction's commit ts, as TiCDC's resolved events
    come: its last part commits it at its own ts (the ts its parts were opened with), once and
    whole, and the checkpoint then moves on to the resolved ts."""
    settings = on_server.updated({"chunk_rows": 100})
    create_table(settings, unique)
    resolved = TS + 1_000
    big = stage_big_transaction(staging, unique, base=300, resolved=resolved)
    sink = SinkLoop(settings, staging, Target(settings))
    with caplog.at_level(logging.INFO, SINK_LOG.name):
        # A restart of the transaction (its images staged, see above) may end one call.
        reached = [sink.run_once() for _ in range(2)]
    sink.close()
    assert reached[-1] == resolved, reached
    assert table_rows(settings, unique) == big.after
    messages = [record.getMessage() for record in caplog.records]
    # The base rows at TS are in parts too: the big transaction's last part commits once.
    big_ts = f"of the transaction at ts {TS + 1} "
    committed = [m for m in messages if "applied the last part" in m and big_ts in m]
    assert len(committed) == 1, committed
    assert "was lost" not in caplog.text


def _parts_logged(log: Path, ts: int) -> int:
    text = log.read_text(errors="replace") if log.exists() else ""
    return text.count(f"of the transaction at ts {ts} ")


def _lock_waits(settings: Settings) -> int:
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM information_schema.INNODB_LOCK_WAITS")
        return int(cursor.fetchone()[0])


def test_a_sink_killed_mid_transaction_leaves_none_of_it_and_the_next_applies_it_whole(
    pipeline: Settings, staging: Staging, scratch_db: str, tmp_path: Path
) -> None:
    create_table(pipeline, scratch_db)
    big = stage_big_transaction(staging, scratch_db, base=1_000, base_alone=True)
    assert big.stage_rest is not None
    env = pipeline_env(pipeline, "open", TICDC_SINK_CHUNK_ROWS="200")
    sink = spawn("apply", env, tmp_path / "base.log")
    try:
        wait_for(lambda: applied_resolved_ts(pipeline) == TS, "the base rows", 120)
    finally:
        stop(sink)
    # Another session holds the checkpoint row: the sink applies every part of the big
    # transaction, then waits at its last part's checkpoint, where it is killed.
    meta = pipeline.downstream.meta_db
    with connect(pipeline) as holder, holder.cursor() as cursor:
        cursor.execute(f"SELECT * FROM `{meta}`.checkpoint FOR UPDATE")
        big.stage_rest()
        log = tmp_path / "sink.log"
        sink = spawn("apply", env, log)
        try:
            wait_for(lambda: _lock_waits(pipeline) > 0, "the sink at the checkpoint's lock", 120)
        finally:
            stop(sink, signal.SIGKILL)
        holder.rollback()
    assert _parts_logged(log, TS + 1) >= big.changes // 200
    # Killed with every part applied: none of them is there, the checkpoint is before them.
    assert applied_resolved_ts(pipeline) == TS, log.read_text()
    assert table_rows(pipeline, scratch_db) == big.before
    sink = spawn("apply", env, tmp_path / "again.log")
    try:
        wait_for(lambda: applied_resolved_ts(pipeline) == TS + 1, "the big transaction", 120)
    finally:
        stop(sink)
    assert table_rows(pipeline, scratch_db) == big.after


@ON_EVERY_SERVER
def test_a_table_a_later_part_meets_first_keeps_the_earlier_parts_unseen(
    on_server: Settings, staging: Staging, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A table first met in a later part has its staging table made outside the transaction,
    which then goes again: a CREATE TABLE inside it would commit the parts before, and TiDB's
    transaction would not see a table made aside after it began. (Loaded in place, as MariaDB
    would load `late`, it needs no staging table at all.)"""
    settings = on_server.updated({"chunk_rows": 100, "load_in_place": False})
    create_table(settings, unique)
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE `{unique}`.late (id INT PRIMARY KEY, v VARCHAR(16))")
    late = {"id": COLUMNS["id"], "v": COLUMNS["v"]}
    base = [{"id": i, "u": i, "v": "base"} for i in range(300)]
    removals = [RowChange(TS + 1, unique, "big", Op.DELETE, COLUMNS, None, r) for r in base]
    inserts = [
        RowChange(TS + 1, unique, "late", Op.INSERT, late, {"id": i, "v": "late"}, None)
        for i in range(100)
    ]
    tp = TopicPartition("topic", 0)
    staging.stage(
        tp,
        0,
        [RowChange(TS, unique, "big", Op.INSERT, COLUMNS, r, None) for r in base],
        watermark=TS,
    )
    # Removals of `big` in two parts, `late` first met in the third, more removals after it.
    for offset, changes in enumerate([removals[:200], inserts, removals[200:]], 1):
        staging.stage(tp, offset, changes)
    staging.stage(tp, 4, [], watermark=TS + 1)
    before = [(r["id"], r["u"], r["v"]) for r in base]
    seen: list[list[Any]] = []
    target = Target(settings)
    apply_part = target.apply_part

    def watched(*args: Any) -> int:
        if args[1] == TS + 1:
            seen.append(table_rows(settings, unique))
        return apply_part(*args)

    target.apply_part = watched  # type: ignore[method-assign]
    sink = SinkLoop(settings, staging, target)
    with caplog.at_level(logging.INFO, SINK_LOG.name):
        calls = 1
        while sink.run_once() < TS + 1:
            calls += 1
            assert calls <= 3
    sink.close()
    restarts = [r.getMessage() for r in caplog.records if "new to this sink" in r.getMessage()]
    assert len(restarts) == 1 and f"at ts {TS + 1} " in restarts[0]
    # Three parts before the restart, four after it; none of them seen from outside.
    assert len(seen) == 7
    assert all(rows == before for rows in seen), [len(rows) for rows in seen]
    assert table_rows(settings, unique) == []
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM `{unique}`.late")
        assert cursor.fetchone()[0] == 100
