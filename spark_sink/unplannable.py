"""Staged changes the planner cannot apply because of what they are, dead-lettered by the sink.

The workers check every event against its protocol's grammar before staging it; this is the
sink's own check behind theirs, on what a change must hold to be applied at all: the image its
op needs (an INSERT's new image, a DELETE's old one, an UPDATE's new one and an old one that is
not empty when present), columns, and every key column of a keyed table in each image (a key
column is never NULL). Such a change is left out of its batch and becomes a row dead letter
naming the rule it broke, with its table, commit ts, whatever images it carried and the Kafka
message it was staged from (topic, partition, offset: looked up in staging when it is
dead-lettered, see ``core/staging/origins.py``; "offset unknown" when its member is gone or Redis
did not answer, and the letter is written all the same): applied, it could only stop the sink
or write a row the upstream never held (an image without its key deletes or upserts by NULL).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import orjson

from core.model import RowChange
from core.redis_client import REDIS_TRANSIENT
from core.staging import Staging
from core.staging.origins import Origin
from spark_sink.dead_letters import add_dead_letters
from spark_sink.plan import Unplannable
from spark_sink.refused import jsonable

log = logging.getLogger("ticdc_sink.sink")


def describe(change: RowChange, rule: str, origin: Origin | None) -> str:
    """The one line naming the change, the message it came in and the rule it broke."""
    table_partition = (
        f", TiDB partition {change.partition_id}" if change.partition_id is not None else ""
    )
    message = (
        f"{origin.tp.field} offset {origin.offset}" if origin is not None else "offset unknown"
    )
    return (
        f"the sink cannot apply a staged {change.op.value.upper()} of "
        f"{change.schema}.{change.table} (commit ts {change.commit_ts}{table_partition}; "
        f"{message}): {rule}"
    )


def dead_letter(change: RowChange, rule: str, origin: Origin | None) -> dict[str, str]:
    """The fields of its row dead letter (``core/staging/dead_letters.py``): no key and no
    downstream target, so it is never replayed by hand as it stands; ``row`` holds both
    images as they were staged; ``topic``, ``partition`` and ``offset`` name its message
    when found."""
    images = {"new": change.new, "old": change.old}
    fields = {
        "kind": "row",
        "table": f"{change.schema}.{change.table}",
        "key": "{}",
        "column": "",
        "commit_ts": str(change.commit_ts),
        "error": describe(change, rule, origin),
        "row": orjson.dumps(images, default=jsonable).decode(),
        "target": "",
    }
    if origin is not None:
        fields |= {
            "topic": origin.tp.topic,
            "partition": str(origin.tp.partition),
            "offset": str(origin.offset),
        }
    return fields


def origins(staging: Staging, items: Sequence[Unplannable]) -> list[Origin | None]:
    """The message each of ``items`` came in; all unknown while Redis does not answer (the
    letters are written all the same, or wait with the batch for Redis)."""
    if not items:
        return []
    try:
        return staging.origins([change for change, _ in items])
    except REDIS_TRANSIENT as error:
        log.warning("the messages of %d unplannable changes are unknown: %s", len(items), error)
        return [None] * len(items)


def dead_letter_all(
    staging: Staging, group: str, items: Sequence[Unplannable], max_entries: int
) -> None:
    """Dead-letter ``items`` (in release order) in one round trip after one look-up of their
    messages, each named in the log."""
    letters = [
        (dead_letter(change, rule, origin), describe(change, rule, origin))
        for (change, rule), origin in zip(items, origins(staging, items), strict=True)
    ]
    add_dead_letters(staging, group, letters, max_entries)
