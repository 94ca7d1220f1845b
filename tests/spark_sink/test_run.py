"""Leading a pipeline against real MariaDB and Redis: outages are waited out, not fatal; a lease
another sink took stops the sink; Spark's start never holds up a batch that does not need it."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from config.settings import Settings
from core.outage import Outage
from core.staging import Staging
from core.version import installed_version
from spark_sink.db.connection import connect
from spark_sink.leader import LeaderLock
from spark_sink.load import spark_start
from spark_sink.loop import SinkLoop
from spark_sink.run import lead, run_sink
from spark_sink.target import Target
from tests.spark_sink.keyed import keyed_rows

pytestmark = pytest.mark.integration

SINK_LOG = logging.getLogger("ticdc_sink.sink")


def test_an_idle_sink_whose_connection_was_cut_goes_on(
    pipeline: Settings, staging: Staging, redis_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sink = SinkLoop(pipeline, staging, Target(pipeline))
    lock = LeaderLock(redis_client, staging.keys)
    assert lock.acquire()
    redis_outage = Outage("Redis", SINK_LOG)
    assert lead(sink, lock, lambda: False, redis_outage, once=True) == 0
    # The server cuts the idle connection (a restart, a proxy's idle timeout).
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"KILL {sink.target.connection().thread_id()}")
    with caplog.at_level(logging.WARNING, SINK_LOG.name):
        assert lead(sink, lock, lambda: False, redis_outage, once=True) == 0
    assert "the downstream unavailable since" in caplog.text
    assert "the downstream back after" in caplog.text
    lock.release()


def test_a_sink_whose_lease_another_sink_took_stops(
    pipeline: Settings, staging: Staging, redis_client: Any
) -> None:
    sink = SinkLoop(pipeline, staging, Target(pipeline))
    lock = LeaderLock(redis_client, staging.keys)
    assert lock.acquire()
    assert lead(sink, lock, lambda: True, Outage("Redis", SINK_LOG), once=False) == 1


@pytest.fixture
def own_signal_handlers() -> Iterator[None]:
    """``run_sink`` takes SIGTERM and SIGINT for itself: pytest gets them back afterwards."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def applied(pipeline: Settings, scratch_db: str) -> int:
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM `{scratch_db}`.keyed")
        return int(cursor.fetchone()[0])


@pytest.mark.usefixtures("own_signal_handlers")
def test_a_small_batch_never_waits_for_spark_to_start(
    pipeline: Settings,
    staging: Staging,
    scratch_db: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a table of TICDC_SINK_SPARK_MIN_ROWS rows or more loads through Spark: a batch of
    three rows is applied while Spark's start is still blocked."""
    keyed_rows(pipeline, staging, scratch_db)(0, 1, 3)
    release = threading.Event()
    built: list[bool] = []

    def blocked_build(*_: Any, **__: Any) -> Any:
        release.wait(20)
        built.append(True)
        return object()

    monkeypatch.setattr(spark_start, "build_spark", blocked_build)
    try:
        started = time.monotonic()
        assert run_sink(pipeline, once=True) == 0
        assert not built, "the sink waited for Spark"
        assert time.monotonic() - started < 15
        assert applied(pipeline, scratch_db) == 3
    finally:
        release.set()


@pytest.mark.usefixtures("own_signal_handlers")
def test_a_sink_whose_batches_need_no_spark_never_starts_it(
    pipeline: Settings,
    staging: Staging,
    scratch_db: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark's JVM (seconds of CPU, hundreds of MiB) starts only for a load through Spark."""
    keyed_rows(pipeline, staging, scratch_db)(0, 1, 3)
    asked: list[bool] = []

    def counted_build(*_: Any, **__: Any) -> Any:
        asked.append(True)
        raise RuntimeError("no JVM here")

    monkeypatch.setattr(spark_start, "build_spark", counted_build)
    assert run_sink(pipeline, once=True) == 0
    assert applied(pipeline, scratch_db) == 3
    assert not asked, "the sink started Spark for batches that did not need it"


@pytest.mark.usefixtures("own_signal_handlers")
def test_a_standby_says_so_once_and_with_once_leaves_at_once(
    pipeline: Settings,
    staging: Staging,
    redis_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While another sink leads: ``apply --once`` exits 1 at once (it would apply nothing);
    ``apply`` stands by and says so once, not at every look at the lease."""
    leader = LeaderLock(redis_client, staging.keys)
    assert leader.acquire()
    try:
        with caplog.at_level(logging.INFO, SINK_LOG.name):
            started = time.monotonic()
            assert run_sink(pipeline, once=True) == 1
            assert time.monotonic() - started < 10
        assert "--once applies nothing while it does" in caplog.text
        caplog.clear()
        # Look at the lease every 50 ms, and stop after a second of standing by.
        monkeypatch.setattr(
            "spark_sink.run.LeaderLock",
            lambda client, keys, **options: LeaderLock(client, keys, 150, **options),
        )
        timer = threading.Timer(1.0, lambda: signal.raise_signal(signal.SIGTERM))
        timer.start()
        with caplog.at_level(logging.INFO, SINK_LOG.name):
            assert run_sink(pipeline) == 0
        timer.join()
        assert caplog.text.count("standing by") == 1, caplog.text
        # One line at start naming what, which pipeline and which version.
        started_line = f"ticdc-sink {installed_version()}: the sink of pipeline {pipeline.group}"
        assert f"{started_line} starting (pid" in caplog.text, caplog.text
        assert f"the sink of pipeline {pipeline.group} stopped (exit 0)" in caplog.text
    finally:
        leader.release()
