"""The worker's look for partitions assigned to it but no longer fetched
(Timers.report_stalls), over a real staging area. Faust's consumer is stood in for: the stall
is a fault of Faust's that could not be made on purpose."""

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
    """What report_stalls asks of Faust's consumer."""

    def __init__(self, ends: dict[TP, int]) -> None:
        self.ends = ends

    def assignment(self) -> set[TP]:
        return set(self.ends)

    async def highwaters(self, *partitions: TP) -> dict[TP, int]:
        return {tp: self.ends[tp] for tp in partitions}


@pytest.fixture
def timers(settings: Settings, staging: Any, redis_client: Any) -> Timers:
    """Partition 0 staged to offset 41 of 50, partition 1 to its end, both unmoved for longer
    than STALL_S by the last look."""
    ends = {TP("t", 0): 51, TP("t", 1): 20}
    redis_client.hset(staging.keys.offsets, mapping={"t:0": 41, "t:1": 19})
    app = SimpleNamespace(consumer=Consumer(ends))
    line = SimpleNamespace(in_line=0, acknowledged=0)
    made = Timers(app, settings, staging, None, line, Outage("Redis", logging.getLogger("t")))  # type: ignore[arg-type]
    long_ago = time.monotonic() - STALL_S - 1
    for tp, staged in ((TopicPartition("t", 0), 41), (TopicPartition("t", 1), 19)):
        made._stalls.stalled(tp, staged, ends[TP("t", tp.partition)], long_ago)
    return made


async def test_a_partition_behind_and_unmoved_while_the_line_is_free_is_told_once(
    timers: Timers, caplog: pytest.LogCaptureFixture
) -> None:
    await timers.report_stalls()
    told = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert told == [
        "t:0 is assigned to this worker but not fetched: Kafka's log ends at offset 50, "
        "staged up to offset 41 and unmoved for 60 s while the worker was free; restart the "
        "worker if it stays so"
    ]
    await timers.report_stalls()
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


async def test_a_line_stuck_with_batches_in_it_is_no_stall_of_the_consumer(
    timers: Timers, caplog: pytest.LogCaptureFixture
) -> None:
    # Batches in the line and none acknowledged since the last look: waiting for room in
    # staging, for the schema registry or for Redis replicas holds the consumer too.
    timers._line.in_line = 2
    await timers.report_stalls()
    timers._line.in_line = 0
    await timers.report_stalls()
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


async def test_a_line_that_goes_on_acknowledging_leaves_a_stall_told(
    timers: Timers, caplog: pytest.LogCaptureFixture
) -> None:
    # Other partitions' batches going through: the consumer fetches, only not this partition.
    timers._line.in_line = 2
    timers._line.acknowledged = 7
    await timers.report_stalls()
    assert [r for r in caplog.records if r.levelno == logging.WARNING]
