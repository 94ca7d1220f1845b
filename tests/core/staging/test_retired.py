"""Topics whose table went away: which DDL retires its topic (pure), and the retirement staged
with its DDL and read back by the resolved ts (real Redis)."""

from __future__ import annotations

import pytest

from core.model import DDLEvent
from core.staging import Staging, TopicPartition
from core.staging.retired import drops_database, leaving, retires_topic
from tests.core.staging.changes import BIG_TS, P0, P1


def _ddl(query: str, ddl_type: int | str = 0, ts: int = BIG_TS) -> DDLEvent:
    return DDLEvent(ts, "db", "t", query, ddl_type)


@pytest.mark.parametrize(
    ("query", "ddl_type", "retires"),
    [
        ("DROP TABLE `db`.`we`ird tab`", 4, True),  # TiCDC's rebuilt, unescaped query
        ("RENAME TABLE `db`.`t` TO `db`.`u`", 14, True),
        ("x", "ERASE", True),  # the Simple protocol's names
        ("x", "RENAME", True),
        # Canal-JSON carries no action code: the text tells.
        ("drop table if exists t", 0, True),
        ("/* c */ RENAME TABLES a TO b, c TO d", 0, True),
        ("ALTER TABLE `t` RENAME TO `u`", 0, True),
        ("ALTER TABLE t RENAME AS u", 0, True),
        ("ALTER TABLE t RENAME COLUMN a TO b", 0, False),
        ("ALTER TABLE t RENAME INDEX a TO b", 0, False),
        ("ALTER TABLE t RENAME KEY a TO b", 0, False),
        ("TRUNCATE TABLE t", 11, False),  # keeps its name, and its topic's checkpoints
        ("CREATE TABLE t (a INT)", 3, False),
        ("DROP DATABASE db", 2, False),  # sent to the default topic
        ("DROP VIEW v", 24, False),
    ],
)
def test_drop_and_rename_table_retire_their_topic(
    query: str, ddl_type: int | str, retires: bool
) -> None:
    assert retires_topic(_ddl(query, ddl_type)) is retires


@pytest.mark.parametrize(
    ("query", "ddl_type", "table", "drops"),
    [
        ("DROP DATABASE `db`", 2, None, True),
        ("x", 2, None, True),  # the action code is enough
        # Canal-JSON's codec guesses the action from the text; Simple names it QUERY.
        ("/* c */ drop schema if exists db", "QUERY", None, True),
        ("DROP DATABASE db", 0, None, True),
        ("CREATE DATABASE db", 1, None, False),
        ("DROP TABLE `db`.`t`", 4, "t", False),  # its own topic's (retires_topic)
        ("ALTER DATABASE db CHARACTER SET utf8mb4", 0, None, False),
    ],
)
def test_drop_database_is_told_by_its_action_or_its_text(
    query: str, ddl_type: int | str, table: str | None, drops: bool
) -> None:
    assert drops_database(DDLEvent(BIG_TS, "db", table, query, ddl_type)) is drops


A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
B0 = TopicPartition("b", 0)
D0 = TopicPartition("d", 0)


def test_a_drop_database_retires_every_other_topic_standing_at_it() -> None:
    # "d", the default topic, carried the DROP DATABASE at 10.
    marks: dict[TopicPartition, int | None] = {A0: 10, A1: 10, B0: 30, D0: 10}
    assert leaving(marks, {}, {}, {10: "d"}) == [A0, A1]
    # Its own topic gets every later checkpoint: it never leaves by it.
    assert leaving({**marks, A0: 30, A1: 30}, {}, {}, {10: "d"}) == []
    # Partitions apart (one not at the DROP yet, or past it again): the topic counts.
    assert leaving({**marks, A1: 9}, {}, {}, {10: "d"}) == []
    assert leaving({**marks, A1: 11}, {}, {}, {10: "d"}) == []
    # Two databases dropped: each one's topics stand at its own ts.
    assert leaving({**marks, B0: 20, D0: 30}, {}, {}, {10: "d", 20: "d"}) == [A0, A1, B0]
    # A table's own retirement and a database's beside it.
    assert leaving({**marks, B0: 5, D0: 30}, {}, {"b": 5}, {10: "d"}) == [A0, A1, B0]
    assert leaving(marks, {"a:1": 8}, {}, {10: "d"}) == []


