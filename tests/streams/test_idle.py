"""When a quiet partition of a stream without watermarks may move its watermark (pure)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from core.staging import TopicPartition
from streams.idle import (
    IDLE_CHECK_MAX_S,
    IDLE_CHECK_MIN_S,
    IdleView,
    QuietClock,
    idle_check_interval,
    idle_watermark,
)

TS = 450_153_678_443_151_417  # above 2**53: compared exactly, never as a float
IDLE_S = 2.0
# Staged to its end (offset 9 of 10), quiet long enough, holding nothing, behind its rows.
QUIET = IdleView(
    staged_offset=9, end_offset=10, quiet_s=IDLE_S, highest_ts=TS, watermark=TS - 5, holding=False
)

offsets = st.none() | st.integers(0, 1_000)
stamps = st.none() | st.integers(1, (1 << 64) - 1)
views = st.builds(
    IdleView,
    staged_offset=offsets,
    end_offset=offsets,
    quiet_s=st.floats(0, 10),
    highest_ts=stamps,
    watermark=stamps,
    holding=st.booleans(),
    pipeline_watermark=stamps,
)


def test_a_quiet_partition_at_its_end_moves_to_its_highest_staged_ts() -> None:
    assert idle_watermark(QUIET, IDLE_S) == TS
    assert idle_watermark(replace(QUIET, watermark=None), IDLE_S) == TS


def test_it_stays_while_anything_says_the_partition_may_not_be_done() -> None:
    assert idle_watermark(QUIET, 0) is None  # the setting is off
    assert idle_watermark(replace(QUIET, end_offset=11), IDLE_S) is None  # more in Kafka
    assert idle_watermark(replace(QUIET, end_offset=None), IDLE_S) is None  # end unknown
    assert idle_watermark(replace(QUIET, quiet_s=IDLE_S - 0.1), IDLE_S) is None  # not quiet
    assert idle_watermark(replace(QUIET, holding=True), IDLE_S) is None  # waits for a schema
    assert idle_watermark(replace(QUIET, staged_offset=None), IDLE_S) is None
    assert idle_watermark(replace(QUIET, highest_ts=None), IDLE_S) is None  # nothing staged
    assert idle_watermark(replace(QUIET, watermark=TS), IDLE_S) is None  # there already


def test_a_quiet_partition_follows_the_pipelines_highest_watermark() -> None:
    # Rows dispatched by table: this partition got none of the stream's last transactions, which
    # another partition, itself quiet at its end, has resolved.
    behind = replace(QUIET, pipeline_watermark=TS + 100)
    assert idle_watermark(behind, IDLE_S) == TS + 100
    assert idle_watermark(replace(behind, highest_ts=None), IDLE_S) == TS + 100
    # Lower than what it staged itself: its own rows decide.
    assert idle_watermark(replace(QUIET, pipeline_watermark=TS - 50), IDLE_S) == TS
    # Not at its end, or not quiet: the other partitions' progress moves nothing.
    assert idle_watermark(replace(behind, end_offset=11), IDLE_S) is None
    assert idle_watermark(replace(behind, quiet_s=IDLE_S - 0.1), IDLE_S) is None


@given(views, st.floats(0, 10))
def test_a_watermark_only_moves_forward_and_never_past_what_was_staged(
    view: IdleView, idle_s: float
) -> None:
    mark = idle_watermark(view, idle_s)
    if mark is None:
        return
    assert mark == max(ts for ts in (view.highest_ts, view.pipeline_watermark) if ts is not None)
    assert view.watermark is None or mark > view.watermark
    assert not view.holding and view.quiet_s >= idle_s > 0
    assert view.staged_offset is not None and view.end_offset is not None
    assert view.staged_offset + 1 >= view.end_offset


@given(st.floats(0.001, 3600))
def test_partitions_are_looked_at_twice_per_quiet_time_within_bounds(idle_s: float) -> None:
    interval = idle_check_interval(idle_s)
    assert IDLE_CHECK_MIN_S <= interval <= IDLE_CHECK_MAX_S
    assert interval <= idle_s / 2 or interval == IDLE_CHECK_MIN_S


def test_the_quiet_clock_restarts_whenever_the_staged_offset_moves() -> None:
    clock = QuietClock()
    tp, other = TopicPartition("t", 0), TopicPartition("t", 1)
    assert clock.quiet_for(tp, 5, now=100.0) == 0.0
    assert clock.quiet_for(tp, 5, now=102.5) == 2.5
    assert clock.quiet_for(other, 5, now=102.5) == 0.0  # each partition on its own
    assert clock.quiet_for(tp, 6, now=103.0) == 0.0
    assert clock.quiet_for(tp, 6, now=104.0) == 1.0
    assert clock.quiet_for(tp, None, now=105.0) == 0.0  # its staging gone (Redis flushed)
