"""The Faust worker: consume TiCDC topics, decode each message, stage it in Redis, then move on.

Faust acknowledges an event when the agent moves past it and commits acknowledged offsets on a
timer, so staging happens before the agent takes the next event: a committed offset is always
staged. ``at_least_once`` and the staging script's offset check make re-delivery harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis
from aiokafka.errors import KafkaError

from config.errors import ConfigError, DecodeError, NotYetDecodableError
from config.settings import (
    DEFAULT_DEAD_LETTER_MAX_ENTRIES,
    DEFAULT_WEB_PORT,
    EventLoop,
    OnError,
    Protocol,
    Settings,
)
from streams.codecs import Codec, codec_for
from streams.dead_letters import DeadLetters
from streams.idle import IdleView, QuietClock, idle_check_interval, idle_watermark
from streams.kafka_client import faust_broker, kafka_options
from streams.large_messages import LargeMessages
from streams.metrics import (
    DEAD_LETTERS,
    DEAD_LETTERS_TRIMMED,
    EVENTS_DECODED,
    GLOBAL_RESOLVED,
    PARTITION_WATERMARK,
    ROWS_STAGED,
    serve_metrics,
    tso_seconds,
)
from streams.model import Bootstrap, DDLEvent, Resolved, RowChange
from streams.outage import RETRY_FIRST_S, Outage, next_delay
from streams.packed import pack_rows
from streams.progress import Progress
from streams.redis_client import redis_client
from streams.resp import CommandBatch
from streams.schema_store import RedisSchemaStore
from streams.staging import FramedMessage, StagedMessage, Staging, TopicPartition, frame_packed
from streams.startup import wait_for_kafka, wait_for_redis
from streams.status import kafka_offsets, snapshot

log = logging.getLogger("ticdc_sink.worker")
T = TypeVar("T")

Record = tuple[TopicPartition, int, bytes | None, bytes | None]
# Acknowledges a staged batch's events to Faust (which then commits their offsets).
Acknowledge = Callable[[], Awaitable[None]]
# A batch with its records' fast-path decoding (see MessageStager.decode).
Decoded = tuple[Sequence[Record], list[FramedMessage | None], Acknowledge]

# Heartbeats per session timeout (Kafka's advice: at most a third of it).
HEARTBEATS_PER_SESSION = 10
# Faust commits acknowledged (hence staged) offsets this often, or every N events.
COMMIT_INTERVAL_S = 1.0
COMMIT_EVERY = 5_000
# Messages staged per Redis round trip (fewer, larger round trips leave Redis less idle), and
# how long a partial batch may wait for more.
STAGE_BATCH = 1000
STAGE_WITHIN_S = 0.05
# Batches waiting in each of the staging line's two queues (to be decoded, to be sent). With the
# one the agent holds, the one decoding, the one queued behind the round trip and the one in it,
# a worker holds at most six batches.
LINE_WAITING = 1
# The fewest messages worth a decoding thread of their own.
DECODE_PART_MIN = 50
# How often held messages (Simple DML before its schema) are retried without a new schema.
HELD_RETRY_S = 5.0
# How often the worker publishes the global resolved ts as a metric.
METRICS_INTERVAL_S = 5.0
# What a Redis restart, a LOADING reply or a cut connection raises: waited out, never fatal.
REDIS_TRANSIENT = (redis.ConnectionError, redis.TimeoutError)
NO_COMMIT_TS = (
    "an event carries no commit ts: run the changefeed with enable-tidb-extension=true "
    "(Canal-JSON has neither commit ts nor watermarks without it)"
)
# How long a paused worker waits before looking at the staged totals again.
BACKPRESSURE_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A batch decoded and its staging commands encoded, not yet sent."""

    commands: CommandBatch
    # Whether it carries schemas (DDL, BOOTSTRAP) that held messages may be waiting for.
    schemas_changed: bool
    # Dead letters it adds (the stream is trimmed to its cap once they are in).
    dead_letters: int = 0
    # The highest DDL commit ts it stages per partition (a quiet partition resolves up to it).
    ddl_ts: dict[TopicPartition, int] = field(default_factory=dict)


