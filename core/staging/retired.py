"""Topics whose table went away: which DDL retires the topic it is read from (or, for a DROP
DATABASE, the topics of the database's tables), and which partitions of retired topics leave
the global resolved ts.

With a topic per table (TiCDC's topic dispatcher), a DROP TABLE or RENAME TABLE is sent to the
old table's own topic, and from then on that topic gets no checkpoint: TiCDC writes checkpoints
only to the topics of the tables that exist at that ts, plus the default topic
(pingcap/tiflow ``cdc/sink/ddlsink/mq/mq_ddl_sink.go`` ``WriteCheckpointTs`` over
``cdc/sink/dmlsink/mq/dispatcher/event_router.go`` ``GetActiveTopics``; the table list from
``cdc/owner/ddl_manager.go``). Its partitions would hold the minimum watermark at the DDL's
commit ts for good. The worker records "topic retired at ts T" (the ``retired`` hash) in the
transaction that stages such a DDL; a retired topic's partitions then leave the minimum while
(a) every one of them stands exactly at T (each has passed the DDL, and none has had a checkpoint
since: a later CREATE TABLE of that name brings checkpoints back, and the topic counts again) and
(b) Kafka holds nothing on them that staging lacks, checked after the watermarks were read
(spark_sink/topic_gate.py): a message written after that check was written after every
checkpoint read, so its commit ts is above the resolved ts they give.

DROP DATABASE has no table: TiCDC sends it to the default topic (``event_router.go``
``GetTopicForDDL``), followed everywhere by checkpoint T routed with the tables from before it
(``cdc/owner/ddl_sink.go``), then drops the database's tables from ``GetActiveTopics``. Their
topics stand at T for good, like a dropped table's, with no DDL of their own to retire them. The
worker records the DROP DATABASE's ts (the ``dropped`` hash: ts -> the topic it was read from),
and any other topic all of whose partitions stand exactly at such a ts is retired at it. Which
topics were the database's no worker can know (a topic name is not a table name, and a table
that existed before the changefeed started may have no DDL in it): a topic of a table that still
exists stands at T only until the next checkpoint, and leaving it meanwhile is as safe as for
any retired topic, by (b).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from core.model import DDLEvent
from core.staging.keys import TopicPartition

# TiDB's action codes (pingcap/tidb ``pkg/meta/model/job.go``): DROP TABLE, RENAME TABLE; and the
# Simple protocol's names for them.
_RETIRING_ACTIONS = {4, 14, "ERASE", "RENAME"}
# Canal-JSON carries no action code: the query's text tells. ``ALTER TABLE t RENAME [TO|AS] u``
# renames the table; ``RENAME COLUMN``, ``RENAME INDEX`` and ``RENAME KEY`` do not.
# TiDB's DROP DATABASE (action 2; Canal-JSON's codec guesses it from the text, as TiCDC's does),
# and its text for the Simple protocol, which names it ``QUERY``.
_DROP_DATABASE_ACTION = 2
_DROP_DATABASE_TEXT = re.compile(
    r"\s*(?:/\*.*?\*/\s*)*drop\s+(?:database|schema)\b", re.IGNORECASE | re.DOTALL
)
_RETIRING_TEXT = re.compile(
    r"\s*(?:/\*.*?\*/\s*)*(?:drop\s+table\b|rename\s+tables?\b|alter\s+table\s+.+?\s+rename\s+"
    r"(?!column\b|index\b|key\b))",
    re.IGNORECASE | re.DOTALL,
)


def retires_topic(ddl: DDLEvent) -> bool:
    """Whether ``ddl`` takes away the table of the topic it is read from (DROP TABLE, RENAME
    TABLE: TiCDC sends both to the old table's topic)."""
    if ddl.ddl_type in _RETIRING_ACTIONS:
        return True
    return bool(_RETIRING_TEXT.match(ddl.query))


def drops_database(ddl: DDLEvent) -> bool:
    """Whether ``ddl`` is a DROP DATABASE (sent to the default topic: it retires the topics of
    the database's tables, not its own)."""
    if ddl.ddl_type == _DROP_DATABASE_ACTION:
        return True
    return ddl.table is None and bool(_DROP_DATABASE_TEXT.match(ddl.query))


def leaving(
    marks: Mapping[TopicPartition, int | None],
    held: Mapping[str, int],
    retired: Mapping[str, int],
    dropped: Mapping[int, str] | None = None,
) -> list[TopicPartition]:
    """The partitions of retired topics that may leave the minimum once Kafka shows nothing
    unstaged on them: every partition of the topic stands at one ts, none holds a message, and
    that ts is the topic's retirement (``retired``: topic -> its DROP or RENAME TABLE's commit
    ts) or a DROP DATABASE's read from another topic (``dropped``: commit ts -> that topic).
    Never all of ``marks``: the resolved ts must still come from some partition's checkpoint."""
    dropped = dropped or {}
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in marks:
        by_topic.setdefault(tp.topic, []).append(tp)
    out = [
        tp
        for topic, partitions in sorted(by_topic.items())
        if _retired_at(topic, {marks[tp] for tp in partitions}, retired, dropped)
        and not any(tp.field in held for tp in partitions)
        for tp in partitions
    ]
    return out if len(out) < len(marks) else []


def _retired_at(
    topic: str, stands: set[int | None], retired: Mapping[str, int], dropped: Mapping[int, str]
) -> bool:
    """Whether a topic whose partitions stand at ``stands`` is retired at where they stand."""
    if len(stands) != 1:
        return False
    (ts,) = stands
    if ts is None:
        return False
    return retired.get(topic) == ts or dropped.get(ts, topic) != topic
