"""Running a worker: start-up checks and waits, then Faust's worker until SIGTERM or SIGINT.

Faust's worker turns either signal into the app's stop: the consumer stops fetching, waits for
what it handed over to be staged and acknowledged, commits, and the staging line closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from typing import Any, NoReturn

import redis
from aiokafka.errors import KafkaError

from config.errors import ConfigError
from config.settings import EventLoop, Protocol, Settings
from config.signals import end_if_overdue, stop_done
from core.collector import collect_rarely
from core.metrics import serve_metrics
from core.redis_client import redis_client
from core.staging import Staging
from core.startup import wait_for_kafka, wait_for_redis
from core.version import installed_version
from streams.schema_registry import SchemaRegistry
from streams.worker.topics import matched_at_start, record_partition_counts

log = logging.getLogger("ticdc_sink.worker")

# The end of mode's record of the error its worker's start-up failed on.
STARTUP_ERROR = "Error: %r"


def run_worker(settings: Settings) -> int:
    """Run a worker until it is stopped (SIGTERM/SIGINT)."""
    log.info(
        "ticdc-sink %s: a worker of pipeline %s starting on %s (pid %d)",
        installed_version(),
        settings.group,
        _topics_named(settings),
        os.getpid(),
    )
    try:
        return _run_worker(settings)
    finally:
        stop_done()
        log.info("the worker of pipeline %s stopped", settings.group)


def _run_worker(settings: Settings) -> int:
    _use_event_loop(settings.worker.event_loop)
    # Faust, and the app built on it, only once the event loop is chosen.
    from faust.worker import Worker

    from streams.worker.app import build_app

    bounded = _bounded_stop(Worker, settings.stop_timeout)

    wait_for_redis(settings)
    staging = Staging(redis_client(settings), settings.group, settings.redis.min_replicas)
    staging.check_layout()
    wait_for_kafka(settings)
    if settings.kafka.protocol is Protocol.AVRO:
        wait_for_registry(settings, staging)
    serve_metrics(settings)
    if not settings.kafka.topics and not settings.kafka.topics_pattern:
        raise ConfigError(
            "neither TICDC_SINK_TOPICS (the topics to consume) nor TICDC_SINK_TOPICS_PATTERN "
            "(a regular expression their names match) is set: set one"
        )
    for warning in [*protocol_warnings(settings), *topic_warnings(settings)]:
        log.warning("%s", warning)
    topics = None
    if settings.kafka.topics_pattern:
        topics = matched_at_start(settings, staging)
        if not topics:
            return 0
    built = build_app(settings, staging, topics)
    if topics is None:
        _check_topics(settings, staging)
    # Logging is configured already (config/logs.py): Faust's records take the same form.
    worker = bounded(built.app, quiet=True, override_logging=False)
    # mode's services log as their class's module does.
    logging.getLogger(Worker.__module__).addFilter(_StartingAgain())
    # Faust's start-up spinner writes terminal escape codes into the log: none.
    worker.spinner = None
    # Each fetched chunk makes Faust messages and records by the thousand (core/collector.py).
    collect_rarely()
    try:
        worker.execute_from_commandline()
    except SystemExit:
        # Faust ends every run with SystemExit; a line that stopped (a halt) makes it a failure.
        if built.line.failure is not None:
            raise built.line.failure from None
        lost = kafka_lost_at_start(worker)
        if lost is not None:
            _start_again(lost)
        raise
    return 0


def _bounded_stop(worker_class: type[Any], stop_timeout: float) -> type[Any]:
    """Faust's worker, whose stop ends the process once it outlives ``stop_timeout``
    (TICDC_SINK_STOP_TIMEOUT): Faust's own stop waits on Kafka's coordinator, for as long as
    a broker that went away stays away."""

    class BoundedStop(worker_class):  # type: ignore[misc]
        def _schedule_shutdown(self, signum: signal.Signals) -> None:
            # mode's handler of SIGTERM and SIGINT.
            end_if_overdue(stop_timeout, signum.name)
            super()._schedule_shutdown(signum)

    return BoundedStop


def kafka_lost_at_start(worker: Any) -> KafkaError | None:
    """The error Faust's start-up failed on when Kafka went away after the worker's own wait for
    it (Faust's clients try each bootstrap server once); None when the worker ended otherwise."""
    # mode's Worker keeps its start-up future; its error is the cause of the SystemExit.
    started = getattr(worker, "_starting_fut", None)
    if started is None or not started.done() or started.cancelled():
        return None
    error = started.exception()
    return error if _kafka_away(error) else None


def _kafka_away(error: BaseException | None) -> bool:
    """Whether ``error`` is one a Kafka client calls retriable (a broker away, say)."""
    return isinstance(error, KafkaError) and error.retriable


class _StartingAgain(logging.Filter):
    """Drops mode's record (with its traceback) of a start-up that failed on Kafka: the worker
    starts again and says so in one line of its own (:func:`_start_again`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        # mode puts the service's name before its message: "[^Worker]: Error: %r".
        failed_start = str(record.msg).endswith(STARTUP_ERROR)
        return not (failed_start and record.exc_info and _kafka_away(record.exc_info[1]))


def _start_again(error: KafkaError) -> NoReturn:
    """Run the worker's command again in this process (same pid, arguments and environment):
    Faust's app cannot start twice, and the new start waits for Kafka as the first did."""
    # aiokafka's errors name their type in their text.
    log.warning("Kafka went away while the worker started (%s); starting again", error)
    sys.stderr.flush()
    os.execv(sys.executable, sys.orig_argv)


def wait_for_registry(settings: Settings, staging: Staging) -> None:
    """The schema registry answers as one and takes the login (a wrong address, login or CA:
    ConfigError); while it is away, waited for as Kafka and Redis are, within
    ``TICDC_SINK_STARTUP_TIMEOUT`` (then RegistryUnavailableError)."""
    registry = SchemaRegistry.from_settings(settings, staging, patience=settings.startup_timeout)
    registry.check()


def _topics_named(settings: Settings) -> str:
    if settings.kafka.topics_pattern:
        return f"the topics matching {settings.kafka.topics_pattern}"
    return ", ".join(settings.kafka.topics) or "no topics"


def protocol_warnings(settings: Settings) -> list[str]:
    """What the configured protocol needs of the changefeed or the settings to release anything,
    said once at start."""
    protocol = settings.kafka.protocol
    if protocol is Protocol.CANAL_JSON:
        return [
            "canal-json needs the changefeed's enable-tidb-extension=true: messages without "
            "its commit ts go to the dead letters, and without its watermarks nothing is released"
        ]
    if protocol is Protocol.AVRO:
        return [
            "avro needs the changefeed's enable-tidb-extension=true (rows without its commit ts "
            "are refused: dead letters) and avro-enable-watermark=true (without its checkpoints "
            "nothing is released)"
        ]
    if protocol is Protocol.DEBEZIUM and not settings.worker.resolve_when_idle:
        return [
            "debezium: TiCDC's Debezium encoder writes no checkpoint events, so without "
            "TICDC_SINK_RESOLVE_WHEN_IDLE (seconds) no partition's watermark moves and "
            "nothing is released"
        ]
    return []


def topic_warnings(settings: Settings) -> list[str]:
    """A pattern without the changefeed's default topic, said once at start: TiCDC sends
    CREATE DATABASE and every checkpoint there."""
    kafka = settings.kafka
    if kafka.topics_pattern and not kafka.default_topic:
        return [
            "TICDC_SINK_TOPICS_PATTERN is set without TICDC_SINK_DEFAULT_TOPIC: unless the "
            "pattern matches the changefeed's default topic (the sink URI's topic), its "
            "CREATE DATABASE never arrives and the sink stops at the database's first table"
        ]
    return []


def _check_topics(settings: Settings, staging: Staging) -> None:
    """A topic that does not exist stops the worker at start with one line (ConfigError), not a
    crash inside Faust; while Kafka or Redis is unreachable, the worker's own task retries."""
    with contextlib.suppress(KafkaError, redis.RedisError, OSError):
        asyncio.run(record_partition_counts(settings, staging))


def _use_event_loop(loop: EventLoop) -> None:
    """Install the configured event loop before Faust makes one."""
    if loop is EventLoop.UVLOOP:
        import mode.loop

        try:
            mode.loop.use("uvloop")
        except ImportError as missing:
            raise ConfigError(
                "TICDC_SINK_EVENT_LOOP=uvloop but uvloop is not installed: install "
                "ticdc-sink[worker] or set TICDC_SINK_EVENT_LOOP=asyncio"
            ) from missing
