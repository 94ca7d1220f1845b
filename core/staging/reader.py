"""The sink's side of staging: release in commit-ts order, replay offsets, lineage, trim."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import cast

from core.model import DDLEvent, RowChange
from core.redis_client import RedisClient
from core.staging import scripts
from core.staging.keys import Keys, TopicPartition
from core.staging.layout import (
    TS_DIGITS,
    after,
    as_bytes,
    below,
    ddl_id,
    mark_offset,
    ts_hex,
    unpack_ddl_member,
)
from core.staging.members import Copies, member_reader, merge_by_ts
from core.staging.origins import Origin, find_origins
from core.staging.watermarks import WatermarkReader

# Members fetched per ZRANGEBYLEX call while releasing: bounds the sink's memory per partition,
# to MEMBER_BYTES (8 KiB) or one row a member: at most 8 MiB, 64k rows.
RELEASE_PAGE = 1_000
# A page's bytes aimed at: a row larger than MEMBER_BYTES is a member alone, so 1,000 members of
# 1 MB rows would be 1 GB a partition; a key's pages shrink to this after a page of big members.
RELEASE_PAGE_BYTES = 8 << 20
# A key's first page, before its members' size is known: what one page of unknown rows may hold.
FIRST_RELEASE_PAGE = 16
# Members one trim script call deletes at most: bounds how long it holds Redis (its work is per
# member, plus the bytes it frees).
TRIM_PAGE = 4_000

# Members unpacked per call: at most 4,096 rows (MEMBER_ROWS a member), so a batch is cut without
# waiting for a window (a page per partition); fewer members a call pay more in calls per row
# (bench_scale, its unpack stage).
UNPACK_CHUNK = 64
# Bodies of keyed rows remembered at one commit ts to collapse copies: without a bound a
# transaction of millions of rows would be held again as its bodies. A copy past it is planned
# twice, which the plan's one final action per key makes harmless.
COPIES_REMEMBERED = 100_000
# Above every hex digit: a commit-ts prefix followed by it sorts after every member of that ts.
_PAST_TS = b"\xff"


@dataclass(frozen=True, slots=True)
class Barrier:
    """A DDL that must run after every change before it and before every change after it."""

    ddl: DDLEvent


class StagingReader:
    """What the sink reads from one pipeline's staging area, and what it trims once applied."""

    def __init__(self, client: RedisClient, keys: Keys, marks: WatermarkReader) -> None:
        self._client = client
        self.keys = keys
        self._marks = marks
        self._trim = client.register_script(scripts.TRIM)
        self._members = member_reader()
        # Per key, the members its next page fetches (see RELEASE_PAGE_BYTES).
        self._page_members: dict[str, int] = {}

    def release(self, after: int, upto: int) -> Iterator[RowChange | Barrier]:
        """Staged changes with ``after < commit_ts <= upto``, in commit-ts order across partitions.

        DDL come out as barriers in their place (after every row with a smaller or equal commit
        ts, before every row with a greater one). Copies of one row version of a table with a
        key (TiCDC re-sends) collapse; a key-less table's identical rows at one commit ts stay
        apart (they are distinct rows upstream), unless they are one staged change: the same
        partition, offset and event index, as Kafka re-delivers it. Rows of one commit ts come
        partition by partition. Reads page by page, so memory is bounded by the page size per
        partition (see :func:`~core.staging.members.merge_by_ts`).
        """
        if upto <= after:
            return
        pages = [self._pages(self.keys.rows(tp), after, upto) for tp in self._marks.partitions()]
        ddls = self._scan(self.keys.ddl, after, upto)
        pending_ddl = next(ddls, None)
        copies = Copies()
        rows = self._rows
        for window in merge_by_ts(pages):
            start = 0
            while pending_ddl is not None:
                # The window's members up to the DDL's commit ts come before it.
                cut = bisect_left(window, pending_ddl[:TS_DIGITS] + _PAST_TS, start)
                if cut == len(window):
                    break
                yield from rows(window, start, cut, copies)
                yield Barrier(unpack_ddl_member(pending_ddl))
                pending_ddl = next(ddls, None)
                start = cut
            yield from rows(window, start, len(window), copies)
        while pending_ddl is not None:
            yield Barrier(unpack_ddl_member(pending_ddl))
            pending_ddl = next(ddls, None)

    def _rows(
        self, members: list[bytes], start: int, stop: int, copies: Copies
    ) -> Iterator[RowChange]:
        """The rows of ``members[start:stop]``, unpacked a few at a time: a batch is cut (and
        its apply starts) without waiting for a whole window."""
        for first in range(start, stop, UNPACK_CHUNK):
            yield from self._members(members, first, min(first + UNPACK_CHUNK, stop), copies)
            if len(copies.seen) > COPIES_REMEMBERED:
                copies.seen.clear()

    def origins(self, changes: Sequence[RowChange]) -> list[Origin | None]:
        """The Kafka message each released change of ``changes`` was staged from (None: no
        staged member holds it any more); see :mod:`core.staging.origins`."""
        return find_origins(self._client, self.keys, self._marks.partitions(), changes)

    def has_ddl_at(self, ts: int) -> bool:
        """Whether a DDL with commit ts ``ts`` is staged (not trimmed yet)."""
        return next(self._scan(self.keys.ddl, ts - 1, ts), None) is not None

    def _scan(self, key: str, after_ts: int, upto: int) -> Iterator[bytes]:
        for page in self._pages(key, after_ts, upto):
            yield from page

    def _pages(self, key: str, after_ts: int, upto: int) -> Iterator[list[bytes]]:
        """The members of ``key`` with ``after_ts < commit_ts <= upto``, in non-empty pages."""
        low = after(after_ts)
        high = below(upto + 1)
        while True:
            asked = self._page_members.get(key, FIRST_RELEASE_PAGE)
            # Members are bytes: the client does not decode replies.
            page = cast(list[bytes], self._client.zrangebylex(key, low, high, start=0, num=asked))
            if page:
                self._page_members[key] = page_members(page)
                yield page
            if len(page) < asked:
                return
            # From just past the page's last member: an offset would make Redis walk every
            # member before it again (quadratic on a backlog).
            low = b"(" + page[-1]

    def replay_offsets(self, checkpoint: int) -> dict[str, int]:
        """Per partition, the Kafka offset a replay must start from to rebuild everything after
        ``checkpoint``: the message that last moved its watermark to ``checkpoint`` or below
        (0 when none did: the whole partition)."""
        offsets = {}
        for tp in self._marks.partitions():
            found = self._last_resolved_upto(tp, checkpoint)
            offsets[tp.field] = mark_offset(found) if found else 0
        return offsets

    def _last_resolved_upto(self, tp: TopicPartition, ts: int) -> bytes | None:
        found = self._client.zrevrangebylex(self.keys.resolved(tp), below(ts + 1), b"-", 0, 1)
        return as_bytes(found[0]) if found else None

    def has_lineage(self) -> bool:
        """Whether Redis still holds what the sink staged against: set once the sink knows Redis
        holds everything after the checkpoint; missing with a checkpoint, Redis lost data."""
        return bool(self._client.exists(self.keys.lineage))

    def mark_lineage(self) -> None:
        self._client.set(self.keys.lineage, 1)

    def trim(self, checkpoint: int) -> int:
        """Delete every staged change with commit_ts <= ``checkpoint``; returns rows removed."""
        high = below(checkpoint + 1)
        removed_rows = 0
        for tp in self._marks.partitions():
            # Keep the last watermark at or below the checkpoint: replays start there.
            last = self._last_resolved_upto(tp, checkpoint)
            if last is not None:
                self._client.zremrangebylex(self.keys.resolved(tp), b"-", b"(" + last)
            keys = [self.keys.rows(tp), self.keys.staged]
            while True:
                members, rows = self._trim(keys=keys, args=[high, TRIM_PAGE])
                removed_rows += int(rows)
                if int(members) < TRIM_PAGE:
                    break
        applied = self._client.zrangebylex(self.keys.ddl, b"-", high)
        if applied:
            self._client.hdel(self.keys.ddl_ids, *[ddl_id(as_bytes(m)) for m in applied])
            self._client.zrem(self.keys.ddl, *applied)
        self._client.set(self.keys.trimmed, ts_hex(checkpoint))
        return removed_rows


def page_members(page: list[bytes]) -> int:
    """The members of a key's next page: as many as ``page``'s average member fits in
    :data:`RELEASE_PAGE_BYTES`, between 1 and :data:`RELEASE_PAGE`."""
    size = sum(map(len, page))
    return max(1, min(RELEASE_PAGE, len(page) * RELEASE_PAGE_BYTES // max(size, 1)))
