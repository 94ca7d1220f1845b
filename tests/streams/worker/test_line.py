"""The staging line over the real Redis: order, threads, acknowledgement after staging, failure."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from config.errors import DecodeError, HaltedError
from config.settings import OnError
from core.model import Op, Resolved, RowChange, column_type
from core.outage import Outage
from core.redis_client import RedisClient
from core.staging import Staging
from streams.codecs import codec_for
from streams.schema_store import RedisSchemaStore
from streams.worker.line import DECODE_PART_MIN, Acknowledge, StagingLine, split
from streams.worker.stager import MessageStager
from tests.conftest import REDIS_KINDS, redis_of
from tests.streams.worker.records import TP, TS, simple_messages


@pytest.fixture(params=REDIS_KINDS)
def redis_client(request: pytest.FixtureRequest, redis_client: RedisClient) -> RedisClient:
    """The line's batches on one Redis and on the Redis Cluster."""
    return redis_of(request, redis_client)


pytestmark = pytest.mark.integration


@pytest.fixture
def staging(staging: Staging) -> Staging:
    staging.set_partition_count(TP.topic, 1)
    return staging


class _App:
    """What the staging line asks of the Faust app."""

    should_stop = False

    def __init__(self) -> None:
        self.crashed: BaseException | None = None

    async def crash(self, error: BaseException) -> None:
        self.crashed = error


async def _room() -> None:
    """Staging always has room: the limits are backpressure's (tests/streams/worker/test_app.py)."""


def _line(app: _App, stager: MessageStager, threads: int = 1) -> StagingLine:
    outage = Outage("Redis", logging.getLogger("test"))
    return StagingLine(app, stager, _room, decode_threads=threads, redis_outage=outage)


def _acknowledger(staging: Staging, acked: list[int], last_offset: int) -> Acknowledge:
    async def acknowledge() -> None:
        # Never before the batch is staged: Faust commits what is acknowledged.
        assert staging.staged_offset(TP) == last_offset
        acked.append(last_offset)

    return acknowledge


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.01)


async def test_the_line_stages_what_the_sync_batch_does(
    redis_client: redis.Redis, staging: Staging
) -> None:
    # The worker's path: decoded in a thread, sent from another, acknowledged once staged.
    bootstrap, dml, watermark, row = simple_messages()
    schemas = RedisSchemaStore(staging.schemas())
    stager = MessageStager(staging, codec_for("simple", schemas), OnError.DEADLETTER)
    line = _line(_App(), stager)
    acked: list[int] = []
    batches = [
        [(TP, 0, None, dml.value), (TP, 1, None, watermark.value)],
        [(TP, 2, None, bootstrap.value), (TP, 3, b"x", b"junk")],
    ]
    for batch in batches:
        await line.submit(batch, _acknowledger(staging, acked, batch[-1][1]))
    await _until(lambda: len(acked) == 2)
    await line.close()
    assert acked == [1, 3]
    assert staging.held() == []
    assert list(staging.release(0, TS + 10)) == [row]
    assert redis_client.xlen(staging.keys.dead_letters) == 1


@pytest.mark.parametrize(("batch_size", "threads"), [(3, 1), (160, 3)])
async def test_the_line_keeps_each_partition_in_order_across_many_batches(
    staging: Staging, batch_size: int, threads: int
) -> None:
    rows = [
        RowChange(TS + i, "db", "t", Op.INSERT, {"id": column_type(3, 10)}, {"id": i}, None)
        for i in range(1, 4000)
    ]
    codec = codec_for("open")
    messages = codec.encode(rows) + codec.encode([Resolved(TS + 10_000)])
    records = [(TP, offset, m.key, m.value) for offset, m in enumerate(messages)]
    line = _line(_App(), MessageStager(staging, codec, OnError.DEADLETTER), threads)
    acked: list[int] = []
    for start in range(0, len(records), batch_size):
        batch = records[start : start + batch_size]
        await line.submit(batch, _acknowledger(staging, acked, batch[-1][1]))
    await _until(lambda: bool(acked) and acked[-1] == len(records) - 1)
    await line.close()
    assert acked == sorted(acked)
    assert list(staging.release(0, TS + 10_000)) == rows


@given(count=st.integers(0, 600), parts=st.integers(1, 8))
def test_a_batch_splits_into_runs_that_keep_its_order(count: int, parts: int) -> None:
    records = [(TP, offset, None, b"") for offset in range(count)]
    runs = split(records, parts)
    assert [r for run in runs for r in run] == records
    assert len(runs) <= parts
    assert len(runs) == 1 or min(map(len, runs)) >= DECODE_PART_MIN


async def test_a_failed_line_stops_the_worker(staging: Staging) -> None:
    app = _App()
    line = _line(app, MessageStager(staging, codec_for("open"), OnError.HALT))
    acked: list[int] = []
    await line.submit([(TP, 0, b"\x00" * 8, b"junk")], _acknowledger(staging, acked, 0))
    await _until(lambda: app.crashed is not None)
    await line.close()
    # The worker's own error names the message; run_worker raises it once Faust has stopped.
    assert app.crashed is line.failure
    assert isinstance(line.failure, HaltedError)
    assert isinstance(line.failure.__cause__, DecodeError)
    assert acked == []
    assert staging.staged_offset(TP) is None
