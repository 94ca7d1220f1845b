"""Topics whose table went away: which DDL retires the topic it is read from, and which
partitions of retired topics leave the global resolved ts.

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


def leaving(
    marks: Mapping[TopicPartition, int | None],
    held: Mapping[str, int],
    retired: Mapping[str, int],
) -> list[TopicPartition]:
    """The partitions of retired topics (``retired``: topic -> the DDL's commit ts) that may
    leave the minimum once Kafka shows nothing unstaged on them: every partition of the topic
    stands at the DDL's ts, none holds a message. Never all of ``marks``: the resolved ts must
    still come from some partition's checkpoint."""
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in marks:
        if tp.topic in retired:
            by_topic.setdefault(tp.topic, []).append(tp)
    out = [
        tp
        for topic, partitions in sorted(by_topic.items())
        if all(marks[tp] == retired[topic] and tp.field not in held for tp in partitions)
        for tp in partitions
    ]
    return out if len(out) < len(marks) else []
