"""Staged changes the planner cannot apply, through the sink's loop against the real MariaDB
and Redis: each is one dead letter naming its rule and commit ts, the rows around it apply, no
other downstream row changes, and the sink goes on (whatever TICDC_SINK_ON_ROW_ERROR says)."""

from __future__ import annotations

import orjson
import pytest

from config.settings import Settings
from core.model import ColumnFlag, Op, RowChange, Value, column_type
from core.staging import Staging, TopicPartition
from core.staging.dead_letters import RowLetter
from spark_sink.db.connection import connect
from spark_sink.loop import SinkLoop
from spark_sink.target import Target
from tests.spark_sink.keyed import TS

pytestmark = pytest.mark.integration

KEY = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
Image = dict[str, Value]
COLUMNS = {"id": column_type(3, KEY), "v": column_type(15, int(ColumnFlag.NULLABLE))}


def test_each_unplannable_change_is_one_dead_letter_and_no_other_row_changes(
    pipeline: Settings, staging: Staging, scratch_db: str
) -> None:
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE `{scratch_db}`.keyed (id INT PRIMARY KEY, v VARCHAR(8))")
        cursor.execute(f"INSERT INTO `{scratch_db}`.keyed VALUES (1, 'a'), (2, 'b'), (3, 'c')")

    def change(ts: int, op: Op, new: Image | None, old: Image | None) -> RowChange:
        return RowChange(TS + ts, scratch_db, "keyed", op, COLUMNS, new, old)

    bad = [
        change(1, Op.INSERT, {}, None),
        change(2, Op.DELETE, None, {}),
        change(3, Op.DELETE, None, {"v": "a"}),
        # Its old image without the key: row 2 must stay as it is.
        change(4, Op.UPDATE, {"id": 9, "v": "z"}, {"v": "b"}),
        # Its new image without the key: row 3 must not be deleted for it.
        change(5, Op.UPDATE, {"v": "z"}, {"id": 3, "v": "c"}),
        change(6, Op.UPDATE, {"id": 1, "v": "y"}, {}),
    ]
    good = [
        change(1, Op.INSERT, {"id": 4, "v": "d"}, None),
        change(7, Op.UPDATE, {"id": 1, "v": "x"}, {"id": 1, "v": "a"}),
    ]
    tp = TopicPartition("topic", 0)
    staging.stage(tp, 0, [*bad[:3], good[0]], watermark=TS + 3)
    staging.stage(tp, 1, [*bad[3:], good[1]], watermark=TS + 7)

    sink = SinkLoop(pipeline, staging, Target(pipeline))
    assert sink.run_once() == TS + 7

    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT id, v FROM `{scratch_db}`.keyed ORDER BY id")
        assert cursor.fetchall() == ((1, "x"), (2, "b"), (3, "c"), (4, "d"))
    letters = staging.dead_letters.entries()
    assert all(isinstance(letter, RowLetter) for letter in letters)
    found = sorted(
        (letter.commit_ts, letter.error) for letter in letters if isinstance(letter, RowLetter)
    )
    assert [ts for ts, _ in found] == [c.commit_ts for c in bad]
    rules = [error.split(": ", 1)[1] for _, error in found]
    assert rules == [
        "an INSERT without its new image",
        "a DELETE without its old image",
        "an image without a value for every key column of a keyed table (id)",
        "an image without a value for every key column of a keyed table (id)",
        "an image without a value for every key column of a keyed table (id)",
        "an UPDATE whose old image is empty",
    ]
    letter = next(
        item for item in letters if isinstance(item, RowLetter) and item.commit_ts == TS + 4
    )
    assert orjson.loads(letter.row) == {"new": {"id": 9, "v": "z"}, "old": {"v": "b"}}
    assert letter.table == f"{scratch_db}.keyed" and not letter.target
