"""A transaction larger than the downstream takes, for real: a MariaDB of this test's own with a
binary log and the smallest max_binlog_cache_size refuses it (error 1197). The sink says in one
line which limit to raise, applies nothing, waits, and applies it whole once the limit is raised."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
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
from ticdc_sink.services.base import Endpoint
from ticdc_sink.services.mariadb import MariaDBService

pytestmark = pytest.mark.integration

SINK_LOG = logging.getLogger("ticdc_sink.sink")
# The server's smallest max_binlog_cache_size: a few rows fill it.
SMALLEST_CACHE = 4096


class BinlogMariaDB(MariaDBService):
    """The local MariaDB's build with a binary log, on a port of its own, for this test only."""

    name = "mariadb-binlog"
    endpoint = Endpoint("127.0.0.1", 3316)

    def command(self) -> list[str]:
        return [*super().command(), "--log-bin=binlog", "--server-id=1", "--binlog-format=ROW"]


@pytest.fixture(scope="module")
def binlog_server() -> Iterator[BinlogMariaDB]:
    server = BinlogMariaDB()
    server.up()
    yield server
    server.down()


@pytest.fixture
def limited(pipeline: Settings, binlog_server: BinlogMariaDB, unique: str) -> Iterator[Settings]:
    url = f"mysql://root@127.0.0.1:{binlog_server.endpoint.port}/"
    settings = pipeline.updated({"downstream": url})
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{unique}`")
        # The limit is checked as the cache spills out of its in-memory buffer.
        cursor.execute(f"SET GLOBAL binlog_cache_size = {SMALLEST_CACHE}")
        cursor.execute(f"SET GLOBAL max_binlog_cache_size = {SMALLEST_CACHE}")
    yield settings
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute("SET GLOBAL max_binlog_cache_size = DEFAULT")
        cursor.execute("SET GLOBAL binlog_cache_size = DEFAULT")
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}`")
        cursor.execute(f"DROP DATABASE IF EXISTS `{settings.downstream.meta_db}`")


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
