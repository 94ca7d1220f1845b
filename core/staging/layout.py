"""The member layout: the bytes of staged members and of the stage script's arguments, defined
once.

A row member is ``commit_ts`` (16 hex) + Kafka offset (16 hex) + the event index of its first row
(4 hex) + its row count (4 hex), then each row as a 4-byte big-endian length and the packed row: a
run of consecutive rows of one message at one commit ts, so that Redis, the worker's framing and
the sink's merge pay per run rather than per row. Sorted sets of score 0 order members by bytes,
so a lexicographic range is a commit-ts range and a TSO never passes through a float. A DDL
member is ``commit_ts`` + a first-seen sequence (8 hex) + the msgpack'd DDL.
``native/src/staging.rs`` writes row members and stage arguments too: it exports the same
:data:`LAYOUT_VERSION`, checked in ``core/native.py`` before the native module is used. Every
staging write records :data:`LAYOUT_VERSION` in the staging area (``Keys.layout``); the worker and
the sink refuse at start a staging area holding members of another member layout (``area.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgpack

from core.model import DDLEvent

# The member layout's version: bump with any change below, and the same constant in
# native/src/staging.rs.
LAYOUT_VERSION = 2

TS_DIGITS = 16
OFFSET_DIGITS = 16
INDEX_DIGITS = 4
# Commit ts, offset and first index: what sorts a partition's members.
ROW_PREFIX = TS_DIGITS + OFFSET_DIGITS + INDEX_DIGITS
COUNT_DIGITS = 4
# Where a member's first row length starts.
MEMBER_HEAD = ROW_PREFIX + COUNT_DIGITS
# Each row's length before its bytes (big-endian).
LENGTH_BYTES = 4
# Rows a member holds at most: with RELEASE_PAGE (core/staging/reader.py) it bounds the rows
# a page of members brings to the sink; TiCDC's Open Protocol batches 16 rows a message.
MEMBER_ROWS = 64
# A member's rows' bytes (lengths included) past which it takes no further row: bounds a page's
# bytes with RELEASE_PAGE (a row bigger than this is a member alone).
MEMBER_BYTES = 8 << 10
DDL_SEQ_DIGITS = 8
DDL_PREFIX = TS_DIGITS + DDL_SEQ_DIGITS
# The stage script's arguments per message: offset, watermark ('' for none), rows, their bytes,
# the DDL count; then per DDL its commit ts, identity digest and body (see stage.lua).
MESSAGE_ARGS = 5
DDL_ARGS = 3
# TSOs are 64-bit: a bound past the largest one is the end of the range.
TSO_LIMIT = 1 << 64


def as_bytes(reply: bytes | str) -> bytes:
    """A Redis reply as bytes (redis-py types replies ``bytes | str``; ours are bytes)."""
    return reply if isinstance(reply, bytes) else reply.encode()


def as_text(reply: bytes | str) -> str:
    """A Redis reply as text (a key name or hash field)."""
    return reply.decode() if isinstance(reply, bytes) else reply


def ts_hex(ts: int) -> bytes:
    """A TSO as 16 hex digits: byte order is numeric order, and it never becomes a float."""
    return b"%016x" % ts


def row_member(commit_ts: int, offset: int, first: int, rows: Sequence[bytes]) -> bytes:
    """The sorted-set member of packed ``rows`` (events ``first``, ``first + 1``... of the
    message at ``offset``, all at ``commit_ts``): the prefix, the count, each row with its
    length."""
    parts = [b"%016x%016x%04x%04x" % (commit_ts, offset, first, len(rows))]
    for row in rows:
        parts.append(len(row).to_bytes(LENGTH_BYTES, "big"))
        parts.append(row)
    return b"".join(parts)


def member_runs(rows: Sequence[tuple[int, bytes]]) -> list[tuple[int, int]]:
    """Where ``rows`` (a message's (commit ts, packed row) in event order) split into members:
    each (first, stop) a run of consecutive rows at one commit ts, of at most
    :data:`MEMBER_ROWS` rows and, past its first row, :data:`MEMBER_BYTES` bytes."""
    runs = []
    first = 0
    while first < len(rows):
        ts = rows[first][0]
        size = LENGTH_BYTES + len(rows[first][1])
        stop = first + 1
        while stop < len(rows) and stop - first < MEMBER_ROWS and rows[stop][0] == ts:
            size += LENGTH_BYTES + len(rows[stop][1])
            if size > MEMBER_BYTES:
                break
            stop += 1
        runs.append((first, stop))
        first = stop
    return runs


def row_members(offset: int, rows: Sequence[tuple[int, bytes]]) -> list[bytes]:
    """The members staging a message's ``rows`` ((commit ts, packed row) in event order): the
    same rows give the same members, so a message staged twice adds nothing."""
    return [
        row_member(rows[first][0], offset, first, [row for _, row in rows[first:stop]])
        for first, stop in member_runs(rows)
    ]


def member_row_count(member: bytes) -> int:
    """How many rows a row member holds."""
    return int(member[ROW_PREFIX:MEMBER_HEAD], 16)


def member_rows(member: bytes) -> list[bytes]:
    """The packed rows of a row member, in event order."""
    rows = []
    at = MEMBER_HEAD
    for _ in range(member_row_count(member)):
        end = at + LENGTH_BYTES + int.from_bytes(member[at : at + LENGTH_BYTES], "big")
        rows.append(member[at + LENGTH_BYTES : end])
        at = end
    return rows


def member_ts(member: bytes) -> int:
    """The commit ts a row or DDL member (or a resolved mark) starts with."""
    return int(member[:TS_DIGITS], 16)


def mark_offset(mark: bytes) -> int:
    """The Kafka offset of a ``resolved:<tp>`` mark (resolved ts + offset)."""
    return int(mark[TS_DIGITS:], 16)


def below(ts: int) -> bytes:
    """The ZRANGEBYLEX bound just under commit ts ``ts`` (``+`` past the largest TSO)."""
    return b"+" if ts >= TSO_LIMIT else b"(" + ts_hex(ts)


def after(ts: int) -> bytes:
    """The ZRANGEBYLEX bound just over every member at commit ts ``ts``."""
    return b"(" + ts_hex(ts) + b"\xff"


def pack_ddl(ddl: DDLEvent) -> bytes:
    packed: bytes = msgpack.packb(
        [ddl.schema, ddl.table, ddl.query, ddl.ddl_type], use_bin_type=True
    )
    return packed


def unpack_ddl_member(member: bytes) -> DDLEvent:
    """The DDL a ``ddl`` member holds."""
    schema, table, query, ddl_type = msgpack.unpackb(member[DDL_PREFIX:], raw=False)
    return DDLEvent(member_ts(member), schema, table, query, ddl_type)


def ddl_digest(body: bytes) -> bytes:
    """A DDL's identity: copies of one DDL from every partition share it; distinct DDLs at one
    commit ts differ."""
    return hashlib.sha1(body).hexdigest()[:16].encode()


def ddl_id(member: bytes) -> bytes:
    """The ``ddl-ids`` field of a staged DDL member: its commit ts and digest."""
    return member[:TS_DIGITS] + ddl_digest(member[DDL_PREFIX:])


def ddl_args(ddl: DDLEvent) -> list[bytes]:
    """The stage script's arguments for one DDL: its commit ts, identity digest and body."""
    body = pack_ddl(ddl)
    return [ts_hex(ddl.commit_ts), ddl_digest(body), body]
