"""Staged row members back into the release's rows: partitions merged by commit ts a window at a
time, copies of one row version collapsed, packed rows unpacked (a member holds a run of rows of
one message at one commit ts; see core/staging/layout.py).

A partition's members are in lexicographic order, which is commit-ts order (16-hex prefix). The
merge sorts a window of members from every partition by that prefix only, with a stable sort
over the partitions' runs concatenated in partition order: members of one commit ts come
partition by partition, each partition's in its own order, as ``heapq.merge`` keyed by the
prefix gives them, with the sorting done in C rather than a Python call per member.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import itemgetter

from core.model import ColumnFlag, ColumnType, RowChange, column_type
from core.native import native_model
from core.packed import row_reader, unpack_row
from core.staging.layout import TS_DIGITS, member_rows

# Reads ``members[start:stop]`` into rows, collapsing copies as a :class:`Copies` remembers.
ReadMembers = Callable[[list[bytes], int, int, "Copies"], list[RowChange]]

_KEY_FLAGS = int(ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY)
# A member's commit-ts prefix, taken in C (a sort key called once per member).
_TS_OF = itemgetter(slice(0, TS_DIGITS))
# Above every hex digit: a commit-ts prefix followed by it sorts after every member of that ts.
_PAST_TS = b"\xff"
# Table layouts whose keyedness is remembered before the memory starts over (bounded for any input).
_MAX_LAYOUTS = 4_096


def merge_by_ts(streams: list[Iterator[list[bytes]]]) -> Iterator[list[bytes]]:
    """The members of ``streams`` (each a partition's non-empty pages, in lexicographic order)
    in commit-ts order, a window at a time; members of one commit ts partition by partition.

    A window holds the members below the smallest last commit ts buffered from a partition not
    read to its end (a later page may hold more of that ts). When every buffered member is at
    that ts or past it, the members of that ts come partition by partition, so the first
    partition holding it hands over what it buffered of it, page after page, before the next
    one does: the order a window of all of them gave, in a page per partition of memory however
    many pages one commit ts (one transaction) spans."""
    buffers: list[list[bytes]] = [[] for _ in streams]
    open_streams = set(range(len(streams)))
    while True:
        for index in sorted(open_streams):
            if not buffers[index]:
                _extend(streams, buffers, open_streams, index)
        if open_streams:
            horizon = min(_TS_OF(buffers[index][-1]) for index in open_streams)
            cuts = [bisect_left(buffer, horizon) for buffer in buffers]
        else:
            cuts = [len(buffer) for buffer in buffers]
        pieces = [buffer[:cut] for buffer, cut in zip(buffers, cuts, strict=True) if cut]
        if pieces:
            buffers = [buffer[cut:] for buffer, cut in zip(buffers, cuts, strict=True)]
            if len(pieces) == 1:
                yield pieces[0]
            else:
                yield sorted([member for piece in pieces for member in piece], key=_TS_OF)
        elif not open_streams:
            return
        else:
            # Every member below the horizon is out. The horizon's members come partition by
            # partition: no partition before the first holding them has any left (its buffer
            # starts past the horizon, or it has ended), so that one's go now.
            first = next(
                i for i, buffer in enumerate(buffers) if buffer and buffer[0][:TS_DIGITS] == horizon
            )
            buffer = buffers[first]
            cut = bisect_left(buffer, horizon + _PAST_TS)
            buffers[first] = buffer[cut:]
            yield buffer[:cut]


def _extend(
    streams: list[Iterator[list[bytes]]],
    buffers: list[list[bytes]],
    open_streams: set[int],
    index: int,
) -> None:
    page = next(streams[index], None)
    if page is None:
        open_streams.discard(index)
    else:
        buffers[index] = buffers[index] + page


@dataclass
class Copies:
    """What collapses copies across windows: the commit ts of the last member read (16 hex) and
    the bodies of keyed rows seen at it."""

    ts: bytes = b""
    commit_ts: int = 0
    seen: set[bytes] = field(default_factory=set)


class MemberReader:
    """Members (in commit-ts order) into row changes: a keyed table's copies of one row version
    at one commit ts collapse (TiCDC re-sends), within a member or across members; a key-less
    table's identical rows stay apart, two of one member as well (a member Kafka re-delivered
    is the same member: Redis holds it once)."""

    def __init__(self, unpack: Callable[[int, bytes], RowChange] = unpack_row) -> None:
        self._unpack = unpack
        # Per (schema, table): the last columns dict seen and whether it has a key. Rows
        # unpacked natively share their table layout's dict, so the check runs once per layout
        # (rows with a dict each compare it).
        self._keyed: dict[tuple[str, str], tuple[dict[str, ColumnType], bool]] = {}

    def rows(self, members: list[bytes], start: int, stop: int, copies: Copies) -> list[RowChange]:
        """The rows of ``members[start:stop]``, copies collapsed as ``copies`` remembers."""
        unpack, keyed = self._unpack, self._has_key
        seen, current, commit_ts = copies.seen, copies.ts, copies.commit_ts
        rows: list[RowChange] = []
        for index in range(start, stop):
            member = members[index]
            ts = member[:TS_DIGITS]
            if ts != current:
                current, commit_ts = ts, int(ts, 16)
                seen.clear()
            for body in member_rows(member):
                if body in seen:
                    continue
                row = unpack(commit_ts, body)
                if keyed(row):
                    seen.add(body)
                rows.append(row)
        copies.ts, copies.commit_ts = current, commit_ts
        return rows

    def _has_key(self, row: RowChange) -> bool:
        """Whether ``row``'s table has a handle or primary key (else its identical rows are
        distinct)."""
        table = (row.schema, row.table)
        known = self._keyed.get(table)
        if known is not None and (known[0] is row.columns or known[0] == row.columns):
            return known[1]
        keyed = any(kind.flags & _KEY_FLAGS for kind in row.columns.values())
        if len(self._keyed) >= _MAX_LAYOUTS:
            self._keyed.clear()
        self._keyed[table] = (row.columns, keyed)
        return keyed


def member_reader(native: bool = True) -> ReadMembers:
    """:meth:`MemberReader.rows`, behind the native ``RowUnpacker.unpack_members`` when built
    (and ``native``): the native reader takes the members it can, the Python one each member
    it stops at (and decides it, all its rows: the native reader hands back a member whole),
    the native one the rest."""
    python = MemberReader(row_reader(native))
    model = native_model(native)
    if model is None:
        return python.rows
    from ticdc_sink_native import RowUnpacker

    native_rows = RowUnpacker(model, column_type).unpack_members

    def rows(members: list[bytes], start: int, stop: int, copies: Copies) -> list[RowChange]:
        found, start = native_rows(members, start, stop, copies)
        while start < stop:
            found += python.rows(members, start, start + 1, copies)
            more, start = native_rows(members, start + 1, stop, copies)
            found += more
        return found

    return rows
