"""`ticdc-sink check` while the sink applies: a workload run on the upstream TiDB transaction by
transaction, each commit ts read back from TiDB, the same changes encoded as TiCDC's Open Protocol
with those commit ts and replicated by a worker and a sink into MariaDB; every check, wherever the
sink's checkpoint is when it reads, matches the upstream at that ts."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import orjson
import pymysql
import pytest

from config.settings import Settings
from core.model import ColumnFlag, Op, RowChange, Value, column_type
from tests.ticdc_sink.check.conftest import commit
from tests.ticdc_sink.pipelines import (
    applied_resolved_ts,
    pipeline_env,
    pipeline_running,
    wait_for,
)
from ticdc_sink.check.run import CheckRequest, run_check
from ticdc_sink.produce import history_messages, send
from ticdc_sink.scenario import Transaction

pytestmark = pytest.mark.integration

UPSTREAM = "mysql://root@127.0.0.1:4000/"
DDL = "CREATE TABLE `{db}`.items (id BIGINT PRIMARY KEY, v VARCHAR(32), n INT)"
COLUMNS = {
    "id": column_type(8, int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)),
    "v": column_type(15, int(ColumnFlag.NULLABLE)),
    "n": column_type(3, int(ColumnFlag.NULLABLE)),
}
TRANSACTIONS = 60
PARTS = 3


def _workload(db: str, conn: pymysql.connections.Connection) -> list[Transaction]:
    """Transactions of 1-4 inserts, updates and deletes, run upstream; each with its commit ts
    and the row changes TiCDC would send for it (one per row a transaction touches: TiDB keeps
    a row's last write of a transaction only)."""
    rng = random.Random(7)
    rows: dict[int, dict[str, Value]] = {}
    history = []
    next_id = 1
    for number in range(TRANSACTIONS):
        statements: list[str] = []
        changes: list[tuple[Op, dict[str, Value] | None, dict[str, Value] | None]] = []
        touched: set[int] = set()
        for _ in range(rng.randint(1, 4)):
            kind = rng.random()
            untouched = sorted(set(rows) - touched)
            if kind < 0.5 or len(untouched) < 3:
                n = rng.choice([None, number])
                new: dict[str, Value] = {"id": next_id, "v": f"v{next_id}", "n": n}
                statements.append(
                    f"INSERT INTO `{db}`.items VALUES ({next_id}, 'v{next_id}', "
                    f"{'NULL' if n is None else n})"
                )
                rows[next_id] = new
                touched.add(next_id)
                next_id += 1
                changes.append((Op.INSERT, new, None))
            elif kind < 0.8:
                key = rng.choice(untouched)
                touched.add(key)
                old = rows[key]
                new = {**old, "v": f"u{number}", "n": number}
                statements.append(
                    f"UPDATE `{db}`.items SET v = 'u{number}', n = {number} WHERE id = {key}"
                )
                rows[key] = new
                changes.append((Op.UPDATE, new, old))
            else:
                key = rng.choice(untouched)
                touched.add(key)
                old = rows.pop(key)
                statements.append(f"DELETE FROM `{db}`.items WHERE id = {key}")
                changes.append((Op.DELETE, None, old))
        ts = commit(conn, statements)
        history.append(
            Transaction(
                ts, [RowChange(ts, db, "items", op, COLUMNS, new, old) for op, new, old in changes]
            )
        )
    return history


def _check(settings: Settings, db: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    request = CheckRequest(UPSTREAM, (f"{db}.*",), 7, 1, None, True, None)
    code = run_check(settings, request)
    document: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    assert code == 0, orjson.dumps(document).decode()
    return document


def test_every_checkpoint_the_sink_lands_on_matches_the_upstream_at_its_ts(
    pipeline: Settings,
    topic: str,
    upstream_db: str,
    tidb_connect: Callable[..., pymysql.connections.Connection],
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = upstream_db
    assert pipeline.group == db  # the pipeline's downstream database is the upstream's name
    with tidb_connect() as conn, conn.cursor() as cur:
        cur.execute(DDL.format(db=db))
        history = _workload(db, conn)
    from spark_sink.db.connection import connect

    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
        cur.execute(DDL.format(db=db))
    messages, final = history_messages(history, "open", 2)
    env = pipeline_env(pipeline, "open", TICDC_SINK_BATCH_ROWS="8")
    seen = set()
    with pipeline_running(env):
        step = len(messages) // PARTS + 1
        for first in range(0, len(messages), step):
            asyncio.run(send(pipeline, topic, 2, messages[first : first + step]))
            wait_for(lambda: applied_resolved_ts(pipeline) > 0, "a first checkpoint")
            seen.add(_check(pipeline, db, capsys)["ts"])
        wait_for(lambda: applied_resolved_ts(pipeline) == final, "the final checkpoint")
        seen.add(_check(pipeline, db, capsys)["ts"])
    assert final in seen
    assert len(seen) >= 2, f"every check landed on the same checkpoint: {seen}"
