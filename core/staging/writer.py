"""The worker's side of staging: messages in with their offsets, held messages, quiet partitions.

A partition's messages are staged in one transaction, MULTI { ZADD rows ; EVAL stage.lua ; SET
layout } EXEC: the rows and the offset that says they are staged, or neither. The stage script
skips a message at or below the staged offset (a replay), so re-delivery counts nothing twice.
Every write of members records the member layout they are in (``Keys.layout``), which
``Staging.check_layout`` reads at start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from core.model import DDLEvent, RowChange
from core.packed import pack_rows
from core.redis_client import RedisClient
from core.resp import WAIT_MS, Arg, CommandBatch, encode_args
from core.staging import scripts
from core.staging.dead_letters import DeadLetters
from core.staging.framing import FramedMessage, StagedMessage, frame_message, zadd_runs
from core.staging.keys import Keys, TopicPartition
from core.staging.layout import LAYOUT_VERSION, as_bytes, member_row_count, row_members, ts_hex
from core.staging.retired import drops_database, retires_topic


@dataclass(frozen=True, slots=True)
class HeldMessage:
    """A message kept until it decodes (a Simple DML before its schema)."""

    # The list entry as stored (removing it names it).
    entry: bytes
    tp: TopicPartition
    offset: int
    key: bytes | None
    value: bytes
    commit_ts: int


class StagingBatch:
    """One round trip of staging commands: messages, held messages and dead letters of a batch,
    queued encoded and sent together by :meth:`send`."""

    def __init__(self, writer: StagingWriter, client: RedisClient) -> None:
        self._writer = writer
        self._client = client
        self.commands = CommandBatch(writer.keys.offsets)

    def stage(self, tp: TopicPartition, messages: Sequence[StagedMessage | FramedMessage]) -> None:
        """Queue consecutive messages of ``tp`` as one transaction."""
        self._writer.queue_messages(tp, messages, self.commands)

    def hold(
        self, tp: TopicPartition, offset: int, key: bytes | None, value: bytes, commit_ts: int
    ) -> None:
        """Queue keeping a message that cannot be decoded yet (see :meth:`StagingWriter.hold`)."""
        self._writer.queue_hold(tp, offset, key, value, commit_ts, self.commands)

    def dead_letter(
        self, tp: TopicPartition, offset: int, key: bytes | None, value: bytes | None, error: str
    ) -> None:
        """Queue a message that did not decode on the dead-letter stream."""
        self._writer.dead_letters.add(self.commands, tp, offset, key, value, error)

    def send(self) -> list[Any]:
        """Run the round trip (from any thread); the replies in order. With the writer's
        ``min_replicas``, it returns only once that many replicas hold it."""
        replicas = self._writer.min_replicas
        if replicas:
            # A write of its own: when every message of this batch was a replay (an earlier
            # attempt staged it, then fell short of replicas), WAIT still covers that attempt.
            self.commands.command("SET", self._writer.keys.layout, LAYOUT_VERSION)
        return self.commands.execute(self._client, replicas, self._writer.wait_ms)


class StagingWriter:
    """What a worker writes to one pipeline's staging area (and reads back to write it)."""

    def __init__(
        self, client: RedisClient, keys: Keys, min_replicas: int = 0, wait_ms: int = WAIT_MS
    ) -> None:
        self._client = client
        self.keys = keys
        # Replicas a batch of the worker's must reach before it counts as staged (WAIT).
        self.min_replicas = min_replicas
        self.wait_ms = wait_ms
        self.dead_letters = DeadLetters(client, keys.dead_letters)
        self._resolve_idle = client.register_script(scripts.RESOLVE_IDLE)

    @property
    def pipeline(self) -> str:
        return self.keys.pipeline

    def batch(self) -> StagingBatch:
        """An empty round trip of staging commands."""
        return StagingBatch(self, self._client)

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
        self, tp: TopicPartition, messages: Sequence[StagedMessage | FramedMessage]
    ) -> Any:
        """Stage consecutive messages of ``tp`` in one transaction, each message with its offset
        as one unit: those at or below the staged offset (replays) are skipped. Returns 1 when
        any was staged, else 0."""
        commands = CommandBatch(self.keys.offsets)
        zadds = self.queue_messages(tp, messages, commands)
        return commands.execute(self._client)[-1][zadds]

    def queue_messages(
        self,
        tp: TopicPartition,
        messages: Sequence[StagedMessage | FramedMessage],
        commands: CommandBatch,
    ) -> int:
        """Queue the transaction staging ``messages`` on ``commands``; returns how many ZADDs
        precede the script call inside it (its reply's index in EXEC's)."""
        frames = [m if isinstance(m, FramedMessage) else frame_message(m) for m in messages]
        commands.command("MULTI")
        zadds = 0
        for run in zadd_runs([f for f in frames if f.member_count]):
            head = encode_args(["ZADD", self.keys.rows(tp)])
            pairs = 2 * sum(f.member_count for f in run)
            commands.encoded(2 + pairs, [head, *(f.members for f in run)])
            zadds += 1
        keys = [
            self.keys.offsets,
            self.keys.watermarks,
            self.keys.ddl,
            self.keys.staged,
            self.keys.ddl_ids,
            self.keys.resolved(tp),
        ]
        # EVAL, not EVALSHA: Redis caches the script by its digest either way, and a batch
        # never meets NOSCRIPT after a Redis restart (re-running part of a batch is not safe).
        script: list[Arg] = ["EVAL", scripts.STAGE, len(keys), *keys, tp.field, len(frames)]
        commands.encoded(
            len(script) + sum(f.args for f in frames),
            [encode_args(script), *(f.data for f in frames)],
        )
        for ts in _retiring_ts(messages, retires_topic):
            # In the staging transaction: the topic is retired exactly when its DDL is staged.
            retire: list[Arg] = ["EVAL", scripts.RETIRE, 1, self.keys.retired, tp.topic, ts]
            commands.command(*retire)
        for ts in _retiring_ts(messages, drops_database):
            # Likewise the topics of a dropped database's tables (a replay sets the same).
            commands.command("HSET", self.keys.dropped_databases, ts, tp.topic)
        commands.command("SET", self.keys.layout, LAYOUT_VERSION)
        commands.command("EXEC")
        return zadds

    def set_partition_count(self, topic: str, count: int) -> None:
        self._client.hset(self.keys.partitions, topic, count)

    def staged_offset(self, tp: TopicPartition) -> int | None:
        """The last Kafka offset staged for ``tp``: a new owner resumes after it."""
        value = self._client.hget(self.keys.offsets, tp.field)
        return None if value is None else int(value)

    def staged_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The last staged offset of each of ``partitions`` that has one (one round trip)."""
        ordered = list(partitions)
        if not ordered:
            return {}
        values = self._client.hmget(self.keys.offsets, [tp.field for tp in ordered])
        return {tp: int(v) for tp, v in zip(ordered, values, strict=True) if v is not None}

    def staged_totals(self) -> tuple[int, int]:
        """Rows and bytes staged and not yet trimmed (for backpressure)."""
        totals = self._client.hgetall(self.keys.staged)
        return int(totals.get(b"rows", 0)), int(totals.get(b"bytes", 0))

    def hold(
        self, tp: TopicPartition, offset: int, key: bytes | None, value: bytes, commit_ts: int
    ) -> None:
        """Keep a message that cannot be decoded yet (a Simple DML before its schema).

        Its partition's progress stops short of ``commit_ts`` until it is staged, so the sink
        never releases past a change it does not have.
        """
        commands = CommandBatch(self.keys.offsets)
        self.queue_hold(tp, offset, key, value, commit_ts, commands)
        commands.execute(self._client)

    def queue_hold(
        self, tp: TopicPartition, offset: int, key: bytes | None, value: bytes, commit_ts: int,
        commands: CommandBatch,
    ) -> None:  # fmt: skip
        entry = msgpack.packb([tp.topic, tp.partition, offset, key, value, commit_ts])
        commands.command("RPUSH", self.keys.held, entry)
        commands.command("EVAL", scripts.HOLD_TS, 1, self.keys.held_ts, tp.field, ts_hex(commit_ts))

    def held_count(self) -> int:
        """How many messages wait for their schema."""
        return int(self._client.llen(self.keys.held))

    def held(self) -> list[HeldMessage]:
        """Every held message, oldest first."""
        out = []
        for entry in self._client.lrange(self.keys.held, 0, -1):
            topic, partition, offset, key, value, commit_ts = msgpack.unpackb(entry)
            out.append(
                HeldMessage(
                    as_bytes(entry), TopicPartition(topic, partition), offset, key, value, commit_ts
                )
            )
        return out

    def stage_held(self, held: HeldMessage, rows: Sequence[RowChange]) -> None:
        """Stage a held message's rows now that it decodes, and let its partition move on."""
        pipe = self._client.pipeline(transaction=True)
        self._stage_rows(pipe, held.tp, held.offset, rows)
        # redis-py types list values as text; bytes go as they are.
        pipe.lrem(self.keys.held, 1, held.entry)  # type: ignore[arg-type]
        pipe.execute()
        self._held_released(held)

    def dead_letter_held(self, held: HeldMessage, error: str) -> None:
        """Move a held message to the dead letters (it will never decode), in one transaction,
        and let its partition move on."""
        commands = CommandBatch(self.keys.offsets)
        commands.command("MULTI")
        self.dead_letters.add(commands, held.tp, held.offset, held.key, held.value, error)
        commands.command("LREM", self.keys.held, 1, held.entry)
        commands.command("EXEC")
        commands.execute(self._client)
        self._held_released(held)

    def _held_released(self, held: HeldMessage) -> None:
        """The held-ts cap of ``held``'s partition once it is no longer held."""
        remaining = [h.commit_ts for h in self.held() if h.tp == held.tp]
        if remaining:
            self._client.hset(self.keys.held_ts, held.tp.field, ts_hex(min(remaining)))
        else:
            self._client.hdel(self.keys.held_ts, held.tp.field)

    def stage_late(self, tp: TopicPartition, offset: int, rows: Sequence[RowChange]) -> int:
        """Stage the rows of a message behind its partition's staged offset (a dead letter
        replayed once fixed); returns how many were not staged already. The sink releases them
        only while its checkpoint is below their commit ts: the caller checks."""
        pipe = self._client.pipeline(transaction=True)
        self._stage_rows(pipe, tp, offset, rows)
        results = pipe.execute()
        return int(results[-1]) if results else 0

    def _stage_rows(
        self, pipe: Any, tp: TopicPartition, offset: int, rows: Sequence[RowChange]
    ) -> None:
        """Queue the rows' members on ``pipe``; the staged totals count only members not
        staged already (its last reply: the rows added)."""
        members = row_members(offset, pack_rows(rows))
        if members:
            args: list[Arg] = [LAYOUT_VERSION]
            for member in members:
                args += [member, member_row_count(member)]
            keys = [self.keys.rows(tp), self.keys.staged, self.keys.layout]
            # EVAL, not a registered script: a cluster transaction loads none (and has no .eval()).
            pipe.execute_command("EVAL", scripts.STAGE_MEMBERS, len(keys), *keys, *args)

    def resolve_idle(self, tp: TopicPartition, staged_offset: int, watermark: int) -> bool:
        """Move ``tp``'s watermark to ``watermark`` as a resolved event at ``staged_offset``
        would; False (nothing written) when more was staged since, a message is held, or the
        watermark is there already."""
        keys = [self.keys.offsets, self.keys.watermarks, self.keys.held_ts, self.keys.resolved(tp)]
        args: list[bytes | str] = [tp.field, str(staged_offset), ts_hex(watermark)]
        return bool(self._resolve_idle(keys=keys, args=args))

    def trim_dead_letters(self, max_entries: int) -> int:
        """Keep the newest ``max_entries`` dead letters; returns how many old ones went."""
        return self.dead_letters.trim(max_entries)


def _retiring_ts(
    messages: Sequence[StagedMessage | FramedMessage], rule: Callable[[DDLEvent], bool]
) -> list[bytes]:
    """The commit ts (16 hex) of each DDL of ``messages`` that ``rule`` picks: one that takes its
    topic's table away, or a DROP DATABASE (a natively framed message carries none: DDL goes
    through Python)."""
    return [
        ts_hex(ddl.commit_ts)
        for message in messages
        if isinstance(message, StagedMessage)
        for ddl in message.ddls
        if rule(ddl)
    ]