class MessageStager:
    """Decodes one Kafka message and stages its events; the pure middle of the worker."""

    def __init__(
        self,
        staging: Staging,
        codec: Codec,
        on_error: OnError,
        large_messages: LargeMessages | None = None,
        *,
        dead_letter_max: int = DEFAULT_DEAD_LETTER_MAX_ENTRIES,
    ) -> None:
        self.staging = staging
        self.codec = codec
        self.on_error = on_error
        # Claim checks and handle-key-only rows are made whole before staging.
        self.large_messages = large_messages or LargeMessages()
        self.dead_letters = 0
        self._dead_letter_store = DeadLetters(staging)
        self._dead_letter_max = dead_letter_max
        # Totals for the progress line (replays and dead letters not counted).
        self.rows_staged = 0
        self.messages_staged = 0
        self._schemas_changed = False
        self._last_staged: dict[TopicPartition, int] = {}
        # The highest DDL commit ts staged (sent) per partition; rows are read back from Redis.
        self.ddl_ts: dict[TopicPartition, int] = {}
        # The watermark this worker moved each quiet partition to (TICDC_SINK_RESOLVE_WHEN_IDLE):
        # a change that arrives at or below it breaks that rule's assumption, and is logged.
        self.idle_marks: dict[TopicPartition, int] = {}
        # Labelled once: a labels() lookup per message costs more than the increment.
        pipeline = staging.pipeline
        self._rows_decoded = EVENTS_DECODED.labels(pipeline, "row")
        self._marks_decoded = EVENTS_DECODED.labels(pipeline, "resolved")
        self._rows_staged = ROWS_STAGED.labels(pipeline)

    def stage_batch(self, records: Sequence[Record]) -> None:
        """Stage consecutive messages in one Redis round trip.

        Each partition's messages go in one script call that stages each message with its
        offset as one unit, in order, so a crash midway leaves a prefix staged and the rest to
        be re-delivered.
        """
        batch = self.prepare(records)
        try:
            self.send(batch)
        except BaseException:
            self.forget_offsets()
            raise
        self.staged(batch)

    def prepare(self, records: Sequence[Record]) -> PreparedBatch:
        """Decode ``records`` and encode the commands that stage them, not yet sent.

        The stager then counts them as staged, so the next batch can be prepared while this one
        is sent (see :meth:`send` for a failed round trip).
        """
        fresh = self.fresh(records)
        return self.queue(fresh, self.decode(fresh))

    def fresh(self, records: Sequence[Record]) -> list[Record]:
        """The records not staged yet."""
        # Replays (a rebalance, a restart after a crash) are skipped before any decoding; the
        # staging script checks again, atomically, so a race between workers is still safe.
        staged = self.staged_offsets(records)
        return [r for r in records if staged[r[0]] < r[1]]

    def decode(self, records: Sequence[Record]) -> list[FramedMessage | None]:
        """The records' fast path: decoded, packed and framed for staging natively (see
        :meth:`Codec.decode_packed_many`), None where the codec decides; safe to run in a
        thread while the event loop goes on."""
        messages = [(key, value or b"") for _, _, key, value in records]
        packed = self.codec.decode_packed_many(messages)
        taken = [(r[1], p) for r, p in zip(records, packed, strict=True) if p is not None]
        framed = iter(frame_packed(taken))
        return [None if p is None else next(framed) for p in packed]

    def queue(
        self, records: Sequence[Record], framed: Sequence[FramedMessage | None]
    ) -> PreparedBatch:
        """The commands staging ``records`` (``framed``: their :meth:`decode`)."""
        commands = CommandBatch()
        self._schemas_changed = False
        dead_before = self.dead_letters
        by_partition: dict[TopicPartition, list[StagedMessage | FramedMessage]] = {}
        ddl_ts: dict[TopicPartition, int] = {}
        for record, frame in zip(records, framed, strict=True):
            message = self._stage(record, frame, commands)
            by_partition.setdefault(record[0], []).append(message)
            if isinstance(message, StagedMessage) and message.ddls:
                highest = max(ddl.commit_ts for ddl in message.ddls)
                ddl_ts[record[0]] = max(highest, ddl_ts.get(record[0], highest))
        for tp, messages in by_partition.items():
            self.staging.stage_messages(tp, messages, commands)
            self._last_staged[tp] = messages[-1].offset
        self.messages_staged += len(records)
        return PreparedBatch(
            commands, self._schemas_changed, self.dead_letters - dead_before, ddl_ts
        )

    def send(self, batch: PreparedBatch) -> None:
        """Run a prepared batch's round trip (from any thread). If it fails, the caller calls
        :meth:`forget_offsets`: what was counted as staged may not be."""
        batch.commands.execute(self.staging.client)

    def staged(self, batch: PreparedBatch) -> None:
        """After a batch is sent: stage the held messages its schemas may have unblocked."""
        for tp, ts in batch.ddl_ts.items():
            self.ddl_ts[tp] = max(ts, self.ddl_ts.get(tp, ts))
        if batch.schemas_changed and self.staging.client.llen(self.staging.key("held")):
            self.retry_held()
        if batch.dead_letters:
            trimmed = self._dead_letter_store.trim(self._dead_letter_max)
            DEAD_LETTERS_TRIMMED.labels(self.staging.pipeline).inc(trimmed)

    def staged_offsets(self, records: Sequence[Record]) -> dict[TopicPartition, int]:
        """The last staged offset of each partition in ``records``. Redis is asked only for a
        partition whose records do not follow straight on from what this stager staged last
        (the first batch, a seek, a rebalance): a consumer reads a partition's offsets in order."""
        expected: dict[TopicPartition, int] = {}
        unsure = set()
        for tp, offset, _, _ in records:
            # -1 for a partition never staged here: no offset follows it.
            if offset != expected.get(tp, self._last_staged.get(tp, -2) + 1):
                unsure.add(tp)
            expected[tp] = offset + 1
        staged = self.staging.staged_offsets(unsure) if unsure else {}
        return {
            tp: staged.get(tp, -1) if tp in unsure else self._last_staged[tp] for tp in expected
        }

    def forget_offsets(self) -> None:
        """Forget what this stager staged last (its partitions were revoked: another worker
        may stage them before they come back)."""
        self._last_staged.clear()

    def retry_held(self) -> int:
        """Stage the held messages whose schema has arrived; returns how many were staged."""
        staged = 0
        for entry, tp, offset, key, value, _ in self.staging.held():
            try:
                events = self.large_messages.decode(self.codec, key, value)
            except NotYetDecodableError:
                continue
            rows = [e for e in events if isinstance(e, RowChange)]
            self.staging.stage_held(entry, tp, offset, rows)
            staged += 1
        return staged

    def _stage(
        self, record: Record, framed: FramedMessage | None, commands: CommandBatch
    ) -> StagedMessage | FramedMessage:
        """What ``record`` stages; a dead letter or a held message also queues its own command
        on ``commands``."""
        tp, offset, key, value = record
        if framed is not None:
            # The fast path: rows packed and framed straight from the wire.
            self._count(tp, framed.rows, framed.marks)
            return framed
        try:
            events = self.large_messages.decode(self.codec, key, value or b"")
        except NotYetDecodableError as later:
            # Not bad input: what it needs comes later (its schema, for a consumer that started
            # mid-stream); a hold signal is no DecodeError, so it never reaches _quarantine.
            self.staging.hold(tp, offset, key, value or b"", later.commit_ts, commands)
            return StagedMessage(offset)
        except DecodeError as error:
            return self._quarantine(record, error, commands)
        rows = [e for e in events if isinstance(e, RowChange)]
        ddls = [e for e in events if isinstance(e, DDLEvent)]
        marks = [e.commit_ts for e in events if isinstance(e, Resolved)]
        if any(change.commit_ts == 0 for change in (*rows, *ddls)):
            # Canal-JSON without TiCDC's extension: no commit ts, so no order and no watermark.
            return self._quarantine(
                record, DecodeError(self.codec.protocol, NO_COMMIT_TS), commands
            )
        if self.idle_marks:
            self._check_late(tp, offset, [c.commit_ts for c in (*rows, *ddls)])
        if ddls or any(isinstance(e, Bootstrap) for e in events):
            self._schemas_changed = True
        self._count(tp, len(rows), marks)
        return StagedMessage(offset, pack_rows(rows), ddls, max(marks) if marks else None)

    def _check_late(self, tp: TopicPartition, offset: int, commit_ts: list[int]) -> None:
        """Log changes at or below the watermark a quiet partition was moved to: the sink may
        have applied past them already, and then never applies them."""
        mark = self.idle_marks.get(tp)
        late = [ts for ts in commit_ts if mark is not None and ts <= mark]
        if late:
            log.warning(
                "%s offset %d: a change at commit ts %d arrived after the partition was "
                "resolved up to %d when quiet (TICDC_SINK_RESOLVE_WHEN_IDLE): if the sink "
                "has applied past it, it is not applied; raise the quiet time",
                tp.field,
                offset,
                min(late),
                mark,
            )

    def _count(self, tp: TopicPartition, rows: int, marks: list[int]) -> None:
        self.rows_staged += rows
        self._rows_decoded.inc(rows)
        self._rows_staged.inc(rows)
        if marks:
            self._marks_decoded.inc(len(marks))
            PARTITION_WATERMARK.labels(self.staging.pipeline, tp.topic, str(tp.partition)).set(
                tso_seconds(max(marks))
            )

    def _quarantine(
        self, record: Record, error: DecodeError, commands: CommandBatch
    ) -> StagedMessage:
        """A message that cannot be staged: halt, or dead-letter it and go on."""
        if self.on_error is OnError.HALT:
            raise error
        self.dead_letter(record, error, commands)
        # The offset still counts as staged, so a replay does not dead-letter it twice.
        return StagedMessage(record[1])

    def dead_letter(self, record: Record, error: DecodeError, commands: CommandBatch) -> None:
        tp, offset, key, value = record
        self.dead_letters += 1
        DEAD_LETTERS.labels(self.staging.pipeline).inc()
        log.warning("dead letter %s offset %d: %s", tp.field, offset, error)
        self._dead_letter_store.add(commands, tp, offset, key, value, str(error))


