"""The sink's loop against real MariaDB and Redis: outages are waited out, not fatal."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from config.settings import Settings
from spark_sink.downstream import connect
from spark_sink.driver import Sink, lead
from spark_sink.leader import LeaderLock
from spark_sink.merge import Applier
from streams.outage import Outage
from streams.staging import Staging

pytestmark = pytest.mark.integration

SINK_LOG = logging.getLogger("ticdc_sink.sink")


@pytest.fixture
def pipeline(settings: Settings, unique: str, staging: Staging) -> Iterator[Settings]:
    configured = settings.model_copy(update={"group": unique, "meta_db": f"{unique}_meta"})
    staging.set_partition_count("topic", 1)
    yield configured
    with connect(configured, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")


def test_an_idle_sink_whose_connection_was_cut_goes_on(
    pipeline: Settings, staging: Staging, redis_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sink = Sink(pipeline, staging, Applier(pipeline))
    lock = LeaderLock(redis_client, staging.key("sink-leader"))
    assert lock.acquire()
    redis_outage = Outage("Redis", SINK_LOG)
    assert lead(sink, lock, lambda: False, redis_outage, once=True) == 0
    # The server cuts the idle connection (a restart, a proxy's idle timeout).
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"KILL {sink.applier.connection().thread_id()}")
    with caplog.at_level(logging.WARNING, SINK_LOG.name):
        assert lead(sink, lock, lambda: False, redis_outage, once=True) == 0
    assert "the downstream unavailable since" in caplog.text
    assert "the downstream back after" in caplog.text
    lock.release()


def test_a_sink_whose_lease_another_sink_took_stops(
    pipeline: Settings, staging: Staging, redis_client: Any
) -> None:
    sink = Sink(pipeline, staging, Applier(pipeline))
    lock = LeaderLock(redis_client, staging.key("sink-leader"))
    assert lock.acquire()
    assert lead(sink, lock, lambda: True, Outage("Redis", SINK_LOG), once=False) == 1
