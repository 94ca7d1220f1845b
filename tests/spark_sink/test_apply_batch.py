"""A batch applied atomically with its checkpoint (spark_sink/apply_batch.py) against the real
MariaDB: a retry after a commit whose reply was lost does not apply the batch twice."""

from __future__ import annotations

from typing import Any

import pytest

from config.settings import Settings
from spark_sink.db.connection import connect
from spark_sink.target import Target

pytestmark = pytest.mark.integration

TS = 449_200_000_000_000_000


def test_a_batch_whose_commit_reply_was_lost_is_not_applied_twice(
    pipeline: Settings, scratch_db: str
) -> None:
    import pymysql

    from core.model import ColumnFlag, Op, RowChange, column_type
    from spark_sink.plan import plan_batch

    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE `{scratch_db}`.nokey (a INT, b VARCHAR(8))")
    columns = {"a": column_type(3, int(ColumnFlag.NULLABLE)), "b": column_type(15, 0)}
    rows = [
        RowChange(TS, scratch_db, "nokey", Op.INSERT, columns, {"a": i, "b": "x"}, None)
        for i in range(3)
    ]
    target = Target(pipeline)
    lost_once = []
    advance = target.checkpoints.advance

    def commit_then_lose_the_reply(*args: Any) -> None:
        advance(*args)
        # As a server killed after it wrote the commit: done, but the client hears nothing.
        if not lost_once:
            lost_once.append(True)
            target.connection().commit()
            raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server")

    target.checkpoints.advance = commit_then_lose_the_reply  # type: ignore[method-assign]
    target.apply_batch(plan_batch(rows), TS, 0, {})
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM `{scratch_db}`.nokey")
        assert cursor.fetchone() == (3,)
