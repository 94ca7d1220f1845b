"""Staged changes the planner cannot apply, through the sink's loop against the real MariaDB
and Redis: each is one dead letter naming its rule, commit ts and the Kafka message it came in,
the rows around it apply, no other downstream row changes, and the sink goes on (whatever
TICDC_SINK_ON_ROW_ERROR says); a change whose message is not found still is one."""

from __future__ import annotations

from collections.abc import Sequence

import orjson
import pytest
import redis

from config.settings import Settings
from core.model import ColumnFlag, Op, RowChange, Value, column_type
from core.redis_client import RedisClient
from core.staging import Staging, TopicPartition
from core.staging.dead_letters import RowLetter
from core.staging.origins import Origin
from spark_sink.db.connection import connect
from spark_sink.loop import SinkLoop
from spark_sink.plan import NO_NEW
from spark_sink.target import Target
from spark_sink.unplannable import dead_letter_all
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
    assert (letter.tp, letter.offset) == (tp, 1)


def _row_letters(staging: Staging) -> list[RowLetter]:
    letters = staging.dead_letters.entries()
    assert all(isinstance(letter, RowLetter) for letter in letters)
    return [letter for letter in letters if isinstance(letter, RowLetter)]


def test_an_unplannable_change_names_the_message_it_came_in(
    pipeline: Settings, staging: Staging, scratch_db: str
) -> None:
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE `{scratch_db}`.keyed (id INT PRIMARY KEY, v VARCHAR(8))")

    def change(op: Op, new: Image | None, old: Image | None) -> RowChange:
        return RowChange(TS + 1, scratch_db, "keyed", op, COLUMNS, new, old)

    without_key = change(Op.INSERT, {"v": "a"}, None)
    without_image = change(Op.INSERT, None, None)
    p0, p1 = TopicPartition("topic", 0), TopicPartition("topic", 1)
    staging.set_partition_count("topic", 2)
    # Three messages of one transaction: two in one partition, one holding its bad change after
    # a good row.
    staging.stage(p0, 10, [change(Op.INSERT, {"id": 1, "v": "a"}, None)])
    staging.stage(p0, 11, [change(Op.INSERT, {"id": 2, "v": "b"}, None), without_key])
    staging.stage(p0, 12, [], watermark=TS + 1)
    staging.stage(p1, 3, [without_image], watermark=TS + 1)

    assert SinkLoop(pipeline, staging, Target(pipeline)).run_once() == TS + 1

    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT id FROM `{scratch_db}`.keyed ORDER BY id")
        assert cursor.fetchall() == ((1,), (2,))
    found = {orjson.loads(letter.row)["new"] is None: letter for letter in _row_letters(staging)}
    assert (found[False].tp, found[False].offset) == (p0, 11)
    assert (found[True].tp, found[True].offset) == (p1, 3)
    assert "; topic:0 offset 11): an image without a value" in found[False].error
    assert "; topic:1 offset 3): an INSERT without its new image" in found[True].error


class RedisAway(Staging):
    """A staging area whose look-up of messages finds Redis away."""

    def origins(self, changes: Sequence[RowChange]) -> list[Origin | None]:
        raise redis.ConnectionError("Connection refused")


def test_a_change_whose_message_is_not_found_is_dead_lettered_all_the_same(
    staging: Staging, redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    trimmed = RowChange(TS + 1, "db", "keyed", Op.INSERT, COLUMNS, None, None)
    staging.stage(TopicPartition("topic", 0), 4, [trimmed])
    staging.trim(TS + 1)
    rule = NO_NEW.format(op="INSERT")
    dead_letter_all(staging, "group", [(trimmed, rule)], 100)
    away = RedisAway(redis_client, staging.pipeline)
    dead_letter_all(away, "group", [(trimmed, rule)], 100)
    letters = _row_letters(staging)
    assert len(letters) == 2
    for letter in letters:
        assert (letter.tp, letter.offset) == (None, None)
        assert f"(commit ts {TS + 1}; offset unknown): {rule}" in letter.error
        assert letter.where.endswith(f"@{TS + 1}")
    assert "the messages of 1 unplannable changes are unknown: Connection refused" in caplog.text
