"""Topics whose table went away: which DDL retires its topic (pure), and the retirement staged
with its DDL and read back by the resolved ts (real Redis)."""

from __future__ import annotations

import pytest

from core.model import DDLEvent
from core.staging import Staging, TopicPartition
from core.staging.retired import leaving, retires_topic
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


A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
B0 = TopicPartition("b", 0)


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
