"""Where released rows were staged from: the Kafka message (topic, partition, offset) of a
change, found again among the staged members at its commit ts.

Release does not carry a row's message: every row would pay for what only the rare change the
sink dead-letters needs. A row member names its message (``layout.py``: commit ts, offset, first
event index), so a change's is looked up when asked: every partition's members at its commit ts,
a page at a time, each row read back and compared with the change. A change takes the first
member holding a row equal to it, in release order (partition by partition, each by offset);
a staged row is taken by one change at most, so identical rows of a key-less table (distinct
rows upstream) each name a message of their own. A change whose members are gone (trimmed) is
not found.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from core.model import RowChange
from core.packed import unpack_row
from core.redis_client import RedisClient
from core.staging.keys import Keys, TopicPartition
from core.staging.layout import (
    OFFSET_DIGITS,
    TS_DIGITS,
    after,
    member_rows,
    ts_hex,
)

# Members one look-up reads per partition and commit ts in a round trip: bounds its memory when
# the change is one of a large transaction (a member holds 8 KiB of rows, or one larger row).
LOOKUP_PAGE = 128

Unpack = Callable[[int, bytes], RowChange]


@dataclass(frozen=True, slots=True)
class Origin:
    """The Kafka message a staged row came in."""

    tp: TopicPartition
    offset: int


def member_offset(member: bytes) -> int:
    """The Kafka offset a row member names."""
    return int(member[TS_DIGITS : TS_DIGITS + OFFSET_DIGITS], 16)


def match_page(
    page: Sequence[bytes],
    tp: TopicPartition,
    changes: Sequence[RowChange],
    waiting: list[int],
    unpack: Unpack = unpack_row,
) -> dict[int, Origin]:
    """The changes of ``waiting`` (indexes into ``changes``, all at one commit ts, in release
    order) that a row of ``page`` (members of ``tp`` at that ts, in order) holds, each with its
    message; those found leave ``waiting``."""
    found: dict[int, Origin] = {}
    for member in page:
        if not waiting:
            break
        commit_ts = int(member[:TS_DIGITS], 16)
        for body in member_rows(member):
            row: RowChange | None = None
            for at, index in enumerate(waiting):
                change = changes[index]
                # Names before unpacking: most rows of a large transaction are another table's.
                if change.table.encode() not in body or change.schema.encode() not in body:
                    continue
                row = unpack(commit_ts, body) if row is None else row
                if row == change:
                    found[index] = Origin(tp, member_offset(member))
                    del waiting[at]
                    break
    return found


def find_origins(
    client: RedisClient,
    keys: Keys,
    partitions: Sequence[TopicPartition],
    changes: Sequence[RowChange],
) -> list[Origin | None]:
    """The message each of ``changes`` (released, in release order) was staged from, None for
    one no staged member holds any more; a round trip per page of every partition still read."""
    origins: list[Origin | None] = [None] * len(changes)
    waiting: dict[int, list[int]] = {}
    for index, change in enumerate(changes):
        waiting.setdefault(change.commit_ts, []).append(index)
    # Per (partition, commit ts) still to read: the lower bound of its next page.
    lows = {(tp, ts): b"[" + ts_hex(ts) for ts in waiting for tp in partitions}
    while True:
        reads = [(tp, ts) for tp, ts in lows if waiting[ts]]
        if not reads:
            return origins
        pipe = client.pipeline(transaction=False)
        for tp, ts in reads:
            pipe.zrangebylex(keys.rows(tp), lows[(tp, ts)], after(ts), start=0, num=LOOKUP_PAGE)
        # Members are bytes: the client does not decode replies.
        pages = cast(list[list[bytes]], pipe.execute())
        for (tp, ts), page in zip(reads, pages, strict=True):
            for index, origin in match_page(page, tp, changes, waiting[ts]).items():
                origins[index] = origin
            if len(page) < LOOKUP_PAGE:
                del lows[(tp, ts)]
            else:
                lows[(tp, ts)] = b"(" + page[-1]