async def _record_partition_counts(settings: Settings, staging: Staging) -> None:
    """The partition count of every topic, from the topic's own metadata."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        for description in await admin.describe_topics(list(settings.kafka.topics)):
            if description["error_code"]:
                raise ConfigError(f"TICDC_SINK_TOPICS: topic {description['topic']!r} not found")
            staging.set_partition_count(description["topic"], len(description["partitions"]))
    finally:
        await admin.close()


def build_app(settings: Settings, staging_factory: Callable[[], Staging] | None = None) -> Any:
    """The Faust app of one pipeline: an agent over ``TICDC_SINK_TOPICS`` that stages."""
    import faust

    from streams.transport import ChunkTransport

    if not settings.kafka.topics:
        raise ConfigError("TICDC_SINK_TOPICS is empty: name the topics to consume")
    app = faust.App(
        settings.group,
        **faust_broker(settings),
        key_serializer="raw",
        value_serializer="raw",
        processing_guarantee="at_least_once",
        broker_session_timeout=settings.kafka.session_timeout,
        broker_heartbeat_interval=settings.kafka.session_timeout / HEARTBEATS_PER_SESSION,
        broker_commit_interval=COMMIT_INTERVAL_S,
        broker_commit_every=COMMIT_EVERY,
        consumer_auto_offset_reset="earliest",
        topic_allow_declare=False,
        topic_disable_leader=True,
        store="memory://",
        # Faust wants a data folder even with in-memory tables; keep it out of the working dir.
        datadir=str(Path(tempfile.gettempdir()) / f"ticdc-sink-faust-{settings.group}"),
        web_enabled=settings.worker.web_port != 0,
        web_port=settings.worker.web_port or DEFAULT_WEB_PORT,
        web_bind=settings.metrics.host,
        web_host=settings.metrics.host,
    )
    app.transport = ChunkTransport(app.conf.broker_consumer, app)
    if settings.kafka.protocol is Protocol.CANAL_JSON:
        log.warning(
            "canal-json needs the changefeed's enable-tidb-extension=true: messages without "
            "its commit ts go to the dead letters, and without its watermarks nothing is released"
        )
    if settings.kafka.protocol is Protocol.DEBEZIUM and not settings.worker.resolve_when_idle:
        log.warning(
            "debezium: TiCDC's Debezium encoder writes no checkpoint events, so without "
            "TICDC_SINK_RESOLVE_WHEN_IDLE (seconds) no partition's watermark moves and "
            "nothing is released"
        )
    topic = app.topic(*settings.kafka.topics, key_type=bytes, value_type=bytes)
    staging = (staging_factory or (lambda: _staging(settings)))()
    schemas = RedisSchemaStore(staging.client, staging.key("schemas"))
    stager = MessageStager(
        staging,
        codec_for(settings.kafka.protocol, schemas),
        settings.worker.on_error,
        LargeMessages.from_settings(settings),
        dead_letter_max=settings.redis.dead_letter_max_entries,
    )
    progress = Progress()
    # One per service for the whole worker: an outage is logged once, whoever meets it first.
    redis_outage = Outage("Redis", log)
    startup_outage = Outage("Redis or Kafka", log)

    @app.on_partitions_revoked.connect
    async def forget_staged(app: Any, revoked: Any, **_: Any) -> None:
        stager.forget_offsets()

    @app.task
    async def partition_counts() -> None:
        # Until it is recorded the global resolved ts stays unknown: never give up on it.
        await _until_done(
            app,
            lambda: _record_partition_counts(settings, staging),
            (redis.RedisError, KafkaError),
            "recording partition counts",
            startup_outage,
        )

    @app.timer(interval=METRICS_INTERVAL_S)
    async def global_resolved() -> None:
        with _skip_tick_without_redis(redis_outage, "publishing the global resolved ts"):
            resolved = staging.global_resolved_ts()
            if resolved is not None:
                GLOBAL_RESOLVED.labels(settings.group).set(tso_seconds(resolved))

    if settings.worker.resolve_when_idle:
        quiet = QuietClock()

        @app.timer(interval=idle_check_interval(settings.worker.resolve_when_idle))
        async def resolve_idle_partitions() -> None:
            with _skip_tick_without_redis(redis_outage, "resolving quiet partitions"):
                await _resolve_idle(app, staging, stager, quiet, settings.worker.resolve_when_idle)

    @app.timer(interval=settings.worker.progress_interval)
    async def report_progress() -> None:
        with _skip_tick_without_redis(redis_outage, "reporting progress"):
            resolved = staging.global_resolved_ts()
            assigned = len(app.consumer.assignment())
            line = progress.line(stager.rows_staged, stager.messages_staged, assigned, resolved)
            log.info("%s", line)

    @app.timer(interval=HELD_RETRY_S)
    async def retry_held() -> None:
        # Another worker may have learned the schema a held message waits for.
        with _skip_tick_without_redis(redis_outage, "retrying held messages"):
            if staging.client.llen(staging.key("held")):
                stager.retry_held()

    @app.page("/status/")
    async def status_page(web: Any, request: Any) -> Any:
        committed, ends = await kafka_offsets(settings, staging.partitions())
        return web.json(snapshot(staging, committed, ends, checkpoint_ts=None))

    @app.agent(topic)
    async def stage(stream: Any) -> None:
        line = StagingLine(
            app,
            stager,
            functools.partial(_wait_for_room, app, settings, staging),
            decode_threads=settings.worker.decode_threads,
            redis_outage=redis_outage,
        )
        try:
            # Unacknowledged until staged: the line acknowledges each batch once it is staged.
            async for events in stream.noack_take(STAGE_BATCH, within=STAGE_WITHIN_S):
                records = [
                    (
                        TopicPartition(e.message.topic, e.message.partition),
                        e.message.offset,
                        e.message.key,
                        e.message.value,
                    )
                    for e in events
                ]
                await line.submit(records, functools.partial(_acknowledge, stream, events))
        finally:
            await line.close()

    return app


async def _resolve_idle(
    app: Any, staging: Staging, stager: MessageStager, quiet: QuietClock, idle_s: float
) -> None:
    """Move the watermark of each assigned partition that is staged to its log-end offset and
    quiet for ``idle_s`` seconds to the highest commit ts staged from it (see streams/idle.py)."""
    assigned = sorted(app.consumer.assignment())
    if not assigned:
        return
    try:
        ends = await app.consumer.highwaters(*assigned)
    except KafkaError as error:
        log.debug("no log-end offsets this time: %s", error)
        return
    partitions = [TopicPartition(kafka_tp.topic, kafka_tp.partition) for kafka_tp in assigned]
    progress = await asyncio.to_thread(staging.progress, partitions)
    now = time.monotonic()
    for kafka_tp, tp in zip(assigned, partitions, strict=True):
        state = progress[tp]
        highest = max(
            (ts for ts in (state.highest_row_ts, stager.ddl_ts.get(tp)) if ts is not None),
            default=None,
        )
        view = IdleView(
            state.staged_offset,
            ends.get(kafka_tp),
            quiet.quiet_for(tp, state.staged_offset, now),
            highest,
            state.watermark,
            state.holding,
        )
        mark = idle_watermark(view, idle_s)
        if mark is None or state.staged_offset is None:
            continue
        if await asyncio.to_thread(staging.resolve_idle, tp, state.staged_offset, mark):
            stager.idle_marks[tp] = mark
            PARTITION_WATERMARK.labels(staging.pipeline, tp.topic, str(tp.partition)).set(
                tso_seconds(mark)
            )
            log.info(
                "%s quiet at its end (offset %d) for %.1f s: watermark moved to %d",
                tp.field,
                state.staged_offset,
                view.quiet_s,
                mark,
            )


@contextlib.contextmanager
def _skip_tick_without_redis(outage: Outage, what: str) -> Iterator[None]:
    """A timer's tick skipped while Redis is unreachable (the next tick tries again)."""
    try:
        yield
    except REDIS_TRANSIENT as error:
        outage.failed(error, what)
    else:
        outage.answered()


