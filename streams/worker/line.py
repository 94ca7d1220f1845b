"""The staging line: batches from the transport's handler decoded, staged and acknowledged in
order.

Faust commits the offsets of acknowledged messages, so a batch is acknowledged only once its
round trip succeeded: a committed offset is always staged. Redis outages are waited out (the
batch is staged again, which the stage script makes harmless); backpressure holds the line.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from core.outage import RETRY_FIRST_S, Outage, next_delay
from core.staging.framing import FramedMessage
from streams.worker.stager import OUTAGES, MessageStager, PreparedBatch, Record

log = logging.getLogger("ticdc_sink.worker")
T = TypeVar("T")

# Acknowledges a staged batch's messages to Faust (which then commits their offsets).
Acknowledge = Callable[[], Awaitable[None]]
# A batch with its records' fast-path decoding (see MessageStager.decode).
Decoded = tuple[Sequence[Record], list[FramedMessage | None], Acknowledge]

# Batches waiting in each of the staging line's two queues (to be decoded, to be sent). With the
# one the handler holds, the one decoding, the one queued behind the round trip and the one in it,
# a worker holds at most six batches.
LINE_WAITING = 1
# The fewest messages worth a decoding thread of their own.
DECODE_PART_MIN = 50


class StagingLine:
    """Stages batches in the order they are submitted, on tasks of its own.

    The transport's handler hands a batch over and goes back to Faust for the next one at once.
    One task decodes batches (:meth:`MessageStager.decode` on ``decode_threads`` threads: the
    native decoders let go of the GIL), another prepares each decoded batch and sends it while
    the next is decoded and Faust delivers the one after. One round trip is in flight at a time,
    so each partition's messages reach Redis in order; each batch is acknowledged once it is
    staged; nothing more is sent while staging is over its limits (``wait_for_room``, see
    streams/worker/backpressure.py). If the line fails (a bad message under ``halt``, Redis
    gone while stopping) the worker stops.
    """

    def __init__(
        self,
        app: Any,
        stager: MessageStager,
        wait_for_room: Callable[[], Awaitable[None]],
        *,
        decode_threads: int,
        redis_outage: Outage,
    ) -> None:
        self._app = app
        self._redis_outage = redis_outage
        self._stager = stager
        self._wait_for_room = wait_for_room
        self._decode_threads = decode_threads
        self._waiting: asyncio.Queue[tuple[Sequence[Record], Acknowledge]] = asyncio.Queue(
            LINE_WAITING
        )
        self._decoded: asyncio.Queue[Decoded] = asyncio.Queue(LINE_WAITING)
        self._tasks: list[asyncio.Future[None]] = []
        # The error that stopped the line (and the worker), if one did.
        self.failure: Exception | None = None
        # Batches submitted and not acknowledged yet, and batches acknowledged so far: a line
        # with batches in it that acknowledged none since the last look is stuck (waiting for
        # room in staging, for the schema registry, for Redis replicas), and so is the consumer.
        self.in_line = 0
        self.acknowledged = 0

    async def submit(self, records: Sequence[Record], acknowledge: Acknowledge) -> None:
        """Queue a batch; waits while :data:`LINE_WAITING` batches wait already."""
        if not self._tasks:
            self._tasks = [
                asyncio.ensure_future(self._until_failed(self._decode())),
                asyncio.ensure_future(self._until_failed(self._stage())),
            ]
        self.in_line += 1
        try:
            await self._waiting.put((records, acknowledge))
        except asyncio.CancelledError:
            self.in_line -= 1
            raise

    async def close(self) -> None:
        """Stop the line's tasks (what is staged stays staged; the rest is not acknowledged)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _until_failed(self, work: Awaitable[None]) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as error:
            # The worker stops without committing past what is staged; run_worker raises the
            # error once Faust has stopped (ours, as a halt's, in one line naming the message).
            if self.failure is None:
                self.failure = error
                log.error("staging stopped: %s", error)
            await self._app.crash(error)
            raise

    async def _decode(self) -> None:
        while True:
            records, acknowledge = await self._waiting.get()
            parts = split(records, self._decode_threads)

            async def decode_parts(
                parts: list[Sequence[Record]] = parts,
            ) -> list[list[FramedMessage | None]]:
                return await asyncio.gather(
                    *(asyncio.to_thread(self._stager.decode, part) for part in parts)
                )

            # The Simple codec reads its schema cache in Redis while decoding.
            decoded = await self._redis(decode_parts, "decoding")
            framed = [frame for part in decoded for frame in part]
            await self._decoded.put((records, framed, acknowledge))

    async def _stage(self) -> None:
        sending: asyncio.Future[None] | None = None
        while True:
            records, framed, acknowledge = await self._decoded.get()
            # Replays are dropped here rather than before decoding: they are rare (a restart,
            # a rebalance) and this knows the offsets of every batch prepared before it.
            # Decoding a message the fast path left (Simple) may read the schema cache.
            prepare = functools.partial(asyncio.to_thread, self._stager.prepare, records, framed)
            batch = await self._redis(prepare, "preparing a batch")
            if sending is not None:
                await sending
            # Backpressure: while this waits the queues fill, the handler waits to submit, and
            # the consumer waits for the handler.
            await self._redis(self._wait_for_room, "checking the staging limits")
            sending = asyncio.ensure_future(self._send(records, batch, acknowledge))

    async def _send(
        self, records: Sequence[Record], batch: PreparedBatch, acknowledge: Acknowledge
    ) -> None:
        # Rides out Redis restarts and dropped connections: the batch is not acknowledged until
        # it is staged, and staging it again is harmless.
        prepared: PreparedBatch | None = batch

        def attempt() -> None:
            nonlocal prepared
            # After a failed round trip the batch is prepared again: Redis may hold part of it.
            sent = prepared or self._stager.prepare(
                records, self._stager.decode(records), again=True
            )
            prepared = None
            self._stager.send(sent)

        await self._redis(functools.partial(asyncio.to_thread, attempt), "staging")
        await acknowledge()
        self.in_line -= 1
        self.acknowledged += 1

    async def _redis(self, action: Callable[[], Awaitable[T]], what: str) -> T:
        """``action``'s result, waiting out Redis restarts, LOADING and cut connections."""
        return await until_done(self._app, action, OUTAGES, what, self._redis_outage)


def split(records: Sequence[Record], parts: int) -> list[Sequence[Record]]:
    """``records`` in at most ``parts`` consecutive runs of about equal size (none shorter than
    :data:`DECODE_PART_MIN`: a thread hop costs more than decoding a few messages)."""
    parts = min(parts, len(records) // DECODE_PART_MIN)
    if parts <= 1:
        return [records]
    size, longer = divmod(len(records), parts)
    bounds = [i * size + min(i, longer) for i in range(parts + 1)]
    return [records[start:end] for start, end in itertools.pairwise(bounds)]


async def until_done(
    app: Any,
    action: Callable[[], Awaitable[T]],
    transient: tuple[type[Exception], ...],
    what: str,
    outage: Outage,
) -> T:
    """``action``'s result once it succeeds, backing off while it fails with ``transient``
    errors (re-raised once the worker is stopping); ``outage`` logs once per outage."""
    delay = RETRY_FIRST_S
    failed = False
    while True:
        try:
            result = await action()
        except transient as error:
            if app.should_stop:
                raise
            outage.failed(error, what)
            failed = True
            await asyncio.sleep(delay)
            delay = next_delay(delay)
            continue
        if failed:
            # Only an action that failed and now succeeds has shown the service is back: one
            # that never needed it (decoding without a schema lookup) shows nothing.
            outage.answered()
        return result
