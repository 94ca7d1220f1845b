"""The Redis staging layout: what workers write and the sink reads, in one place.

Per pipeline (the consumer group), every key carries the hash tag ``{pipeline}`` so that one
transaction or Lua script can touch all of them atomically, on a single Redis or a cluster alike:

- ``rows:<topic>:<partition>``: a sorted set with every score 0, ordered by member bytes. A
  member is ``commit_ts`` (16 hex digits) + Kafka offset (16 hex) + event index (4 hex) + the
  msgpack'd row, so a lexicographic range is a commit-ts range: TSOs never pass through a float.
- ``ddl``: DDL as ``commit_ts`` + a first-seen sequence number + the msgpack'd DDL, and
  ``ddl-ids``, the digests already staged: a copy of a DDL from another partition is dropped,
  while distinct DDLs at one commit ts (a split job) are all kept, in the order they arrived.
- ``offsets``, ``watermarks``: hashes keyed ``<topic>:<partition>`` with the last staged Kafka
  offset and the partition's resolved ts (16 hex digits; it only moves forward).
- ``resolved:<topic>:<partition>``: where each watermark advance came from, as ``resolved ts``
  (16 hex) + Kafka offset (16 hex). TiCDC sends a partition nothing at or below a resolved ts
  after it, so a replay from the last such message at or below the checkpoint rebuilds
  everything not yet applied, DDL included.
  A worker moves a quiet partition's watermark the same way, at its last staged offset
  (``TICDC_SINK_RESOLVE_WHEN_IDLE``, for streams without resolved events: ``streams/idle.py``).
- ``lineage``: set once the sink knows Redis holds everything after the checkpoint; a
  checkpoint downstream without it means Redis lost its data (see ``ticdc-sink recover``).
- ``partitions``: topic -> partition count, from the topic's metadata.
- ``staged``: counters of staged rows and bytes, for backpressure.
- ``held``, ``held-ts``: messages that cannot be decoded yet (Simple DML before its schema) and,
  per partition, the smallest commit ts among them, which caps that partition's progress.
- ``schemas``: the Simple protocol's table schemas; ``deadletters``: a stream of bad messages.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgpack
import redis

from streams.model import ColumnFlag, DDLEvent, RowChange, Value
from streams.native import native_module
from streams.packed import PackedEvents, pack_rows, row_reader
from streams.resp import Arg, CommandBatch, encode_args

TS_DIGITS = 16
OFFSET_DIGITS = 16
INDEX_DIGITS = 4
ROW_PREFIX = TS_DIGITS + OFFSET_DIGITS + INDEX_DIGITS
DDL_PREFIX = TS_DIGITS + 8
# Members fetched per ZRANGEBYLEX call while releasing: bounds the sink's memory per partition.
RELEASE_PAGE = 5_000
# Rows one trim script call deletes at most: bounds how long it holds Redis (~10 ms).
TRIM_PAGE = 20_000


def ts_hex(ts: int) -> bytes:
    """A TSO as 16 hex digits: byte order is numeric order, and it never becomes a float."""
    return b"%016x" % ts


@dataclass(frozen=True, slots=True)
class StagedMessage:
    """One Kafka message's share of the staging area: its rows packed as (commit ts, packed
    row), its DDL and the highest resolved ts it carries."""

    offset: int
    rows: Sequence[tuple[int, bytes]] = ()
    ddls: Sequence[DDLEvent] = ()
    watermark: int | None = None


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    @property
    def field(self) -> str:
        return f"{self.topic}:{self.partition}"


@dataclass(frozen=True, slots=True)
class FramedMessage:
    """A message's staging, encoded as command arguments: its rows as ZADD pairs, and what the
    staging script records of it (see :func:`frame_message`)."""

    offset: int
    rows: int
    # The resolved timestamps it carries (the highest is staged as the watermark).
    marks: list[int]
    # How many script arguments ``data`` holds.
    args: int
    data: bytes
    # The rows as ZADD's score/member pairs (two arguments a row).
    members: bytes


def frame_message(message: StagedMessage) -> FramedMessage:
    """The staging script's arguments for one message (see ``_STAGE``), encoded."""
    members = [
        row_member(ts, message.offset, i, packed) for i, (ts, packed) in enumerate(message.rows)
    ]
    mark = b"" if message.watermark is None else ts_hex(message.watermark)
    args: list[Arg] = [message.offset, mark, len(members), sum(map(len, members))]
    args.append(len(message.ddls))
    for ddl in message.ddls:
        args += ddl_args(ddl)
    pairs: list[Arg] = [0] * (2 * len(members))
    pairs[1::2] = members
    marks = [] if message.watermark is None else [message.watermark]
    return FramedMessage(
        message.offset, len(members), marks, len(args), encode_args(args), encode_args(pairs)
    )


