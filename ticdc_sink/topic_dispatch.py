"""Which topic, and which of its partitions, each message of a TiCDC changefeed goes to, for its
topic dispatcher (pingcap/tiflow):

- A row: the topic expression filled with its schema and table, each character outside
  ``[A-Za-z0-9._-]`` of the names replaced by ``_`` (``cdc/sink/dmlsink/mq/dispatcher/topic/
  expression.go`` ``Substitute``, via ``event_router.go`` ``GetTopicForRowChange``); its partition
  is the partition dispatcher's (``dispatchers.py``).
- A DDL (``event_router.go`` ``GetTopicForDDL``): one without a table (CREATE/DROP/ALTER DATABASE)
  to the default topic; a table's to the topic of the table's name before the DDL (a RENAME to
  the old name's topic). To every partition of it, but partition 0 alone for Canal-JSON
  (``cdc/sink/ddlsink/mq/mq_ddl_sink.go`` ``getDDLDispatchRule``, ``WriteDDLEvent``).
- A checkpoint (``mq_ddl_sink.go`` ``WriteCheckpointTs`` over ``event_router.go``
  ``GetActiveTopics``): every partition of the default topic and of the topics of the tables that
  exist at that ts (the table list from ``cdc/owner/ddl_manager.go``); the checkpoint TiCDC forces
  after a DDL (``cdc/owner/ddl_sink.go``) still goes to the tables from before it.

With no topic dispatcher (``none``) everything goes to the default topic.
"""

from __future__ import annotations

import re
from enum import StrEnum

from config.settings import Protocol
from core.model import DDLEvent

_KAFKA_FORBIDDEN = re.compile(r"[^A-Za-z0-9._-]")
# Kafka's longest topic name.
TOPIC_MAX = 249


class TopicDispatcher(StrEnum):
    """The topic expressions ``produce --topic-dispatcher`` takes, after ``<topic>_``."""

    NONE = "none"
    SCHEMA = "{schema}"
    TABLE = "{schema}_{table}"


def substitute(expression: str, schema: str, table: str) -> str:
    """TiCDC's ``Expression.Substitute``: the names put in, their forbidden characters as ``_``,
    cut to Kafka's longest name; ``.`` and ``..`` are not topics."""
    name = expression.replace("{schema}", _KAFKA_FORBIDDEN.sub("_", schema)).replace(
        "{table}", _KAFKA_FORBIDDEN.sub("_", table)
    )
    return {".": "_", "..": "__"}.get(name, name[:TOPIC_MAX])


class TopicRouter:
    """The topics of one changefeed as it runs: ``default`` its sink URI's topic, ``dispatcher``
    its topic rule, ``partitions`` each topic's partition count. It follows the tables that exist
    through the DDL it routes."""

    def __init__(
        self, default: str, dispatcher: TopicDispatcher, partitions: int, protocol: str
    ) -> None:
        self.default = default
        self.dispatcher = dispatcher
        self.partitions = partitions
        self.protocol = protocol
        self._expression = f"{default}_{dispatcher.value}"
        # The tables that exist, in the order they were made (a checkpoint's topics follow it).
        self._tables: dict[tuple[str, str], None] = {}

    def topic_of(self, schema: str, table: str) -> str:
        """The topic of a table's rows."""
        if self.dispatcher is TopicDispatcher.NONE:
            return self.default
        return substitute(self._expression, schema, table)

    def ddl(self, ddl: DDLEvent, before: tuple[str, str] | None = None) -> tuple[str, list[int]]:
        """The topic and partitions of ``ddl`` (``before``: the table's name before it, for a
        RENAME; by default the event's); the tables that exist follow it."""
        schema, table = ddl.schema or "", ddl.table or ""
        old = before or (schema, table)
        # A DDL without a table (a database's) goes to the default topic.
        topic = self.topic_of(*old) if table else self.default
        kind = _kind(ddl)
        if kind == "drop-schema":
            for name in [name for name in self._tables if name[0] == schema]:
                del self._tables[name]
        elif kind == "drop":
            self._tables.pop(old, None)
        elif kind == "rename":
            self._tables.pop(old, None)
            self._tables[(schema, table)] = None
        elif kind == "create" and table:
            self._tables[(schema, table)] = None
        every = list(range(self.partitions))
        return topic, [0] if self.protocol == Protocol.CANAL_JSON else every

    def checkpoint_topics(self) -> list[str]:
        """The topics a checkpoint goes to now, to every partition: the default topic, then
        those of the tables that exist (each once)."""
        topics = [self.default]
        for name in self._tables:
            topic = self.topic_of(*name)
            if topic not in topics:
                topics.append(topic)
        return topics


def _kind(ddl: DDLEvent) -> str:
    """What ``ddl`` does to the set of tables: create, drop, rename, drop-schema, or nothing."""
    words = ddl.query.lstrip().split(None, 2)
    head = " ".join(words[:2]).upper()
    if head == "CREATE TABLE" or ddl.ddl_type == 3:
        return "create"
    if head == "DROP TABLE" or ddl.ddl_type == 4:
        return "drop"
    if head == "RENAME TABLE" or ddl.ddl_type == 14:
        return "rename"
    if head in ("DROP DATABASE", "DROP SCHEMA") or ddl.ddl_type == 2:
        return "drop-schema"
    return ""
