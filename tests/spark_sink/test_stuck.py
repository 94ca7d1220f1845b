"""A transaction in parts that keeps failing is named once, with its ts, size and reason."""

from __future__ import annotations

from spark_sink.stuck import StuckWatch


def test_a_transaction_failing_three_times_in_a_row_is_named_once() -> None:
    watch = StuckWatch()
    reason = TimeoutError("lock wait")
    assert watch.failed(7, 100, reason) is None
    assert watch.failed(7, 250, reason) is None
    told = watch.failed(7, 200, reason)
    assert told is not None
    assert "at ts 7 " in told and "250 changes" in told and "3 times" in told
    assert "TimeoutError: lock wait" in told
    # Said once for as long as it stays stuck.
    assert watch.failed(7, 250, reason) is None


def test_a_commit_or_another_transaction_starts_the_count_again() -> None:
    watch = StuckWatch()
    reason = OSError("gone")
    watch.failed(7, 10, reason)
    watch.failed(7, 10, reason)
    watch.committed(7)
    assert watch.failed(7, 10, reason) is None
    assert watch.failed(7, 10, reason) is None
    # Another transaction failing does not add to this one's count.
    assert watch.failed(9, 10, reason) is None
    assert watch.failed(7, 10, reason) is None
    assert watch.failed(7, 10, reason) is None
    assert watch.failed(7, 10, reason) is not None
