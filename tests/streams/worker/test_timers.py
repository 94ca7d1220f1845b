"""The worker's look for partitions it holds but no longer fetches (Timers.refetch_stalled),
over a real staging area: Faust's consumer is stood in for, as the stall is Faust's own."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from config.settings import Settings
from core.outage import Outage
from core.staging import TopicPartition
from streams.stall import STALL_S
from streams.worker.timers import Timers


class Consumer:
    """What refetch_stalled asks of Faust's consumer, with what it was told."""

    def __init__(self, ends: dict[TP, int]) -> None:
        self.ends = ends
        self.resumed: list[TP] = []
        self.seeks: list[tuple[TP, int]] = []

    def assignment(self) -> set[TP]:
        return set(self.ends)

    async def highwaters(self, *partitions: TP) -> dict[TP, int]:
        return {tp: self.ends[tp] for tp in partitions}

    def resume_partitions(self, partitions: list[TP]) -> None:
        self.resumed.extend(partitions)

    async def seek(self, partition: TP, offset: int) -> None:
        self.seeks.append((partition, offset))


@pytest.fixture
def stalled(settings: Settings, staging: Any, redis_client: Any) -> tuple[Timers, Consumer]:
    """Partition 0 staged to offset 41 of 50, partition 1 to its end, both unmoved for longer
    than STALL_S."""
    ends = {TP("t", 0): 51, TP("t", 1): 20}
    redis_client.hset(staging.keys.offsets, mapping={"t:0": 41, "t:1": 19})
    consumer = Consumer(ends)
    app = SimpleNamespace(consumer=consumer)
    line = SimpleNamespace(holding=False)
    timers = Timers(app, settings, staging, None, line, Outage("Redis", logging.getLogger("test")))  # type: ignore[arg-type]
    long_ago = time.monotonic() - STALL_S - 1
    for tp, staged in ((TopicPartition("t", 0), 41), (TopicPartition("t", 1), 19)):
        timers._stalls.stalled(tp, staged, ends[TP("t", tp.partition)], long_ago)
    return timers, consumer


async def test_a_partition_behind_and_unmoved_is_fetched_again_after_its_last_staged_offset(
    stalled: tuple[Timers, Consumer], caplog: pytest.LogCaptureFixture
) -> None:
    timers, consumer = stalled
    await timers.refetch_stalled()
    assert consumer.resumed == [TP("t", 0)]
    assert consumer.seeks == [(TP("t", 0), 42)]
    assert "t:0: Kafka holds messages up to offset 50, but none past offset 41" in caplog.text
    await timers.refetch_stalled()
    assert len(consumer.seeks) == 1, "fetched again before another STALL_S"


async def test_a_worker_holding_for_room_in_staging_fetches_nothing_again(
    stalled: tuple[Timers, Consumer],
) -> None:
    timers, consumer = stalled
    timers._line.holding = True
    await timers.refetch_stalled()
    timers._line.holding = False
    await timers.refetch_stalled()
    assert consumer.seeks == [] and consumer.resumed == []
