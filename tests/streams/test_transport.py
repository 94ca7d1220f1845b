"""ChunkConsumer hands a fetched chunk to the transport's handler in lists, skipping what Faust's
own loop skips one by one, and tracks each message until the handler acknowledges it."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.tuples import Message

from streams.transport import HANDLER_BATCH, ChunkConsumer, ChunkTransport, Handler

TOPIC = "t"


def _message(partition: int, offset: int) -> Message:
    # Fetched in the consumer's current generation (an app's first is 0).
    message = Message(TOPIC, partition, offset, 0.0, 0, {}, b"k", b"v%d" % offset, None)
    message.generation_id = 0
    return message


def _consumer(handler: Handler) -> ChunkConsumer:
    app = faust.App("test-transport", broker="kafka://127.0.0.1:9092")
    app.transport = ChunkTransport(app.conf.broker_consumer, app, handler)

    async def callback(message: Any) -> None:
        raise AssertionError("a message went to Faust's streams")

    async def rebalanced(*_: Any) -> None:
        return None

    consumer = app.transport.create_consumer(
        callback=callback, on_partitions_revoked=rebalanced, on_partitions_assigned=rebalanced
    )
    assert isinstance(consumer, ChunkConsumer)
    return consumer


@pytest.fixture
def consumer_and_handed() -> tuple[ChunkConsumer, list[list[tuple[int, int]]]]:
    handed: list[list[tuple[int, int]]] = []

    async def handle(messages: list[Any]) -> None:
        handed.append([(m.partition, m.offset) for m in messages])

    return _consumer(handle), handed


async def test_a_chunk_is_handed_over_in_order_and_moves_the_read_offsets(
    consumer_and_handed: tuple[ChunkConsumer, list[list[tuple[int, int]]]],
) -> None:
    consumer, handed = consumer_and_handed
    chunk = [(TP(TOPIC, p), _message(p, offset)) for offset in range(3) for p in (0, 1)]
    await consumer._deliver(chunk)
    assert handed == [[(p, offset) for offset in range(3) for p in (0, 1)]]
    assert consumer._read_offset[TP(TOPIC, 0)] == 2
    assert consumer._read_offset[TP(TOPIC, 1)] == 2


async def test_messages_below_the_read_offset_are_dropped_as_faust_drops_them(
    consumer_and_handed: tuple[ChunkConsumer, list[list[tuple[int, int]]]],
) -> None:
    # A re-fetch after a seek hands back messages already delivered.
    consumer, handed = consumer_and_handed
    consumer._read_offset[TP(TOPIC, 0)] = 5
    await consumer._deliver([(TP(TOPIC, 0), _message(0, offset)) for offset in range(3, 8)])
    assert handed == [[(0, 5), (0, 6), (0, 7)]]
    assert consumer._read_offset[TP(TOPIC, 0)] == 7


async def test_a_chunk_goes_to_the_handler_in_lists_tracked_until_acknowledged() -> None:
    handed: list[list[tuple[int, int]]] = []
    read_when_handed: list[Any] = []

    async def handle(messages: list[Any]) -> None:
        handed.append([(m.partition, m.offset) for m in messages])
        read_when_handed.append(consumer._read_offset[TP(TOPIC, 0)])
        assert all(m in consumer._unacked_messages for m in messages)

    consumer = _consumer(handle)
    last = HANDLER_BATCH + 4
    chunk = [(TP(TOPIC, 0), _message(0, offset)) for offset in range(last + 1)]
    await consumer._deliver(chunk)
    # In order, in lists of at most HANDLER_BATCH.
    assert handed == [
        [(0, offset) for offset in range(HANDLER_BATCH)],
        [(0, offset) for offset in range(HANDLER_BATCH, last + 1)],
    ]
    # The read offset moves once the handler has a list, not before.
    assert read_when_handed == [None, HANDLER_BATCH - 1]
    assert consumer._read_offset[TP(TOPIC, 0)] == last
    # Each stays pending until acknowledged, as a stream's events do.
    assert len(consumer._unacked_messages) == last + 1


async def test_a_list_not_taken_is_not_waited_for_and_stale_messages_are_skipped() -> None:
    taken = asyncio.Event()
    handed: list[list[int]] = []

    async def never(messages: list[Any]) -> None:
        handed.append([m.offset for m in messages])
        taken.set()
        await asyncio.sleep(3600)

    consumer = _consumer(never)
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
    assert handed == [[1]]
    assert not consumer._unacked_messages
    assert consumer._read_offset[TP(TOPIC, 0)] is None


async def test_a_seek_to_committed_with_everything_taken_away_seeks_nothing(
    consumer_and_handed: tuple[ChunkConsumer, list[list[tuple[int, int]]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What aiokafka raises when a rebalance took every partition away before Faust's recovery
    # seeks to the committed offsets (the recovery crashed on it and the worker stopped).
    consumer, _ = consumer_and_handed

    async def nothing_assigned(self: Any) -> dict[TP, int]:
        raise AssertionError("No partitions are currently assigned")

    monkeypatch.setattr(faust_aiokafka.Consumer, "seek_to_committed", nothing_assigned)
    assigned: set[TP] = set()
    monkeypatch.setattr(ChunkConsumer, "assignment", lambda self: assigned)
    await consumer.perform_seek()
    assert dict(consumer._read_offset) == {}
    # With partitions still assigned the assertion is a fault, not a rebalance: it stands.
    assigned.add(TP(TOPIC, 0))
    with pytest.raises(AssertionError, match="No partitions"):
        await consumer.perform_seek()
