"""`ticdc-sink recover`: --dry-run changes nothing; without --yes and a terminal it refuses."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from core.staging import Keys

pytestmark = pytest.mark.integration


def _recover(unique: str, *args: str, pattern: str = "") -> subprocess.CompletedProcess[str]:
    topics = {"TICDC_SINK_TOPICS_PATTERN": pattern} if pattern else {"TICDC_SINK_TOPICS": unique}
    return subprocess.run(
        [sys.executable, "-m", "ticdc_sink", "recover", *args],
        env={
            **os.environ,
            "TICDC_SINK_GROUP": unique,
            "TICDC_SINK_META_DB": f"{unique}_meta",
            **topics,
        },
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


async def _committed(kafka_admin: Any, group: str) -> dict[Any, Any]:
    return dict(await kafka_admin.list_consumer_group_offsets(group))


# The pipeline fixture deletes the pipeline's Redis keys and meta database afterwards.
@pytest.mark.usefixtures("pipeline")
async def test_a_dry_run_and_a_refusal_change_nothing_and_yes_recovers(
    topic: str, unique: str, redis_client: Any, kafka_admin: Any
) -> None:
    redis_client.set(Keys(unique).watermarks, "partial")
    redis_client.xadd(Keys(unique).dead_letters, {"topic": topic})
    dry = _recover(unique, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"{topic}:0: replay from offset 0" in dry.stdout
    kept = "(dead letters, registry schemas and retired topics are kept)"
    assert f"staging keys to clear: 1 {kept}" in dry.stdout
    assert dry.stdout.rstrip().endswith("dry run: nothing changed")
    assert redis_client.exists(Keys(unique).watermarks)
    assert await _committed(kafka_admin, unique) == {}

    refused = _recover(unique)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"ticdc-sink recover: recover rewinds and clears pipeline {unique!r}: pass --yes to "
        "confirm (stdin is not a terminal), or --dry-run to only look"
    ]
    assert redis_client.exists(Keys(unique).watermarks)

    done = _recover(unique, "--yes")
    assert done.returncode == 0, done.stderr
    assert not redis_client.exists(Keys(unique).watermarks)
    assert redis_client.xlen(Keys(unique).dead_letters) == 1
    committed = await _committed(kafka_admin, unique)
    assert {tp.partition: meta.offset for tp, meta in committed.items()} == {0: 0, 1: 0}


@pytest.mark.usefixtures("pipeline")
async def test_with_a_pattern_every_matched_topic_is_rewound(
    topic: str, unique: str, kafka_admin: Any
) -> None:
    from aiokafka.admin import NewTopic

    other = f"{unique}_b"
    await kafka_admin.create_topics([NewTopic(other, 1, 1)])
    try:
        dry = _recover(unique, "--dry-run", pattern=f"{unique}(_b)?")
    finally:
        await kafka_admin.delete_topics([other])
    assert dry.returncode == 0, dry.stderr
    replayed = [
        line.split(":", 1)[0].strip() for line in dry.stdout.splitlines() if "replay" in line
    ]
    assert sorted(replayed) == sorted([topic, topic, other])
