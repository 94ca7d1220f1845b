"""Fixtures of the check's tests: a database of the test's own on the upstream TiDB, and the
pipeline's downstream (MariaDB) with its own meta database, both dropped afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest

from config.settings import Settings
from spark_sink.db.checkpoint import CheckpointTable
from spark_sink.db.connection import connect
from spark_sink.db.dialect import Server, server_dialect


@pytest.fixture
def upstream_db(
    tidb_connect: Callable[..., pymysql.connections.Connection], unique: str, tidb_safe_point: None
) -> Iterator[str]:
    with tidb_connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{unique}`")
    yield unique
    with tidb_connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{unique}`")


@pytest.fixture
def checked(downstream_settings: Settings, unique: str) -> Iterator[tuple[Settings, str]]:
    """The settings of a pipeline of the test's own and the database it replicates into: on
    MariaDB ``unique``, on the TiDB that is also the upstream ``unique_down``
    (``downstream_settings`` parametrized ``indirect`` with ``"tidb"``)."""
    configured = downstream_settings.updated({"group": unique, "meta_db": f"{unique}_meta"})
    with connect(configured, autocommit=True) as conn, conn.cursor() as cur:
        on_tidb = server_dialect(cur).server is Server.TIDB
        database = f"{unique}_down" if on_tidb else unique
        cur.execute(f"CREATE DATABASE `{database}`")
    yield configured, database
    with connect(configured, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        cur.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")


def commit(conn: pymysql.connections.Connection, statements: list[str]) -> int:
    """Run ``statements`` as one transaction; its commit ts, as TiDB reports it."""
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        for statement in statements:
            cur.execute(statement)
        cur.execute("COMMIT")
        cur.execute("SELECT JSON_EXTRACT(@@tidb_last_txn_info, '$.commit_ts')")
        (ts,) = cur.fetchone()
    return int(ts)


def record_checkpoint(conn: pymysql.connections.Connection, settings: Settings, ts: int) -> None:
    """What the sink records with the batch that reached ``ts``."""
    with conn.cursor() as cur:
        table = CheckpointTable(settings.downstream.meta_db, settings.group)
        table.create(cur)
        table.advance(cur, ts, 1, {})
    conn.commit()


def copy_rows(upstream: Any, downstream: Any, source: str, target: str, ts: int) -> None:
    """The rows of ``source`` (``db.table``) as of ``ts`` upstream, written downstream into
    ``target`` as they read."""
    with upstream.cursor() as up, downstream.cursor() as down:
        up.execute("SET @@tidb_snapshot = %s", (str(ts),))
        up.execute(f"SELECT * FROM {source}")
        rows = up.fetchall()
        up.execute("SET @@tidb_snapshot = ''")
        if rows:
            marks = ", ".join(["%s"] * len(rows[0]))
            down.executemany(f"INSERT INTO {target} VALUES ({marks})", rows)
    downstream.commit()
