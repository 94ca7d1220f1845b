"""A partition is taken as no longer fetched only when it is behind its log end, its staged
offset unmoved for STALL_S seconds of looks that could tell; each stall is told once."""

from __future__ import annotations

from core.staging import TopicPartition
from streams.stall import STALL_S, StallClock, behind

TP = TopicPartition("t", 0)


def test_behind_means_kafka_holds_a_message_past_the_last_one_staged() -> None:
    assert behind(None, 1) and behind(4, 6)
    assert not behind(5, 6) and not behind(None, 0) and not behind(None, None)


def test_a_partition_unmoved_for_stall_s_is_a_stall_told_once() -> None:
    clock = StallClock()
    assert not clock.stalled(TP, 4, 9, 0.0)
    assert not clock.stalled(TP, 4, 9, STALL_S - 1)
    assert clock.stalled(TP, 4, 9, STALL_S)
    assert not clock.stalled(TP, 4, 9, 5 * STALL_S)


def test_a_staged_offset_that_moves_or_a_partition_caught_up_starts_its_time_again() -> None:
    clock = StallClock()
    clock.stalled(TP, 4, 9, 0.0)
    assert not clock.stalled(TP, 5, 9, STALL_S)
    assert not clock.stalled(TP, 5, 9, 2 * STALL_S - 1)
    assert not clock.stalled(TP, 8, 9, 3 * STALL_S)
    assert not clock.stalled(TP, 8, 12, 3 * STALL_S + 1)
    assert clock.stalled(TP, 8, 12, 4 * STALL_S + 1)


def test_a_look_that_could_not_tell_or_a_partition_gone_starts_its_time_again() -> None:
    clock = StallClock()
    clock.stalled(TP, 4, 9, 0.0)
    clock.restart()
    assert not clock.stalled(TP, 4, 9, STALL_S)
    clock.keep([TopicPartition("t", 1)])
    assert not clock.stalled(TP, 4, 9, 2 * STALL_S)
    clock.keep([TP])
    assert clock.stalled(TP, 4, 9, 3 * STALL_S)
