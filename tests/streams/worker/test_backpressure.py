"""Backpressure's view of what the sink can apply, against the real Redis and Kafka: a topic
whose table went away does not keep a hold from ever starting."""

from __future__ import annotations

import pytest

from config.settings import Settings
from core.model import DDLEvent
from core.staging import Staging, TopicPartition
from streams.worker.backpressure import resolved_as_the_sink_takes_it

pytestmark = pytest.mark.integration

TS = 449_000_000_000_000_100


async def test_a_retired_topic_leaves_what_backpressure_sees_as_releasable(
    settings: Settings, staging: Staging, unique: str
) -> None:
    # Topics Kafka does not have (deleted): nothing more can come from them.
    gone, live = f"{unique}_gone", f"{unique}_live"
    staging.set_partition_count(gone, 1)
    staging.set_partition_count(live, 1)
    g, v = TopicPartition(gone, 0), TopicPartition(live, 0)
    staging.stage(g, 0, [], [DDLEvent(TS, "db", "t", "DROP TABLE `db`.`t`", 4)])
    staging.stage(g, 1, [], watermark=TS)
    staging.stage(v, 0, [], watermark=TS + 50)
    staging.trim(TS)
    assert not staging.releasable()  # the plain minimum stays at the DROP
    resolved = await resolved_as_the_sink_takes_it(settings, staging)
    assert resolved == TS + 50
    assert staging.releasable(resolved)
