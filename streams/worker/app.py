"""The Faust app of one pipeline and its wiring: Faust's settings, the topics subscribed, every
fetched message handed to the staging line, the timers, the ``/status/`` page.

The transport (``streams/transport.py``) hands the topics' messages, in lists, to the staging
line (``streams/worker/line.py``), which stages them through the stager
(``streams/worker/stager.py``) and acknowledges each list once it is staged: Faust commits only
acknowledged offsets, so a committed offset is always staged. The app has no agent: the topics
are subscribed through its conductor, and no Faust stream reads them.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust

from config.settings import Protocol, Settings, default_of
from core.kafka_client import faust_broker
from core.outage import Outage
from core.staging import Staging, TopicPartition
from streams.codecs import Codec, codec_for
from streams.large_messages import LargeMessages
from streams.schema_registry import SchemaRegistry
from streams.schema_store import RedisSchemaStore
from streams.status import kafka_offsets, pattern_topics, snapshot
from streams.transport import ChunkTransport, Handler
from streams.worker.backpressure import wait_for_room
from streams.worker.line import StagingLine
from streams.worker.stager import MessageStager, Record
from streams.worker.timers import Timers
from streams.worker.topics import RESUBSCRIBE_S

log = logging.getLogger("ticdc_sink.worker")

# Heartbeats per session timeout (Kafka's advice: at most a third of it).
HEARTBEATS_PER_SESSION = 10
# Faust commits acknowledged (hence staged) offsets this often, or every N messages.
COMMIT_INTERVAL_S = 1.0
COMMIT_EVERY = 5_000


@dataclass(frozen=True, slots=True)
class WorkerApp:
    """The Faust app of a worker, and the staging line its messages go to."""

    app: Any
    line: StagingLine


def build_app(
    settings: Settings, staging: Staging, topics: Sequence[str] | None = None
) -> WorkerApp:
    """The Faust app of one pipeline, staging the messages of ``topics`` (by default
    ``TICDC_SINK_TOPICS``; with a pattern, the topics it matched at start, joined by those
    created later)."""
    app = faust_app(settings)
    stager = MessageStager(
        staging,
        worker_codec(settings, staging, stopping=lambda: bool(app.should_stop)),
        settings.worker.on_error,
        LargeMessages.from_settings(settings),
        dead_letter_max=settings.redis.dead_letter_max_entries,
        held_max_messages=settings.worker.held_max_messages,
    )
    # One per service for the whole worker: an outage is logged once, whoever meets it first.
    redis_outage = Outage("Redis", log)
    line = StagingLine(
        app,
        stager,
        functools.partial(wait_for_room, app, settings, staging),
        decode_threads=settings.worker.decode_threads,
        redis_outage=redis_outage,
    )
    app.transport = ChunkTransport(app.conf.broker_consumer, app, _stage_on(app, line))
    # What the conductor holds is what the consumer subscribes; its messages all go to the line.
    app.topics.add(app.topic(*(settings.kafka.topics if topics is None else topics)))
    # A private attribute (faust-streaming is pinned to its minor version): see RESUBSCRIBE_S.
    app.topics._resubscribe_sleep_lock_seconds = RESUBSCRIBE_S
    _connect_signals(app, stager, line)
    Timers(app, settings, staging, stager, line, redis_outage).schedule()
    _add_status_page(app, settings, staging)
    return WorkerApp(app, line)


def worker_codec(settings: Settings, staging: Staging, *, stopping: Callable[[], bool]) -> Codec:
    """The pipeline's codec: the Simple and Debezium codecs keep table schemas in staging; the
    Avro codec reads the schema registry (cached in staging), waiting while it is away until
    the worker stops."""
    registry = None
    if settings.kafka.protocol is Protocol.AVRO:
        registry = SchemaRegistry.from_settings(settings, staging, stopping=stopping)
    return codec_for(
        settings.kafka.protocol, RedisSchemaStore(staging.schemas()), registry=registry
    )


def faust_app(settings: Settings) -> Any:
    """Faust's app for the pipeline: its consumer group, commits of acknowledged offsets only,
    no topics declared, no leader topic, no tables kept on disk."""
    return faust.App(
        settings.group,
        **faust_broker(settings),
        # What Kafka names the group's member by, so that `status` tells the workers apart.
        broker_client_id=f"ticdc-sink-worker-{socket.gethostname()}-{os.getpid()}",
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


def _stage_on(app: Any, line: StagingLine) -> Handler:
    """The transport's handler: each list of messages submitted to ``line``, acknowledged once
    it is staged."""

    async def stage(messages: list[Any]) -> None:
        await line.submit(_records(messages), functools.partial(_acknowledge, app, messages))

    return stage


def _records(messages: Sequence[Any]) -> list[Record]:
    """Faust's messages as the stager's records."""
    return [(TopicPartition(m.topic, m.partition), m.offset, m.key, m.value) for m in messages]


async def _acknowledge(app: Any, messages: Sequence[Any]) -> None:
    ack = app.consumer.ack
    for message in messages:
        ack(message)


def _connect_signals(app: Any, stager: MessageStager, line: StagingLine) -> None:
    """What the stager and the line do on a rebalance and at shutdown."""

    async def forget_staged(app: Any, revoked: Any, **_: Any) -> None:
        # Another worker may stage these partitions before they come back here.
        stager.forget_partitions()

    async def close_line(app: Any, **_: Any) -> None:
        # Sent once the consumer has stopped and waited for what it handed over to be
        # acknowledged: what is staged stays staged, the rest is read again from Kafka.
        await line.close()

    app.on_partitions_revoked.connect(forget_staged)
    app.on_before_shutdown.connect(close_line)


def _add_status_page(app: Any, settings: Settings, staging: Staging) -> None:
    """``/status/``: the status document (streams/status.py), without the sink's checkpoint."""

    async def status_page(view: Any, request: Any) -> Any:
        committed, ends = await kafka_offsets(settings, staging.partitions())
        matched = await pattern_topics(settings)
        return view.json(snapshot(staging, committed, ends, checkpoint_ts=None, matched=matched))

    app.page("/status/")(status_page)