def test_a_retired_topic_leaves_only_when_every_partition_stands_at_its_ddl() -> None:
    marks: dict[TopicPartition, int | None] = {A0: 10, A1: 10, B0: 30}
    assert leaving(marks, {}, {"a": 10}) == [A0, A1]
    # One partition has not passed the DDL yet (its checkpoint T is still to come).
    assert leaving({**marks, A1: 9}, {}, {"a": 10}) == []
    # A checkpoint past the DDL: the table is there again (CREATE TABLE of the name).
    assert leaving({**marks, A1: 11}, {}, {"a": 10}) == []
    # A partition holding a message waits for it.
    assert leaving(marks, {"a:0": 8}, {"a": 10}) == []
    # Never every partition: the resolved ts must come from some checkpoint.
    assert leaving({A0: 10, A1: 10}, {}, {"a": 10}) == []
    assert leaving(marks, {}, {}) == []


@pytest.mark.integration
def test_a_staged_drop_retires_its_topic_and_the_topic_counts_again_past_it(
    staging: Staging,
) -> None:
    staging.set_partition_count("other", 1)
    other = TopicPartition("other", 0)
    drop = _ddl("DROP TABLE `db`.`t`", 4, BIG_TS + 10)
    staging.stage(P0, 0, [], [drop])
    staging.stage(P1, 0, [], [drop])
    staging.stage(P0, 1, [], watermark=BIG_TS + 10)
    staging.stage(other, 0, [], watermark=BIG_TS + 50)
    # Partition 1 has not passed the DROP: everything counts.
    standing = staging.standing()
    assert (standing.resolved, standing.leaving) == (None, {})
    staging.stage(P1, 1, [], watermark=BIG_TS + 10)
    standing = staging.standing()
    assert standing.resolved == BIG_TS + 50
    assert standing.leaving == {P0: (BIG_TS + 10, 1), P1: (BIG_TS + 10, 1)}
    assert staging.global_resolved_ts() == BIG_TS + 10  # the plain minimum leaves nothing out
    # A replay of an older DROP does not take the retirement back.
    staging.stage(P0, 0, [], [_ddl("DROP TABLE `db`.`t`", 4, BIG_TS + 1)])
    assert staging.standing().leaving == standing.leaving
    # CREATE TABLE of the name again, then a checkpoint past the DROP: the topic counts again.
    staging.stage(P0, 2, [], [_ddl("CREATE TABLE `db`.`t` (a INT)", 3, BIG_TS + 60)])
    staging.stage(P0, 3, [], watermark=BIG_TS + 70)
    standing = staging.standing()
    assert (standing.resolved, standing.leaving) == (BIG_TS + 10, {})


@pytest.mark.integration
def test_a_staged_drop_database_retires_the_topics_standing_at_it_until_they_move_on(
    staging: Staging,
) -> None:
    default, table, other = (TopicPartition(name, 0) for name in ("p", "p_db_t", "p_x_u"))
    for tp in (default, table, other):
        staging.set_partition_count(tp.topic, 1)
    for tp in (P0, P1):
        staging.stage(tp, 0, [], watermark=BIG_TS + 100)
    drop = DDLEvent(BIG_TS + 10, "db", None, "DROP DATABASE `db`", 2)
    staging.stage(default, 0, [], [drop])
    staging.stage(default, 1, [], watermark=BIG_TS + 10)
    staging.stage(table, 0, [], watermark=BIG_TS + 10)
    staging.stage(other, 0, [], watermark=BIG_TS + 10)
    # Every topic at the DROP leaves but the one it came on (a table that still exists only
    # until its next checkpoint: safe, as Kafka's ends are checked before the gate takes it).
    standing = staging.standing()
    assert (standing.resolved, set(standing.leaving)) == (BIG_TS + 10, {table, other})
    staging.stage(default, 2, [], watermark=BIG_TS + 40)
    staging.stage(other, 1, [], watermark=BIG_TS + 50)
    standing = staging.standing()
    assert (standing.resolved, standing.leaving) == (BIG_TS + 40, {table: (BIG_TS + 10, 0)})
    # The database and the table made again: the topic's next checkpoint puts it back.
    staging.stage(table, 1, [], [_ddl("CREATE TABLE `db`.`t` (a INT)", 3, BIG_TS + 45)])
    staging.stage(table, 2, [], watermark=BIG_TS + 45)
    standing = staging.standing()
    assert (standing.resolved, standing.leaving) == (BIG_TS + 40, {})
