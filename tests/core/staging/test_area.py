"""The staging area's member layout, checked at start: members of another member layout (or of
none recorded) are refused by the worker and the sink alike; an area without members is taken,
and every staging write records the member layout."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from config.errors import StagingError
from core.model import DDLEvent
from core.packed import pack_row
from core.staging import LAYOUT_VERSION, Staging
from core.staging.area import layout_refusal
from core.staging.layout import row_member
from tests.conftest import redis_env
from tests.core.staging.changes import BIG_TS, P0, P1, row

pytestmark = pytest.mark.integration


def _stage_as_before(client: redis.Redis, staging: Staging) -> None:
    """A row member staged without the member layout recorded, as an older ticdc-sink left it."""
    member = row_member(BIG_TS, 0, 0, [pack_row(row(BIG_TS, 1))])
    client.zadd(staging.keys.rows(P0), {member: 0})


def test_a_fresh_staging_area_is_taken_and_staging_records_its_member_layout(
    redis_client: redis.Redis, staging: Staging
) -> None:
    staging.check_layout()
    assert redis_client.get(staging.keys.layout) is None
    staging.stage(P0, 0, [row(BIG_TS, 1)])
    assert redis_client.get(staging.keys.layout) == str(LAYOUT_VERSION).encode()
    staging.check_layout()


def test_a_late_row_staged_alone_records_the_member_layout(
    redis_client: redis.Redis, staging: Staging
) -> None:
    staging.stage_late(P1, 4, [row(BIG_TS, 1)])
    assert redis_client.get(staging.keys.layout) == str(LAYOUT_VERSION).encode()


def test_members_without_a_recorded_member_layout_are_refused(
    redis_client: redis.Redis, staging: Staging
) -> None:
    _stage_as_before(redis_client, staging)
    with pytest.raises(StagingError) as refused:
        staging.check_layout()
    message = str(refused.value)
    assert "written by an older ticdc-sink (no member layout recorded" in message
    assert "`ticdc-sink recover`" in message and repr(staging.pipeline) in message


@pytest.mark.parametrize(
    ("recorded", "writer"),
    [("1", "an older ticdc-sink"), (str(LAYOUT_VERSION + 1), "another ticdc-sink version")],
)
def test_members_of_another_member_layout_are_refused(
    redis_client: redis.Redis, staging: Staging, recorded: str, writer: str
) -> None:
    staging.stage(P0, 0, [row(BIG_TS, 1)])
    redis_client.set(staging.keys.layout, recorded)
    with pytest.raises(StagingError, match=f"written by {writer} \\(member layout {recorded};"):
        staging.check_layout()


def test_ddl_members_alone_are_refused_too(redis_client: redis.Redis, staging: Staging) -> None:
    staging.stage(P1, 0, [], ddls=[DDLEvent(BIG_TS, "db", "t", "ALTER TABLE t ADD c INT", 5)])
    assert redis_client.exists(staging.keys.ddl)
    redis_client.delete(staging.keys.layout)
    with pytest.raises(StagingError):
        staging.check_layout()


def test_an_area_of_another_member_layout_holding_no_members_is_taken(
    redis_client: redis.Redis, staging: Staging
) -> None:
    # What is left once the older version's sink has applied and trimmed everything.
    staging.stage(P0, 0, [row(BIG_TS, 1)], watermark=BIG_TS)
    redis_client.set(staging.keys.layout, "1")
    staging.trim(BIG_TS)
    staging.check_layout()
    staging.stage(P0, 1, [row(BIG_TS + 1, 2)])
    assert redis_client.get(staging.keys.layout) == str(LAYOUT_VERSION).encode()


def test_the_refusal_is_one_line() -> None:
    for found in (None, "1", "x"):
        assert "\n" not in layout_refusal("shop", found)


@pytest.mark.parametrize("command", ["worker", "apply"])
def test_the_worker_and_the_sink_refuse_it_at_start(
    redis_client: redis.Redis, staging: Staging, command: str
) -> None:
    _stage_as_before(redis_client, staging)
    env = {
        **os.environ,
        "TICDC_SINK_GROUP": staging.pipeline,
        "TICDC_SINK_TOPICS": staging.pipeline,
        "TICDC_SINK_METRICS_PORT": "0",
        **redis_env(redis_client),
    }
    done = subprocess.run(
        [sys.executable, "-m", "ticdc_sink", command],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"ticdc-sink {command}: {layout_refusal(staging.pipeline, None)}"
    # Refused before anything was written: still the older version's area.
    assert redis_client.get(staging.keys.layout) is None