def frame_packed(messages: Sequence[tuple[int, PackedEvents]]) -> list[FramedMessage]:
    """Each (offset, natively packed message) framed as :func:`frame_message` frames it, by
    the native module without the GIL (safe to call from a thread)."""
    native = native_module()
    if native is None:
        return [
            replace(
                frame_message(
                    StagedMessage(offset, packed.rows(), (), max(packed.resolved, default=None))
                ),
                marks=packed.resolved,
            )
            for offset, packed in messages
        ]
    return [
        FramedMessage(offset, len(packed), packed.resolved, args, data, members)
        for (offset, packed), (args, data, members) in zip(
            messages, native.stage_frames(list(messages)), strict=True
        )
    ]


def _chunks(frames: Sequence[FramedMessage]) -> Iterator[list[FramedMessage]]:
    """``frames`` in runs of whole messages, each ending once it reaches :data:`ZADD_MEMBERS`
    rows or :data:`ZADD_BYTES` bytes."""
    run: list[FramedMessage] = []
    rows = size = 0
    for frame in frames:
        run.append(frame)
        rows += frame.rows
        size += len(frame.members)
        if rows >= ZADD_MEMBERS or size >= ZADD_BYTES:
            yield run
            run, rows, size = [], 0, 0
    if run:
        yield run


def pack_ddl(ddl: DDLEvent) -> bytes:
    return msgpack.packb(  # type: ignore[no-any-return]
        [ddl.schema, ddl.table, ddl.query, ddl.ddl_type], use_bin_type=True
    )


def unpack_ddl(commit_ts: int, data: bytes) -> DDLEvent:
    schema, table, query, ddl_type = msgpack.unpackb(data, raw=False)
    return DDLEvent(commit_ts, schema, table, query, ddl_type)


def row_member(commit_ts: int, offset: int, index: int, packed: bytes) -> bytes:
    """A packed row's sorted-set member: commit ts, Kafka offset and event index, then the row."""
    return b"%016x%016x%04x" % (commit_ts, offset, index) + packed


def ddl_args(ddl: DDLEvent) -> list[bytes]:
    """The script arguments staging one DDL: its commit ts, identity digest and body."""
    body = pack_ddl(ddl)
    return [ts_hex(ddl.commit_ts), _digest(body), body]


def _digest(body: bytes) -> bytes:
    # Copies of one DDL from every partition share it; distinct DDLs at one commit ts differ.
    return hashlib.sha1(body).hexdigest()[:16].encode()


# Records consecutive messages of one partition, each as one unit with its offset; a message at
# or below the partition's staged offset (a replay) is not counted again. It runs in the same
# MULTI as the ZADD of the messages' rows, which stays outside Lua: handing each row through a
# script's arguments cost Redis more than the insert itself (5.2 against 1-2 us a row). ARGV:
# partition, message count, then per message: offset, watermark ('' for none), rows, their
# bytes, the DDL count, and per DDL its commit ts, identity and body.
_STAGE = """
local staged = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1')
local first_staged = staged
local rows_added, bytes_added = 0, 0
local i = 3
for _ = 1, tonumber(ARGV[2]) do
  local offset, mark, ddls = tonumber(ARGV[i]), ARGV[i + 1], tonumber(ARGV[i + 4])
  if offset > staged then
    for j = i + 5, i + 2 + 3 * ddls, 3 do
      -- A DDL is staged once, the first time any partition delivers it; its sequence number
      -- keeps DDLs that share a commit ts (one split job) in the order the job ran them.
      local id = ARGV[j] .. ARGV[j + 1]
      if not redis.call('HGET', KEYS[5], id) then
        local seq = string.format('%08x', redis.call('HINCRBY', KEYS[5], '#seq', 1))
        redis.call('HSET', KEYS[5], id, seq)
        redis.call('ZADD', KEYS[3], 0, ARGV[j] .. seq .. ARGV[j + 2])
      end
    end
    if mark ~= '' then
      local current = redis.call('HGET', KEYS[2], ARGV[1])
      if (not current) or mark > current then
        redis.call('HSET', KEYS[2], ARGV[1], mark)
        redis.call('ZADD', KEYS[6], 0, mark .. string.format('%016x', offset))
      end
    end
    staged = offset
    rows_added = rows_added + tonumber(ARGV[i + 2])
    bytes_added = bytes_added + tonumber(ARGV[i + 3])
  end
  i = i + 5 + 3 * ddls
end
if staged == first_staged then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', staged))
if rows_added > 0 then
  redis.call('HINCRBY', KEYS[4], 'rows', rows_added)
  redis.call('HINCRBY', KEYS[4], 'bytes', bytes_added)
end
return 1
"""
# Row members and bytes per ZADD command: bound one command's size in Redis's input buffer
# (whose limit, client-query-buffer-limit, is 1 GiB by default).
ZADD_MEMBERS = 50_000
ZADD_BYTES = 64 << 20


