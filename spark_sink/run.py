"""`ticdc-sink apply`: start the sink of one pipeline, take the lead (or stand by until it can),
and run the loop round after round, riding out Redis and downstream outages."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator

import pymysql

from config.errors import TransactionTooLargeError, TransientApplyError
from config.settings import Settings
from config.signals import stop_done, stop_on_signals
from core.metrics import serve_metrics
from core.outage import RETRY_FIRST_S, Outage, next_delay
from core.redis_client import REDIS_TRANSIENT, redis_client
from core.staging import Staging
from core.startup import wait_for, wait_for_redis
from core.version import installed_version
from spark_sink.db.connection import connect
from spark_sink.db.retries import DOWNSTREAM_OUTAGE
from spark_sink.leader import LeaderLock
from spark_sink.load.spark_start import SparkStart, sink_spark
from spark_sink.loop import SinkLoop
from spark_sink.metrics import record_checkpoint
from spark_sink.routing import Router
from spark_sink.target import Target

log = logging.getLogger("ticdc_sink.sink")

# How long the loop sleeps when there is nothing new to apply.
IDLE_SLEEP_S = 0.05


def run_sink(settings: Settings, once: bool = False) -> int:
    """Lead the pipeline (or wait as standby until it can) and apply until stopped.

    SIGTERM or SIGINT lets the batch in progress finish, releases the lease (a standby takes
    over at once rather than after the lease's term) and returns 0."""
    log.info(
        "ticdc-sink %s: the sink of pipeline %s starting (pid %d)",
        installed_version(),
        settings.group,
        os.getpid(),
    )
    try:
        code = _run_sink(settings, once)
    finally:
        stop_done()
    log.info("the sink of pipeline %s stopped (exit %d)", settings.group, code)
    return code


def _run_sink(settings: Settings, once: bool) -> int:
    # Waited for under the command line's own handlers: a signal then ends the start (exit 0).
    wait_for_redis(settings)
    _wait_for_downstream(settings)
    stop = stop_on_signals(stop_timeout=settings.stop_timeout)
    serve_metrics(settings)
    client = redis_client(settings)
    staging = Staging(client, settings.group)
    staging.check_layout()
    lock = LeaderLock(client, staging.keys, min_replicas=settings.redis.min_replicas)
    # Spark's JVM takes seconds of CPU and hundreds of MiB: it starts when the first batch that
    # loads through Spark asks for it, and only such a batch waits for it.
    spark = SparkStart(sink_spark(settings))
    target = Target(settings, spark, Router(settings.sink.routes, settings.sink.skip_tables))
    redis_outage = Outage("Redis", log)
    standing_by = False
    while not stop.is_set() and not _acquire(lock, redis_outage):
        if once:
            log.warning(
                "another sink leads pipeline %s: --once applies nothing while it does",
                settings.group,
            )
            return 1
        if not standing_by and not redis_outage.ongoing:
            # Said once: a standby polls the lease three times a term, for as long as it waits.
            log.info("another sink leads pipeline %s; standing by", settings.group)
            standing_by = True
        stop.wait(lock.lease_ms / 3000)
    if stop.is_set():
        log.info("stopped before leading pipeline %s", settings.group)
        return 0
    lost = lock.keep_alive(redis_outage)
    sink = SinkLoop(settings, staging, target, epoch=lock.epoch, stop=stop)
    log.info("leading pipeline %s with epoch %d", settings.group, lock.epoch)
    try:
        code = lead(sink, lock, lost.is_set, redis_outage, once, stop)
    finally:
        lock.release()
    if stop.is_set():
        log.info("stopped; released the lease of pipeline %s", settings.group)
    return code


def lead(
    sink: SinkLoop,
    lock: LeaderLock,
    lost: Callable[[], bool],
    redis_outage: Outage,
    once: bool,
    stop: threading.Event | None = None,
) -> int:
    """Apply round after round, riding out Redis and downstream outages, until the lease is
    lost to another sink, ``stop`` is set (0), or after one round with ``once``."""
    stop = stop or threading.Event()
    try:
        return _lead(sink, lock, lost, redis_outage, once, stop)
    finally:
        sink.close()


def _lead(
    sink: SinkLoop,
    lock: LeaderLock,
    lost: Callable[[], bool],
    redis_outage: Outage,
    once: bool,
    stop: threading.Event,
) -> int:
    last = None
    delay = RETRY_FIRST_S
    too_large = ""
    while not stop.is_set():
        # The lease may have been taken again after it lapsed: later commits carry the new epoch.
        sink.epoch = lock.epoch
        try:
            with _unless_stopping(stop, "applying a batch (it is applied again)"):
                applied = sink.run_once()
        except REDIS_TRANSIENT as error:
            # Nothing is trimmed before its commit, so the next round redoes what is left.
            redis_outage.failed(error, "applying")
            stop.wait(delay)
            delay = next_delay(delay)
            continue
        except TransactionTooLargeError as error:
            # Not an outage: the operator has a limit to raise (or the split to allow).
            if str(error) != too_large:
                log.error("%s", error)
                too_large = str(error)
            sink.target.drop_connection()
            stop.wait(delay)
            delay = next_delay(delay)
            continue
        except (pymysql.MySQLError, TransientApplyError) as error:
            if not sink.target.is_transient(error):
                raise
            sink.target.drop_connection()
            DOWNSTREAM_OUTAGE.failed(error, "applying")
            stop.wait(delay)
            delay = next_delay(delay)
            continue
        redis_outage.answered()
        DOWNSTREAM_OUTAGE.answered()
        delay = RETRY_FIRST_S
        too_large = ""
        if lost():
            # A newer leader exists; the epoch check already refused any late commit.
            log.error("another sink took the leader lease; stopping")
            return 1
        if applied != last:
            record_checkpoint(sink.settings.group, applied)
        if once:
            return 0
        if applied == last:
            stop.wait(IDLE_SLEEP_S)
        last = applied
    return 0


def _acquire(lock: LeaderLock, outage: Outage) -> bool:
    try:
        taken = lock.acquire()
    except REDIS_TRANSIENT as error:
        outage.failed(error, "taking the lead")
        return False
    outage.answered()
    return taken


def _wait_for_downstream(settings: Settings) -> None:
    def probe() -> None:
        connect(settings, connect_timeout=3).close()

    wait_for("the downstream", str(settings.downstream.url), probe, settings.startup_timeout)


@contextlib.contextmanager
def _unless_stopping(stop: threading.Event, what: str) -> Iterator[None]:
    """Errors while a stop signal is being handled end the process quietly: a supervisor
    stopping the process group stops Spark's JVM too, which fails the step in progress."""
    try:
        yield
    except Exception as error:
        if not stop.is_set():
            raise
        log.warning("stopped while %s: %s", what, error)
        raise SystemExit(0) from None
