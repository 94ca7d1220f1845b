"""ChunkConsumer hands a fetched chunk to the streams as Faust's own loop does, one by one, and
fetches again as soon as a full stream buffer has room."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import faust
import pytest
from faust.types import TP
from faust.types.tuples import Message

from streams.transport import ChunkConsumer, ChunkTransport

TOPIC = "t"


def _message(partition: int, offset: int) -> Message:
    return Message(TOPIC, partition, offset, 0.0, 0, {}, b"k", b"v%d" % offset, None)


@pytest.fixture
def consumer_and_delivered() -> tuple[ChunkConsumer, list[tuple[int, int]]]:
    app = faust.App("test-transport", broker="kafka://127.0.0.1:9092")
    app.transport = ChunkTransport(app.conf.broker_consumer, app)
    delivered: list[tuple[int, int]] = []

    async def callback(message: Any) -> None:
        delivered.append((message.partition, message.offset))

    async def rebalanced(*_: Any) -> None:
        return None

    consumer = app.transport.create_consumer(
        callback=callback, on_partitions_revoked=rebalanced, on_partitions_assigned=rebalanced
    )
    assert isinstance(consumer, ChunkConsumer)
    return consumer, delivered


async def test_a_chunk_is_delivered_in_order_and_moves_the_read_offsets(
    consumer_and_delivered: tuple[ChunkConsumer, list[tuple[int, int]]],
) -> None:
    consumer, delivered = consumer_and_delivered
    chunk = [(TP(TOPIC, p), _message(p, offset)) for offset in range(3) for p in (0, 1)]
    await consumer._deliver(chunk)
    assert delivered == [(p, offset) for offset in range(3) for p in (0, 1)]
    assert consumer._read_offset[TP(TOPIC, 0)] == 2
    assert consumer._read_offset[TP(TOPIC, 1)] == 2


async def test_messages_below_the_read_offset_are_dropped_as_faust_drops_them(
    consumer_and_delivered: tuple[ChunkConsumer, list[tuple[int, int]]],
) -> None:
    # A re-fetch after a seek hands back messages already delivered.
    consumer, delivered = consumer_and_delivered
    consumer._read_offset[TP(TOPIC, 0)] = 5
    await consumer._deliver([(TP(TOPIC, 0), _message(0, offset)) for offset in range(3, 8)])
    assert delivered == [(0, 5), (0, 6), (0, 7)]
    assert consumer._read_offset[TP(TOPIC, 0)] == 7


async def test_a_full_buffer_with_room_again_is_fetched_at_once_not_after_a_second(
    consumer_and_delivered: tuple[ChunkConsumer, list[tuple[int, int]]],
) -> None:
    consumer, _ = consumer_and_delivered
    tp = TP(TOPIC, 0)
    consumer.flow_active = True
    # The only partition's stream buffer is full: nothing is fetchable.
    consumer._set_active_tps({tp})
    consumer.on_buffer_full(tp)
    assert not consumer._get_active_partitions()
    started = time.monotonic()
    waiting = asyncio.ensure_future(consumer._wait_next_records(timeout=30.0))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # it waits for room (Faust would sleep a second)
    consumer.on_buffer_drop(tp)
    records, active = await asyncio.wait_for(waiting, timeout=5.0)
    assert records == {} and active == {tp}
    assert time.monotonic() - started < 1.0
