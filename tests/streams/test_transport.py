"""ChunkConsumer hands a fetched chunk to the streams as Faust's own loop does, one by one (or
a direct handler's topics to it, in lists), and fetches again as soon as a full stream buffer
has room."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import faust
import pytest
from faust.types import TP
from faust.types.tuples import Message

from streams.transport import DIRECT_BATCH, ChunkConsumer, ChunkTransport, Direct

TOPIC = "t"


def _message(partition: int, offset: int) -> Message:
    # Fetched in the consumer's current generation (an app's first is 0).
    message = Message(TOPIC, partition, offset, 0.0, 0, {}, b"k", b"v%d" % offset, None)
    message.generation_id = 0
    return message


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


async def test_a_direct_topic_goes_to_its_handler_in_lists_tracked_until_acknowledged(
    consumer_and_delivered: tuple[ChunkConsumer, list[tuple[int, int]]],
) -> None:
    consumer, delivered = consumer_and_delivered
    handed: list[list[tuple[int, int]]] = []
    read_when_handed: list[Any] = []

    async def handle(messages: list[Any]) -> None:
        handed.append([(m.partition, m.offset) for m in messages])
        read_when_handed.append(consumer._read_offset[TP(TOPIC, 0)])
        assert all(m in consumer._unacked_messages for m in messages)

    consumer.transport.direct = Direct(frozenset({TOPIC}), handle)
    other = Message("other", 0, 9, 0.0, 0, {}, b"k", b"v", None)
    last = DIRECT_BATCH + 4
    chunk = [(TP(TOPIC, 0), _message(0, offset)) for offset in range(last + 1)]
    chunk.insert(3, (TP("other", 0), other))
    await consumer._deliver(chunk)
    # In order: the three before the other topic's message, then lists of at most DIRECT_BATCH.
    assert handed == [
        [(0, 0), (0, 1), (0, 2)],
        [(0, offset) for offset in range(3, 3 + DIRECT_BATCH)],
        [(0, offset) for offset in range(3 + DIRECT_BATCH, last + 1)],
    ]
    assert delivered == [(0, 9)]
    # The read offset moves once the handler has a list, not before.
    assert read_when_handed[0] is None
    assert read_when_handed[1] == 2
    assert consumer._read_offset[TP(TOPIC, 0)] == last
    # Each stays pending until acknowledged, as a stream's events do.
    assert len(consumer._unacked_messages) == last + 1


async def test_a_direct_list_not_taken_is_not_waited_for_and_stale_messages_are_skipped(
    consumer_and_delivered: tuple[ChunkConsumer, list[tuple[int, int]]],
) -> None:
    consumer, _ = consumer_and_delivered
    taken = asyncio.Event()

    async def never(messages: list[Any]) -> None:
        taken.set()
        await asyncio.sleep(3600)

    consumer.transport.direct = Direct(frozenset({TOPIC}), never)
    stale = _message(0, 0)
    stale.generation_id = consumer.app.consumer_generation_id - 1
    delivering = asyncio.ensure_future(
        consumer._deliver([(TP(TOPIC, 0), stale), (TP(TOPIC, 0), _message(0, 1))])
    )
    await asyncio.wait_for(taken.wait(), timeout=5)
    # A rebalance suspends delivery while the handler waits (a full line).
    delivering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await delivering
    assert not consumer._unacked_messages
    assert consumer._read_offset[TP(TOPIC, 0)] is None
