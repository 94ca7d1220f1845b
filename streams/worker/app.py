"""The Faust worker of one pipeline: the app, its agent and timers, and how it is run.

The transport hands the pipeline's topics' messages, in lists, to the staging line
(``streams/worker/line.py``) past Faust's streams (the agent subscribes the topics and stages
whatever reaches its stream on the same line), which stages them through the stager
(``streams/worker/stager.py``) and acknowledges each batch once it is staged: Faust commits only
acknowledged offsets, so a committed offset is always staged. Timers record partition counts,
publish the global resolved ts, resolve quiet partitions, log progress and retry held messages;
``/status/`` serves the status document.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import redis
from aiokafka.errors import KafkaError

from config.errors import ConfigError
from config.settings import EventLoop, Protocol, Settings, default_of
from core.collector import collect_rarely
from core.kafka_client import faust_broker, kafka_options
from core.metrics import serve_metrics
from core.outage import Outage
from core.redis_client import redis_client
from core.staging import Staging, TopicPartition
from core.startup import wait_for_kafka, wait_for_redis
from core.tso import tso_seconds
from streams.codecs import codec_for
from streams.idle import IdleView, QuietClock, idle_check_interval, idle_watermark
from streams.large_messages import LargeMessages
from streams.metrics import GLOBAL_RESOLVED, PARTITION_WATERMARK
from streams.progress import Progress
from streams.schema_store import RedisSchemaStore
from streams.status import kafka_offsets, snapshot
from streams.worker.line import REDIS_TRANSIENT, StagingLine, until_done
from streams.worker.stager import MessageStager

log = logging.getLogger("ticdc_sink.worker")

# Heartbeats per session timeout (Kafka's advice: at most a third of it).
HEARTBEATS_PER_SESSION = 10
# Faust commits acknowledged (hence staged) offsets this often, or every N events.
COMMIT_INTERVAL_S = 1.0
COMMIT_EVERY = 5_000
# Messages staged per Redis round trip (fewer, larger round trips leave Redis less idle), and
# how long a partial batch may wait for more.
STAGE_BATCH = 1000
STAGE_WITHIN_S = 0.05
# How often held messages (Simple DML before its schema) are retried without a new schema.
HELD_RETRY_S = 5.0
# How often the worker publishes the global resolved ts as a metric.
METRICS_INTERVAL_S = 5.0
# How long a paused worker waits before looking at the staged totals again.
BACKPRESSURE_POLL_S = 0.5


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

    from streams.transport import ChunkTransport, Direct

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
        web_port=settings.worker.web_port or default_of("web_port"),
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
    stager = MessageStager(
        staging,
        codec_for(settings.kafka.protocol, RedisSchemaStore(staging.schemas())),
        settings.worker.on_error,
        LargeMessages.from_settings(settings),
        dead_letter_max=settings.redis.dead_letter_max_entries,
    )
    progress = Progress()
    # One per service for the whole worker: an outage is logged once, whoever meets it first.
    redis_outage = Outage("Redis", log)
    startup_outage = Outage("Redis or Kafka", log)

    # mode's handler type (SignalHandlerT) matches no function mypy can check against it.
    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def forget_staged(app: Any, revoked: Any, **_: Any) -> None:
        # Another worker may stage these partitions before they come back here.
        stager.forget_offsets()

    @app.task
    async def partition_counts() -> None:
        # Until it is recorded the global resolved ts stays unknown: never give up on it.
        await until_done(
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
            if staging.held_count():
                stager.retry_held()

    @app.page("/status/")
    async def status_page(web: Any, request: Any) -> Any:
        committed, ends = await kafka_offsets(settings, staging.partitions())
        return web.json(snapshot(staging, committed, ends, checkpoint_ts=None))

    line = StagingLine(
        app,
        stager,
        functools.partial(_wait_for_room, app, settings, staging),
        decode_threads=settings.worker.decode_threads,
        redis_outage=redis_outage,
    )

    async def stage_direct(messages: list[Any]) -> None:
        # The transport hands the topics' messages here, past Faust's streams (its per-message
        # machinery cost ~3 us a row); unacknowledged until staged, as the agent's events.
        records = [
            (TopicPartition(m.topic, m.partition), m.offset, m.key, m.value) for m in messages
        ]
        await line.submit(records, functools.partial(_acknowledge_messages, app, messages))

    app.transport.direct = Direct(frozenset(settings.kafka.topics), stage_direct)

    @app.agent(topic)
    async def stage(stream: Any) -> None:
        # Subscribes the topics and stages whatever reaches their stream (the transport takes
        # their messages directly), on the same line: one order per partition.
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
    quiet for ``idle_s`` seconds to the highest commit ts staged from it, or the pipeline's
    highest watermark (see streams/idle.py)."""
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
    pipeline_watermark = await asyncio.to_thread(staging.highest_watermark)
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
            pipeline_watermark,
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


async def _acknowledge(stream: Any, events: Sequence[Any]) -> None:
    for event in events:
        await stream.ack(event)


async def _acknowledge_messages(app: Any, messages: Sequence[Any]) -> None:
    ack = app.consumer.ack
    for message in messages:
        ack(message)


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
    _staging(settings).check_layout()
    wait_for_kafka(settings)
    serve_metrics(settings)
    app = build_app(settings)
    _check_topics(settings)
    # Logging is configured already (config/logs.py): Faust's records take the same form.
    worker = Worker(app, quiet=True, override_logging=False)
    # Faust's start-up spinner writes terminal escape codes into the log: none.
    worker.spinner = None
    # Each fetched chunk makes Faust events and records by the thousand (core/collector.py).
    collect_rarely()
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
