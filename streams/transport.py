"""Faust's Kafka transport, with a consumer that hands each fetched chunk to the streams at once.

Faust's consumer guards every message's delivery against a flow suspension (a rebalance) by
racing it against four waits, which means four tasks per message: on this workload that
took half of the worker's time before any staging. This consumer runs the same delivery (read
offsets, gaps, commit-every) under one such guard per fetched chunk instead, so a suspension
still cancels delivery at the message it reached and nothing after it is handed on.

When every partition's stream buffer is full, Faust's consumer fetches nothing and sleeps a
whole second, however soon the agent makes room: a worker staging a backlog stalled ~0.7 s in
every ~1.2 s. This consumer wakes as soon as a buffer drops below its mark.

The messages of the topics a :class:`Direct` handler takes skip Faust's streams altogether: a
chunk's messages go to the handler in lists, tracked as Faust's streams track them (a
rebalance waits for their acknowledgement) and acknowledged by the handler once it has dealt
with them. Each message through a stream costs a conductor call, an event, the stream's loop
and sensors, and an acknowledgement of its own: ~3 us of the worker's CPU per row change.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka

# How many messages are delivered between two yields to the event loop (Faust's own value).
YIELD_EVERY = 100
# How long one fetch waits for records (Faust's own value).
FETCH_TIMEOUT_S = 1.0
# The most messages handed to a direct handler in one list.
DIRECT_BATCH = 1_000


@dataclass(frozen=True)
class Direct:
    """Who takes the messages of ``topics`` instead of Faust's streams: ``handle`` gets them in
    order, a list at a time (waiting holds the fetching), and acknowledges each with
    ``consumer.ack`` once it is done with it."""

    topics: frozenset[str]
    handle: Callable[[list[Any]], Awaitable[None]]


async def _take_none(messages: list[Any]) -> None:
    raise AssertionError("no topic is handed directly")


# Without a direct handler: no topic's messages skip the streams.
_NO_DIRECT = Direct(frozenset(), _take_none)


class ChunkConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer, delivering each fetched chunk under one flow guard, and
    fetching again as soon as a full stream buffer has room."""

    def __post_init__(self) -> None:
        super().__post_init__()
        # Set when a partition's stream buffer drops below its mark (fetchable again).
        self._room = asyncio.Event()

    def on_buffer_drop(self, tp: Any) -> None:
        super().on_buffer_drop(tp)
        self._room.set()

    async def _wait_next_records(self, timeout: float) -> tuple[Any, Any]:
        if not self.flow_active or self.app.client_only or self._get_active_partitions():
            return await super()._wait_next_records(timeout)
        # Every partition's buffer is full: Faust would sleep a second here.
        self._room.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._room.wait(), timeout)
        return {}, self._get_active_partitions()

    async def _drain_messages(self, fetcher: Any) -> None:
        consumer_stopped = self._stopped.is_set
        fetcher_stopped = fetcher._stopped.is_set
        try:
            while not (consumer_stopped() or fetcher_stopped()):
                self.diag.set_flag(CONSUMER_FETCHING)
                chunk = [pair async for pair in self.getmany(timeout=FETCH_TIMEOUT_S)]
                # Fetching may complete without giving the loop a turn.
                await self.sleep(0)
                if chunk and not self.should_stop:
                    await self.wait_first(self._deliver(chunk), self.suspend_flow.wait())
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    async def _deliver(self, chunk: list[tuple[Any, Any]]) -> None:
        """Hand a chunk's messages to the streams in order, as Faust's loop does one by one
        (those of a :class:`Direct` handler's topics to it, in lists)."""
        read_offset = self._read_offset
        acks_enabled_for = self.app.topics.acks_enabled_for
        direct: Direct = getattr(self.transport, "direct", None) or _NO_DIRECT
        taken: list[Any] = []
        # The last offset taken per partition, its read offset moving once the handler has it.
        pending: dict[Any, int] = {}
        for n, (tp, message) in enumerate(chunk, 1):
            if n % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            offset = message.offset
            last = pending[tp] if tp in pending else read_offset[tp]
            if last is not None and offset < last:
                # Already delivered (a re-fetch after a seek): Faust drops these too.
                continue
            if last and offset - last > 1 and acks_enabled_for(message.topic):
                await self._add_gap(tp, last + 1, offset)
            if self._commit_every is not None and self._n_acked >= self._commit_every:
                self._n_acked = 0
                await self.commit()
            if message.topic in direct.topics:
                if message.generation_id != self.app.consumer_generation_id:
                    # Fetched before a rebalance: the partition is read again from its
                    # committed offset (Faust's streams skip these too).
                    continue
                taken.append(message)
                pending[tp] = offset
                if len(taken) >= DIRECT_BATCH:
                    await self._hand(direct, taken)
                    taken = []
                continue
            if taken:
                await self._hand(direct, taken)
                taken = []
            await self.callback(message)
            read_offset[tp] = offset
        if taken:
            await self._hand(direct, taken)

    async def _hand(self, direct: Direct, messages: list[Any]) -> None:
        """Hand ``messages`` to ``direct``, tracked as pending acknowledgement, and move the
        read offsets past them once it took them."""
        unacked = self._unacked_messages
        for message in messages:
            # As a stream tracks a message (without its sensors: nothing counts them out).
            message.tracked = True
            unacked.add(message)
        try:
            await direct.handle(messages)
        except asyncio.CancelledError:
            # Not taken (a rebalance suspended delivery): nothing to wait for; the partition
            # is read again from its committed offset.
            for message in messages:
                unacked.discard(message)
            raise
        read_offset = self._read_offset
        for message in messages:
            read_offset[message.tp] = message.offset


class ChunkTransport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with :class:`ChunkConsumer`; ``direct``, when set, takes its
    topics' messages past the streams."""

    Consumer = ChunkConsumer
    direct: Direct | None = None