class StagingLine:
    """Stages batches in the order they are submitted, on tasks of its own.

    The agent hands a batch over and goes back to Faust for the next one at once. One task
    decodes batches (on ``decode_threads`` threads: the native decoders let go of the GIL),
    another queues each decoded batch's staging and sends it to Redis while the next is
    decoded and Faust delivers the one after. One round trip is in flight at a time, so each
    partition's messages reach Redis in order; each batch is acknowledged once it is staged;
    nothing more is sent while staging is over its limits (``wait_for_room``). If the line
    fails (a bad message under ``halt``, Redis gone while stopping) the worker stops.
    """

    def __init__(
        self,
        app: Any,
        stager: MessageStager,
        wait_for_room: Callable[[], Awaitable[None]] | None = None,
        decode_threads: int = 1,
        redis_outage: Outage | None = None,
    ) -> None:
        self._app = app
        self._redis_outage = redis_outage or Outage("Redis", log)
        self._stager = stager
        self._wait_for_room = wait_for_room
        self._decode_threads = decode_threads
        self._waiting: asyncio.Queue[tuple[Sequence[Record], Acknowledge]] = asyncio.Queue(
            LINE_WAITING
        )
        self._decoded: asyncio.Queue[Decoded] = asyncio.Queue(LINE_WAITING)
        self._tasks: list[asyncio.Future[None]] = []

    async def submit(self, records: Sequence[Record], acknowledge: Acknowledge) -> None:
        """Queue a batch; waits while :data:`LINE_WAITING` batches wait already."""
        if not self._tasks:
            self._tasks = [
                asyncio.ensure_future(self._until_failed(self._decode())),
                asyncio.ensure_future(self._until_failed(self._stage())),
            ]
        await self._waiting.put((records, acknowledge))

    async def close(self) -> None:
        """Stop the line's tasks (what is staged stays staged; the rest is not acknowledged)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _until_failed(self, work: Awaitable[None]) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.error("staging stopped: %s", error)
            await self._app.crash(error)
            raise

    async def _decode(self) -> None:
        while True:
            records, acknowledge = await self._waiting.get()
            parts = _split(records, self._decode_threads)

            async def decode_parts(parts: list[Sequence[Record]] = parts) -> list[Any]:
                return await asyncio.gather(
                    *(asyncio.to_thread(self._stager.decode, part) for part in parts)
                )

            # The Simple codec reads its schema cache in Redis while decoding.
            decoded = await self._redis(decode_parts, "decoding")
            framed = [frame for part in decoded for frame in part]
            await self._decoded.put((records, framed, acknowledge))

    async def _stage(self) -> None:
        sending: asyncio.Future[None] | None = None
        while True:
            records, framed, acknowledge = await self._decoded.get()
            # Replays are dropped here rather than before decoding: they are rare (a restart,
            # a rebalance) and this knows the offsets of every batch queued before it.
            staged = await self._redis(
                functools.partial(asyncio.to_thread, self._stager.staged_offsets, records),
                "reading staged offsets",
            )
            fresh = [(r, f) for r, f in zip(records, framed, strict=True) if staged[r[0]] < r[1]]

            async def queue(fresh: list[tuple[Record, Any]] = fresh) -> PreparedBatch:
                return self._stager.queue([r for r, _ in fresh], [f for _, f in fresh])

            # Decoding a message the fast path left (Simple) may read the schema cache.
            batch = await self._redis(queue, "decoding")
            if sending is not None:
                await sending
            if self._wait_for_room is not None:
                # Backpressure: while this waits the queues fill, the agent waits to submit,
                # and Faust stops fetching once its buffer is full.
                await self._redis(self._wait_for_room, "checking the staging limits")
            sending = asyncio.ensure_future(self._send(records, batch, acknowledge))

    async def _send(
        self, records: Sequence[Record], batch: PreparedBatch, acknowledge: Acknowledge
    ) -> None:
        # Rides out Redis restarts and dropped connections: the batch is not acknowledged until
        # it is staged, and staging it again is harmless.
        prepared: PreparedBatch | None = batch

        async def attempt() -> None:
            nonlocal prepared
            # After a failed round trip the batch is prepared again: Redis may hold part of it.
            sent = prepared or self._stager.prepare(records)
            prepared = None
            try:
                await asyncio.to_thread(self._stager.send, sent)
            except BaseException:
                self._stager.forget_offsets()
                raise
            self._stager.staged(sent)

        await self._redis(attempt, "staging")
        await acknowledge()

    async def _redis(self, action: Callable[[], Awaitable[T]], what: str) -> T:
        """``action``'s result, waiting out Redis restarts, LOADING and cut connections."""
        return await _until_done(self._app, action, REDIS_TRANSIENT, what, self._redis_outage)