def _below(ts: int) -> bytes:
    """The ZRANGEBYLEX bound just under commit ts ``ts`` (``+`` past the largest TSO)."""
    return b"+" if ts >= 1 << 64 else b"(" + ts_hex(ts)


# Moves a quiet partition's watermark as a resolved event would (TICDC_SINK_RESOLVE_WHEN_IDLE):
# the watermark and its replay mark, at the last staged offset. Only while that offset is still
# the staged one (nothing staged since the worker looked), nothing is held, and only forward.
# KEYS: offsets, watermarks, held-ts, resolved:<tp>; ARGV: partition, staged offset, watermark.
_RESOLVE_IDLE = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  return 0
end
local current = redis.call('HGET', KEYS[2], ARGV[1])
if current and ARGV[3] <= current then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[4], 0, ARGV[3] .. string.format('%016x', tonumber(ARGV[2])))
return 1
"""


_HOLD_TS = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if (not current) or ARGV[2] < current then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
"""


# Deletes a partition's oldest rows below a bound, at most ARGV[2] of them, and takes them off
# the staged totals; returns how many. Inside Redis, so no row travels to the sink and back.
_TRIM = """
local page = redis.call('ZRANGEBYLEX', KEYS[1], '-', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #page == 0 then
  return 0
end
local bytes = 0
for _, member in ipairs(page) do
  bytes = bytes + #member
end
redis.call('ZREMRANGEBYLEX', KEYS[1], '-', '[' .. page[#page])
redis.call('HINCRBY', KEYS[2], 'rows', -#page)
redis.call('HINCRBY', KEYS[2], 'bytes', -bytes)
return #page
"""


_KEY_FLAGS = int(ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY)


def _has_key(row: RowChange) -> bool:
    """Whether ``row``'s table has a handle or primary key (else identical rows are distinct)."""
    return any(kind.flags & _KEY_FLAGS for kind in row.columns.values())


@dataclass(frozen=True, slots=True)
class Barrier:
    """A DDL that must run after every change before it and before every change after it."""

    ddl: DDLEvent


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """How far one partition is staged (see :meth:`Staging.progress`)."""

    staged_offset: int | None
    watermark: int | None
    # Whether it holds messages that wait for their schema (Simple DML).
    holding: bool
    # The highest commit ts among its staged (untrimmed) rows.
    highest_row_ts: int | None


