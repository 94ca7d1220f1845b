"""Faust's Kafka transport, with a consumer that hands each fetched chunk to one handler at once.

Faust's consumer guards every message's delivery against a flow suspension (a rebalance) by
racing it against four waits, which means four tasks per message. This consumer runs the same
delivery (read offsets, gaps, commit-every) under one such guard per fetched chunk instead, so a
suspension still cancels delivery at the message it reached and nothing after it is handed on.

Every fetched message goes to the transport's handler, past Faust's streams: in order, in lists,
tracked as Faust's streams track theirs (a rebalance waits for their acknowledgement) and
acknowledged by the handler once it has dealt with them. A message through a stream would cost
a conductor call, an event, the stream's loop and sensors, and an acknowledgement of its own.
The consumer subscribes the topics the app's conductor (``app.topics``) holds; no stream reads
them.

Backpressure is the handler's: while it waits, the consumer neither delivers nor fetches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka

# How many messages are delivered between two yields to the event loop (Faust's own value).
YIELD_EVERY = 100
# How long one fetch waits for records (Faust's own value).
FETCH_TIMEOUT_S = 1.0
# The most messages handed to the handler in one list.
HANDLER_BATCH = 1_000

# Gets fetched messages in order, a list at a time (waiting holds the fetching), and
# acknowledges each with ``consumer.ack`` once it is done with it.
Handler = Callable[[list[Any]], Awaitable[None]]


class ChunkConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer, handing each fetched chunk to ``handler`` under one flow
    guard."""

    def __init__(self, transport: Any, *, handler: Handler, **kwargs: Any) -> None:
        self._handler = handler
        super().__init__(transport, **kwargs)

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

    async def seek_to_committed(self) -> Mapping[Any, int]:
        """Seek every assigned partition to its committed offset, as Faust's recovery does once
        a rebalance ends. aiokafka asserts that something is assigned, and a rebalance that
        begins meanwhile can take everything away: Faust's recovery would crash on it and stop
        the worker. Nothing assigned, nothing to seek; the next assignment seeks again."""
        try:
            return await super().seek_to_committed()
        except AssertionError:
            if self.assignment():
                raise
            return {}

    async def _deliver(self, chunk: list[tuple[Any, Any]]) -> None:
        """Hand a chunk's messages to the handler in order and in lists, skipping what Faust's
        loop skips one by one."""
        read_offset = self._read_offset
        acks_enabled_for = self.app.topics.acks_enabled_for
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
            if message.generation_id != self.app.consumer_generation_id:
                # Fetched before a rebalance: the partition is read again from its committed
                # offset (Faust's streams skip these too).
                continue
            taken.append(message)
            pending[tp] = offset
            if len(taken) >= HANDLER_BATCH:
                await self._hand(taken)
                taken = []
        if taken:
            await self._hand(taken)

    async def _hand(self, messages: list[Any]) -> None:
        """Hand ``messages`` to the handler, tracked as pending acknowledgement, and move the
        read offsets past them once it took them."""
        unacked = self._unacked_messages
        for message in messages:
            # As a stream tracks a message (without its sensors: nothing counts them out).
            message.tracked = True
            unacked.add(message)
        try:
            await self._handler(messages)
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
    """Faust's aiokafka transport with :class:`ChunkConsumer`, whose messages all go to
    ``handler``."""

    def __init__(self, url: list[Any], app: Any, handler: Handler) -> None:
        super().__init__(url, app)
        self.handler = handler

    def create_consumer(self, callback: Any, **kwargs: Any) -> ChunkConsumer:
        # ``callback`` (the conductor's, for Faust's streams) is never called: no stream reads.
        return ChunkConsumer(
            self, handler=self.handler, callback=callback, loop=self.loop, **kwargs
        )
