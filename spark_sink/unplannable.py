"""Staged changes the planner cannot apply because of what they are, dead-lettered by the sink.

The workers check every event against its protocol's grammar before staging it; this is the
sink's own check behind theirs, on what a change must hold to be applied at all: the image its
op needs (an INSERT's new image, a DELETE's old one, an UPDATE's new one and an old one that is
not empty when present), columns, and every key column of a keyed table in each image (a key
column is never NULL). Such a change is left out of its batch and becomes a row dead letter
naming the rule it broke, with its table, commit ts and whatever images it carried: applied, it
could only stop the sink or write a row the upstream never held (an image without its key
deletes or upserts by NULL).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from core.model import RowChange
from core.staging import Staging
from spark_sink.dead_letters import add_dead_letters
from spark_sink.plan import Unplannable
from spark_sink.refused import jsonable


def describe(change: RowChange, rule: str) -> str:
    """The one line naming the change and the rule it broke."""
    where = f" in partition {change.partition_id}" if change.partition_id is not None else ""
    return (
        f"the sink cannot apply a staged {change.op.value.upper()} of "
        f"{change.schema}.{change.table} (commit ts {change.commit_ts}{where}): {rule}"
    )


def dead_letter(change: RowChange, rule: str) -> dict[str, str]:
    """The fields of its row dead letter (``core/staging/dead_letters.py``): no key and no
    downstream target, so it is never replayed by hand as it stands; ``row`` holds both
    images as they were staged."""
    images = {"new": change.new, "old": change.old}
    return {
        "kind": "row",
        "table": f"{change.schema}.{change.table}",
        "key": "{}",
        "column": "",
        "commit_ts": str(change.commit_ts),
        "error": describe(change, rule),
        "row": orjson.dumps(images, default=jsonable).decode(),
        "target": "",
    }


def dead_letter_all(
    staging: Staging, group: str, items: Sequence[Unplannable], max_entries: int
) -> None:
    """Dead-letter ``items`` in one round trip, each named in the log."""
    letters = [(dead_letter(change, rule), describe(change, rule)) for change, rule in items]
    add_dead_letters(staging, group, letters, max_entries)
