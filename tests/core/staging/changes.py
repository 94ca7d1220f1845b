"""Rows and partitions the staging tests share."""

from __future__ import annotations

from core.model import Op, RowChange, column_type
from core.staging import TopicPartition

COLUMNS = {"id": column_type(8, 10), "v": column_type(15, 64)}
# A key-less table's columns: identical rows are distinct rows.
NO_KEY = {"a": column_type(3, 64), "b": column_type(15, 64)}
BIG_TS = 449_000_000_000_000_000  # above 2**53: must never go through a float


def row(ts: int, key: int, value: str = "x", op: Op = Op.INSERT) -> RowChange:
    image = {"id": key, "v": value}
    return RowChange(ts, "db", "t", op, COLUMNS, None if op is Op.DELETE else image, None)


P0, P1 = TopicPartition("topic", 0), TopicPartition("topic", 1)
