"""A transaction larger than the downstream takes, for real: a MariaDB of these tests' own with a
binary log and the smallest max_binlog_cache_size refuses it (error 1197; ``limited`` in the
conftest). The sink says in one line which limit to raise, applies nothing, waits, and applies
it whole once the limit is raised."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from config.settings import Settings
from core.outage import Outage
from core.staging import Staging
from spark_sink.db.checkpoint import CheckpointWatch
from spark_sink.db.connection import connect
from spark_sink.leader import LeaderLock
from spark_sink.loop import SinkLoop
from spark_sink.run import lead
from spark_sink.target import Target
from tests.spark_sink.big_transaction import TS, create_table, stage_big_transaction, table_rows

pytestmark = pytest.mark.integration

SINK_LOG = logging.getLogger("ticdc_sink.sink")


@pytest.mark.parametrize("chunk_rows", [100_000, 100], ids=["one-part", "in-parts"])
def test_a_transaction_over_the_downstream_limit_names_the_limit_and_waits_losing_nothing(
    limited: Settings,
    staging: Staging,
    unique: str,
    redis_client: Any,
    chunk_rows: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = limited.updated({"chunk_rows": chunk_rows})
    create_table(settings, unique)
    big = stage_big_transaction(staging, unique, base=1_000)
    sink = SinkLoop(settings, staging, Target(settings))
    lock = LeaderLock(redis_client, staging.keys)
    assert lock.acquire()
    stop = threading.Event()
    leading = threading.Thread(
        target=lead, args=(sink, lock, lambda: False, Outage("Redis", SINK_LOG), False, stop)
    )
    with caplog.at_level(logging.INFO, SINK_LOG.name):
        leading.start()
        try:
            deadline = time.monotonic() + 60
            while "larger than the downstream takes" not in caplog.text:
                assert leading.is_alive() and time.monotonic() < deadline
                stop.wait(0.1)
            # Nothing of it applied, however long the sink waits.
            with CheckpointWatch(settings) as watch:
                assert watch.applied_resolved_ts() < TS + 1
            assert table_rows(settings, unique) in ([], big.before)
            with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
                cursor.execute("SET GLOBAL max_binlog_cache_size = DEFAULT")
            for _ in range(600):
                with CheckpointWatch(settings) as watch:
                    if watch.applied_resolved_ts() == TS + 1:
                        break
                assert leading.is_alive()
                stop.wait(0.1)
        finally:
            stop.set()
            leading.join(timeout=60)
            lock.release()
    assert table_rows(settings, unique) == big.after
    said = [r.getMessage() for r in caplog.records]
    lines = [line for line in said if "larger than the downstream" in line]
    # One line, said once while it lasts, naming the setting to raise.
    assert len(lines) == 1
    assert "raise the server's max_binlog_cache_size" in lines[0]
    assert "Traceback" not in caplog.text
