"""A keyed table of the sink's loop tests and what stages its rows (one partition, ``topic:0``)."""

from __future__ import annotations

from collections.abc import Callable

from config.settings import Settings
from core.model import ColumnFlag, Op, RowChange, column_type
from core.staging import Staging, TopicPartition
from spark_sink.db.connection import connect

TS = 449_200_000_000_000_000


def keyed_rows(
    pipeline: Settings, staging: Staging, scratch_db: str
) -> Callable[[int, int, int], None]:
    """A keyed table, and what stages its rows ``first..last`` (commit ts TS + id, watermark
    at the last) as the message at ``offset``."""
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE `{scratch_db}`.keyed (id INT PRIMARY KEY, v VARCHAR(8))")
    key = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
    columns = {"id": column_type(3, key), "v": column_type(15, int(ColumnFlag.NULLABLE))}

    def stage(offset: int, first: int, last: int) -> None:
        rows = [
            RowChange(TS + i, scratch_db, "keyed", Op.INSERT, columns, {"id": i, "v": "x"}, None)
            for i in range(first, last + 1)
        ]
        staging.stage(TopicPartition("topic", 0), offset, rows, watermark=TS + last)

    return stage