def _split(records: Sequence[Record], parts: int) -> list[Sequence[Record]]:
    """``records`` in at most ``parts`` consecutive runs of about equal size (none shorter than
    :data:`DECODE_PART_MIN`: a thread hop costs more than decoding a few messages)."""
    parts = min(parts, len(records) // DECODE_PART_MIN)
    if parts <= 1:
        return [records]
    size, longer = divmod(len(records), parts)
    bounds = [i * size + min(i, longer) for i in range(parts + 1)]
    return [records[start:end] for start, end in itertools.pairwise(bounds)]


async def _acknowledge(stream: Any, events: Sequence[Any]) -> None:
    for event in events:
        await stream.ack(event)


async def _until_done(
    app: Any,
    action: Callable[[], Awaitable[T]],
    transient: tuple[type[Exception], ...],
    what: str,
    outage: Outage,
) -> T:
    """``action``'s result once it succeeds, backing off while it fails with ``transient``
    errors (re-raised once the worker is stopping); ``outage`` logs once per outage."""
    delay = RETRY_FIRST_S
    failed = False
    while True:
        try:
            result = await action()
        except transient as error:
            if app.should_stop:
                raise
            outage.failed(error, what)
            failed = True
            await asyncio.sleep(delay)
            delay = next_delay(delay)
            continue
        if failed:
            # Only an action that failed and now succeeds has shown the service is back: one
            # that never needed it (decoding without a schema lookup) shows nothing.
            outage.answered()
        return result


async def _wait_for_room(app: Any, settings: Settings, staging: Staging) -> None:
    """Backpressure: hold the staging line (and so the agent and its partitions) while staging
    is over its limits and the sink has something to apply.

    Faust stops fetching for a stream whose buffer is full, so Kafka keeps what Redis cannot
    take yet. When nothing staged is releasable (a partition's next watermark is still in
    Kafka, behind what holding keeps there), holding would never end: the worker goes on until
    the global resolved ts moves. A worker asked to stop stops waiting.
    """
    while not app.should_stop:
        rows, size = staging.staged_totals()
        if rows < settings.worker.max_staged_rows and size < settings.worker.max_staged_bytes:
            return
        if not staging.releasable():
            return
        await asyncio.sleep(BACKPRESSURE_POLL_S)


def _staging(settings: Settings) -> Staging:
    return Staging(redis_client(settings), settings.group)


def run_worker(settings: Settings) -> int:
    """Run a worker until it is stopped (SIGTERM/SIGINT)."""
    _use_event_loop(settings.worker.event_loop)
    from faust.worker import Worker

    wait_for_redis(settings)
    wait_for_kafka(settings)
    serve_metrics(settings)
    app = build_app(settings)
    _check_topics(settings)
    # Logging is configured already (config/logs.py): Faust's records take the same form.
    worker = Worker(app, quiet=True, override_logging=False)
    # Faust's start-up spinner writes terminal escape codes into the log: none.
    worker.spinner = None
    worker.execute_from_commandline()
    return 0


def _check_topics(settings: Settings) -> None:
    """A topic that does not exist stops the worker at start with one line (ConfigError), not a
    crash inside Faust; while Kafka or Redis is unreachable, the worker's own task retries."""
    with contextlib.suppress(KafkaError, redis.RedisError, OSError):
        asyncio.run(_record_partition_counts(settings, _staging(settings)))


def _use_event_loop(loop: EventLoop) -> None:
    """Install the configured event loop before Faust makes one."""
    if loop is EventLoop.UVLOOP:
        import mode.loop

        try:
            mode.loop.use("uvloop")
        except ImportError as missing:
            raise ConfigError(
                "TICDC_SINK_EVENT_LOOP=uvloop but uvloop is not installed: install "
                "ticdc-sink[streams] or set TICDC_SINK_EVENT_LOOP=asyncio"
            ) from missing
