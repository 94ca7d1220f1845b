"""ChunkConsumer hands a fetched chunk to the streams as Faust's own loop does, one by one."""

from __future__ import annotations

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