class Staging:
    """The staging area of one pipeline in Redis."""

    def __init__(self, client: redis.Redis, pipeline: str) -> None:
        self.client = client
        self.pipeline = pipeline
        self.prefix = f"tcs:{{{pipeline}}}:"
        self._trim = client.register_script(_TRIM)
        self._resolve_idle = client.register_script(_RESOLVE_IDLE)
        self._unpack_row = row_reader()

    def key(self, name: str) -> str:
        return self.prefix + name

    def rows_key(self, tp: TopicPartition) -> str:
        return self.key(f"rows:{tp.field}")

    def resolved_key(self, tp: TopicPartition) -> str:
        return self.key(f"resolved:{tp.field}")

    # --- the worker side ---------------------------------------------------------------------

    def stage(
        self,
        tp: TopicPartition,
        offset: int,
        rows: Sequence[RowChange],
        ddls: Sequence[DDLEvent] = (),
        watermark: int | None = None,
    ) -> Any:
        """Stage one message's events with its offset, atomically; a replayed offset is skipped.

        Returns 1 when staged and 0 when the offset was staged before.
        """
        message = StagedMessage(offset, pack_rows(rows), ddls, watermark)
        return self.stage_messages(tp, [message])

    def stage_messages(
        self,
        tp: TopicPartition,
        messages: Sequence[StagedMessage | FramedMessage],
        batch: CommandBatch | None = None,
    ) -> Any:
        """Stage consecutive messages of ``tp`` in one script call, each message with its offset
        as one unit: those at or below the staged offset (replays) are skipped. Returns 1 when
        any was staged, else 0 (with ``batch``, the reply comes when the batch executes)."""
        frames = [m if isinstance(m, FramedMessage) else frame_message(m) for m in messages]
        target = batch if batch is not None else CommandBatch()
        # One transaction: the rows and the offset that says they are staged, or neither.
        target.command("MULTI")
        zadds = 0
        for chunk in _chunks([f for f in frames if f.rows]):
            head = encode_args(["ZADD", self.rows_key(tp)])
            target.encoded(2 + 2 * sum(f.rows for f in chunk), [head, *(f.members for f in chunk)])
            zadds += 1
        keys = [
            self.key("offsets"),
            self.key("watermarks"),
            self.key("ddl"),
            self.key("staged"),
            self.key("ddl-ids"),
            self.resolved_key(tp),
        ]
        # EVAL, not EVALSHA: Redis caches the script by its digest either way, and a batch
        # never meets NOSCRIPT after a Redis restart (re-running part of a batch is not safe).
        script: list[Arg] = ["EVAL", _STAGE, len(keys), *keys, tp.field, len(frames)]
        target.encoded(
            len(script) + sum(f.args for f in frames),
            [encode_args(script), *(f.data for f in frames)],
        )
        target.command("EXEC")
        if batch is not None:
            return None
        return target.execute(self.client)[-1][zadds]

    def set_partition_count(self, topic: str, count: int) -> None:
        self.client.hset(self.key("partitions"), topic, count)

    def staged_offset(self, tp: TopicPartition) -> int | None:
        """The last Kafka offset staged for ``tp``: a new owner resumes after it."""
        value = self.client.hget(self.key("offsets"), tp.field)
        return None if value is None else int(value)

    def staged_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The last staged offset of each of ``partitions`` that has one (one round trip)."""
        ordered = list(partitions)
        if not ordered:
            return {}
        values = self.client.hmget(self.key("offsets"), [tp.field for tp in ordered])
        return {tp: int(v) for tp, v in zip(ordered, values, strict=True) if v is not None}

    def staged_totals(self) -> tuple[int, int]:
        """Rows and bytes staged and not yet trimmed (for backpressure)."""
        totals = self.client.hgetall(self.key("staged"))
        return int(totals.get(b"rows", 0)), int(totals.get(b"bytes", 0))

    def hold(
        self, tp: TopicPartition, offset: int, key: bytes | None, value: bytes, commit_ts: int,
        batch: CommandBatch | None = None,
    ) -> None:  # fmt: skip
        """Keep a message that cannot be decoded yet (a Simple DML before its schema).

        Its partition's progress stops short of ``commit_ts`` until it is staged, so the sink
        never releases past a change it does not have.
        """
        target = batch if batch is not None else CommandBatch()
        entry = msgpack.packb([tp.topic, tp.partition, offset, key, value, commit_ts])
        target.command("RPUSH", self.key("held"), entry)
        target.command("EVAL", _HOLD_TS, 1, self.key("held-ts"), tp.field, ts_hex(commit_ts))
        if batch is None:
            target.execute(self.client)

    def held(self) -> list[tuple[bytes, TopicPartition, int, bytes | None, bytes, int]]:
        """Every held message: (entry, partition, offset, key, value, commit ts)."""
        out = []
        for entry in self.client.lrange(self.key("held"), 0, -1):
            topic, partition, offset, key, value, commit_ts = msgpack.unpackb(entry)
            out.append((entry, TopicPartition(topic, partition), offset, key, value, commit_ts))
        return out

    def stage_held(
        self, entry: bytes, tp: TopicPartition, offset: int, rows: Sequence[RowChange]
    ) -> None:
        """Stage a held message's rows now that it decodes, and let its partition move on."""
        pipe = self.client.pipeline()
        self._stage_rows(pipe, tp, offset, rows)
        pipe.lrem(self.key("held"), 1, entry)
        pipe.execute()
        remaining = [h[5] for h in self.held() if h[1] == tp]
        if remaining:
            self.client.hset(self.key("held-ts"), tp.field, ts_hex(min(remaining)))
        else:
            self.client.hdel(self.key("held-ts"), tp.field)

    def stage_late(self, tp: TopicPartition, offset: int, rows: Sequence[RowChange]) -> int:
        """Stage the rows of a message behind its partition's staged offset (a dead letter
        replayed once fixed); returns how many. The sink releases them only while its
        checkpoint is below their commit ts: the caller checks."""
        pipe = self.client.pipeline()
        staged = self._stage_rows(pipe, tp, offset, rows)
        pipe.execute()
        return staged

    def _stage_rows(
        self, pipe: Any, tp: TopicPartition, offset: int, rows: Sequence[RowChange]
    ) -> int:
        members = [row_member(ts, offset, i, body) for i, (ts, body) in enumerate(pack_rows(rows))]
        if members:
            pipe.zadd(self.rows_key(tp), dict.fromkeys(members, 0))
            pipe.hincrby(self.key("staged"), "rows", len(members))
            pipe.hincrby(self.key("staged"), "bytes", sum(map(len, members)))
        return len(members)

    # --- watermarks --------------------------------------------------------------------------

    def progress(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, PartitionProgress]:
        """Each partition's staged offset, watermark, holding state and highest staged row
        commit ts, in one round trip (what a worker looks at for quiet partitions)."""
        if not partitions:
            return {}
        fields = [tp.field for tp in partitions]
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self.key("offsets"), fields)
        pipe.hmget(self.key("watermarks"), fields)
        pipe.hmget(self.key("held-ts"), fields)
        for tp in partitions:
            pipe.zrevrangebylex(self.rows_key(tp), b"+", b"-", 0, 1)
        offsets, marks, held, *last_rows = pipe.execute()
        return {
            tp: PartitionProgress(
                None if offset is None else int(offset),
                None if mark is None else int(mark, 16),
                holding is not None,
                int(last[0][:TS_DIGITS], 16) if last else None,
            )
            for tp, offset, mark, holding, last in zip(
                partitions, offsets, marks, held, last_rows, strict=True
            )
        }

    def resolve_idle(self, tp: TopicPartition, staged_offset: int, watermark: int) -> bool:
        """Move ``tp``'s watermark to ``watermark`` as a resolved event at ``staged_offset``
        would; False (nothing written) when more was staged since, a message is held, or the
        watermark is there already."""
        keys = [
            self.key("offsets"),
            self.key("watermarks"),
            self.key("held-ts"),
            self.resolved_key(tp),
        ]
        args = [tp.field, str(staged_offset), ts_hex(watermark)]
        return bool(self._resolve_idle(keys=keys, args=args))

    def partitions(self) -> list[TopicPartition]:
        counts = self.client.hgetall(self.key("partitions"))
        return [
            TopicPartition(topic.decode(), p)
            for topic, count in sorted(counts.items())
            for p in range(int(count))
        ]

    def watermarks(self) -> dict[TopicPartition, int | None]:
        """Every known partition's resolved ts (None: none seen yet)."""
        raw = self.client.hgetall(self.key("watermarks"))
        return {
            tp: int(raw[tp.field.encode()], 16) if tp.field.encode() in raw else None
            for tp in self.partitions()
        }

    def global_resolved_ts(self) -> int | None:
        """The minimum watermark over every partition of every topic; None while any is unknown.

        A partition holding a message it cannot decode yet counts as resolved only up to just
        before that message's commit ts.
        """
        marks = self.watermarks()
        if not marks or any(mark is None for mark in marks.values()):
            return None
        held = {
            field.decode(): int(ts, 16) - 1
            for field, ts in self.client.hgetall(self.key("held-ts")).items()
        }
        return min(
            min(mark, held.get(tp.field, mark)) for tp, mark in marks.items() if mark is not None
        )

    def releasable(self) -> bool:
        """Whether staged changes wait that the sink can apply now: the global resolved ts is
        past the last trim. When it is not, holding staging back frees nothing."""
        resolved = self.global_resolved_ts()
        if resolved is None:
            return False
        trimmed = self.client.get(self.key("trimmed"))
        return resolved > (int(trimmed, 16) if trimmed else 0)

    # --- the sink side -----------------------------------------------------------------------

    def release(self, after: int, upto: int) -> Iterator[RowChange | Barrier]:
        """Staged changes with ``after < commit_ts <= upto``, in commit-ts order across partitions.

        DDL come out as barriers in their place (after every row with a smaller or equal commit
        ts, before every row with a greater one). Copies of one row version of a table with a
        key (TiCDC re-sends) collapse; a key-less table's identical rows at one commit ts stay
        apart (they are distinct rows upstream), unless they are one staged change: the same
        partition, offset and event index, as Kafka re-delivers it. Reads page by page, so memory
        is bounded by the page size per partition.
        """
        if upto <= after:
            return
        streams = [self._scan(self.rows_key(tp), after, upto) for tp in self.partitions()]
        ddls = self._scan(self.key("ddl"), after, upto)
        merged = heapq.merge(*streams, key=lambda member: member[:TS_DIGITS])
        pending_ddl = next(ddls, None)
        seen: set[bytes] = set()
        current_ts = b""
        for member in merged:
            ts = member[:TS_DIGITS]
            while pending_ddl is not None and pending_ddl[:TS_DIGITS] < ts:
                yield Barrier(
                    unpack_ddl(int(pending_ddl[:TS_DIGITS], 16), pending_ddl[DDL_PREFIX:])
                )
                pending_ddl = next(ddls, None)
            if ts != current_ts:
                current_ts = ts
                seen.clear()
            body = member[ROW_PREFIX:]
            if body in seen:
                continue
            row = self._unpack_row(int(ts, 16), body)
            if _has_key(row):
                seen.add(body)
            yield row
        while pending_ddl is not None:
            yield Barrier(unpack_ddl(int(pending_ddl[:TS_DIGITS], 16), pending_ddl[DDL_PREFIX:]))
            pending_ddl = next(ddls, None)

    def has_ddl_at(self, ts: int) -> bool:
        """Whether a DDL with commit ts ``ts`` is staged (not trimmed yet)."""
        return next(self._scan(self.key("ddl"), ts - 1, ts), None) is not None

    def _scan(self, key: str, after: int, upto: int) -> Iterator[bytes]:
        low = b"(" + ts_hex(after) + b"\xff"
        high = _below(upto + 1)
        start = 0
        while True:
            page = self.client.zrangebylex(key, low, high, start=start, num=RELEASE_PAGE)
            yield from page
            if len(page) < RELEASE_PAGE:
                return
            start += len(page)

    def replay_offsets(self, checkpoint: int) -> dict[str, int]:
        """Per partition, the Kafka offset a replay must start from to rebuild everything after
        ``checkpoint``: the message that last moved its watermark to ``checkpoint`` or below
        (0 when none did: the whole partition)."""
        offsets = {}
        for tp in self.partitions():
            found = self._last_resolved_upto(tp, checkpoint)
            offsets[tp.field] = int(found[TS_DIGITS:], 16) if found else 0
        return offsets

    def _last_resolved_upto(self, tp: TopicPartition, ts: int) -> bytes | None:
        found = self.client.zrevrangebylex(self.resolved_key(tp), _below(ts + 1), b"-", 0, 1)
        return found[0] if found else None

    def has_lineage(self) -> bool:
        """Whether Redis still holds what the sink staged against (see the module notes)."""
        return bool(self.client.exists(self.key("lineage")))

    def mark_lineage(self) -> None:
        self.client.set(self.key("lineage"), 1)

    def trim(self, checkpoint: int) -> int:
        """Delete every staged change with commit_ts <= ``checkpoint``; returns rows removed."""
        high = _below(checkpoint + 1)
        removed_rows = 0
        for tp in self.partitions():
            # Keep the last watermark at or below the checkpoint: replays start there.
            last = self._last_resolved_upto(tp, checkpoint)
            if last is not None:
                self.client.zremrangebylex(self.resolved_key(tp), b"-", b"(" + last)
            keys = [self.rows_key(tp), self.key("staged")]
            while True:
                removed = int(self._trim(keys=keys, args=[high, TRIM_PAGE]))
                removed_rows += removed
                if removed < TRIM_PAGE:
                    break
        applied = self.client.zrangebylex(self.key("ddl"), b"-", high)
        if applied:
            ids = [m[:TS_DIGITS] + _digest(m[DDL_PREFIX:]) for m in applied]
            self.client.hdel(self.key("ddl-ids"), *ids)
            self.client.zrem(self.key("ddl"), *applied)
        self.client.set(self.key("trimmed"), ts_hex(checkpoint))
        return removed_rows


__all__ = ["Barrier", "PartitionProgress", "StagedMessage", "Staging", "TopicPartition", "Value"]
