"""The byte layout of staged members and of the stage script's arguments, defined once.

A row member is ``commit_ts`` (16 hex) + Kafka offset (16 hex) + event index (4 hex) + the
packed row: sorted sets of score 0 order members by bytes, so a lexicographic range is a
commit-ts range and a TSO never passes through a float. A DDL member is ``commit_ts`` + a
first-seen sequence (8 hex) + the msgpack'd DDL. ``native/src/staging.rs`` writes row members
and stage arguments too: it exports the same :data:`LAYOUT_VERSION`, checked in
``streams/staging/framing.py`` before its framing is used.
"""

from __future__ import annotations

import hashlib

import msgpack

from streams.model import DDLEvent

# Bump with any change below, and the same constant in native/src/staging.rs.
LAYOUT_VERSION = 1

TS_DIGITS = 16
OFFSET_DIGITS = 16
INDEX_DIGITS = 4
ROW_PREFIX = TS_DIGITS + OFFSET_DIGITS + INDEX_DIGITS
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


def row_member(commit_ts: int, offset: int, index: int, packed: bytes) -> bytes:
    """A packed row's sorted-set member: commit ts, Kafka offset and event index, then the row."""
    return b"%016x%016x%04x" % (commit_ts, offset, index) + packed


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
