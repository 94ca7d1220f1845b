"""Backpressure: the staging line holds while staging is over its limits and the sink has
something to apply.

While the line holds, the transport's handler waits to hand it more, so the consumer fetches
nothing and Kafka keeps what Redis cannot take yet. When nothing staged is releasable (a
partition's next watermark is still in Kafka, behind what holding keeps there), holding would
never end: the worker goes on until the global resolved ts moves. A worker asked to stop stops
waiting.
"""

from __future__ import annotations

import asyncio
from typing import Any

from config.settings import Settings
from core.staging import Staging, past_retired
from core.topics import end_offsets

# How long a holding worker waits before looking at the staged totals again.
POLL_S = 0.5


def over_limits(settings: Settings, rows: int, size: int) -> bool:
    """Whether ``rows`` staged rows of ``size`` bytes reach either of the worker's limits."""
    return rows >= settings.worker.max_staged_rows or size >= settings.worker.max_staged_bytes


async def wait_for_room(app: Any, settings: Settings, staging: Staging) -> None:
    """Return once staging is under its limits, nothing staged is releasable, or the worker
    stops."""
    while not app.should_stop:
        if not over_limits(settings, *staging.staged_totals()):
            return
        if not staging.releasable(await resolved_as_the_sink_takes_it(settings, staging)):
            return
        await asyncio.sleep(POLL_S)


async def resolved_as_the_sink_takes_it(settings: Settings, staging: Staging) -> int | None:
    """The global resolved ts past the topics whose table went away, as the sink's gate takes it
    (Kafka's ends of their partitions read after the watermarks): a retired topic must not keep
    every hold from ever starting, nor one with messages still to stage make a hold that
    nothing ends."""
    standing = staging.standing()
    if not standing.leaving:
        return standing.resolved
    ends = await end_offsets(settings, list(standing.leaving))
    return past_retired(standing, ends)[0]
