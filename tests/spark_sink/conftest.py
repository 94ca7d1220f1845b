"""A sink's pipeline of a test's own, for the tests of the sink's loop; a MariaDB with a binary
log whose transaction size limit a test sets, for the tests of transactions it refuses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from config.settings import Settings
from core.staging import Staging
from spark_sink.db.connection import connect
from ticdc_sink.services.base import Endpoint
from ticdc_sink.services.mariadb import MariaDBService

# The server's smallest max_binlog_cache_size: a few rows fill it.
SMALLEST_CACHE = 4096


@pytest.fixture
def pipeline(settings: Settings, unique: str, staging: Staging) -> Iterator[Settings]:
    """The settings of a pipeline named after the test, its staging area over one partition of
    ``topic``; its meta database is dropped afterwards. (The target's tests, which also run on
    TiDB, define theirs.)"""
    configured = settings.updated({"group": unique, "meta_db": f"{unique}_meta"})
    staging.set_partition_count("topic", 1)
    yield configured
    with connect(configured, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")


class BinlogMariaDB(MariaDBService):
    """The local MariaDB's build with a binary log, on a port of its own, for these tests only."""

    name = "mariadb-binlog"
    endpoint = Endpoint("127.0.0.1", 3316)

    def command(self) -> list[str]:
        return [*super().command(), "--log-bin=binlog", "--server-id=1", "--binlog-format=ROW"]


@pytest.fixture(scope="session")
def binlog_server() -> Iterator[BinlogMariaDB]:
    server = BinlogMariaDB()
    server.up()
    yield server
    server.down()


@pytest.fixture
def limited(pipeline: Settings, binlog_server: BinlogMariaDB, unique: str) -> Iterator[Settings]:
    """``pipeline`` writing into the binary-logged MariaDB, which refuses a transaction of more
    than a few rows (1197) until the test sets max_binlog_cache_size back to its default."""
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
