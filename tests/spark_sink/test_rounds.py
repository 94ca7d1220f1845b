"""Rounds read ahead (spark_sink/rounds.py) as the sink's loop applies them, against the real
MariaDB and Redis: the next round read and the last trimmed off the loop's thread."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest

from config.settings import Settings
from core.staging import Staging, Standing
from spark_sink.db.connection import connect
from spark_sink.loop import SinkLoop
from spark_sink.target import Target
from tests.spark_sink.keyed import TS, keyed_rows

pytestmark = pytest.mark.integration


def test_a_round_counts_its_stages_under_its_pipeline(
    pipeline: Settings, staging: Staging, scratch_db: str
) -> None:
    from prometheus_client import REGISTRY

    keyed_rows(pipeline, staging, scratch_db)(0, 1, 3)
    assert SinkLoop(pipeline, staging, Target(pipeline)).run_once() == TS + 3
    for stage in ("release", "plan", "wait"):
        labels = {"pipeline": pipeline.group, "stage": stage}
        assert (REGISTRY.get_sample_value("ticdc_sink_stage_seconds_total", labels) or 0) > 0


class RecordingStaging(Staging):
    """The pipeline's real staging area, noting which rounds the sink releases and trims."""

    def __init__(self, staging: Staging) -> None:
        super().__init__(staging._client, staging.keys.pipeline)
        self.released: list[tuple[int, int]] = []
        self.trimmed: list[tuple[int, str]] = []
        # Seconds a release after the first round takes to start.
        self.slow = 0.0

    def release(self, after: int, upto: int) -> Any:
        self.released.append((after, upto))
        if after:
            time.sleep(self.slow)
        return super().release(after, upto)

    def trim(self, checkpoint: int) -> int:
        self.trimmed.append((checkpoint, threading.current_thread().name))
        return super().trim(checkpoint)


def first_resolved(staging: Staging, resolved: int) -> None:
    """``staging`` answers the sink's first read of the global resolved ts with ``resolved``,
    as if the watermarks past it came just after that read."""
    real = staging.standing
    answers = iter([resolved])

    def standing() -> Standing:
        found = real()
        first = next(answers, None)
        return found if first is None else dataclasses.replace(found, resolved=first)

    staging.standing = standing  # type: ignore[method-assign]


def arriving_rounds(
    pipeline: Settings, staging: Staging, scratch_db: str
) -> tuple[SinkLoop, RecordingStaging]:
    """A sink over two rounds of three rows: the second resolves while the first round's last
    batch applies."""
    stage = keyed_rows(pipeline, staging, scratch_db)

    class ArrivingTarget(Target):
        def apply_batch(self, plans: Any, upto: int, *args: Any) -> int:
            if upto == TS + 3:
                stage(1, 4, 6)
            return super().apply_batch(plans, upto, *args)

    stage(0, 1, 3)
    recording = RecordingStaging(staging)
    return SinkLoop(pipeline, recording, ArrivingTarget(pipeline)), recording


def test_the_next_round_is_read_and_the_last_trimmed_while_the_loop_goes_on(
    pipeline: Settings, staging: Staging, scratch_db: str
) -> None:
    sink, recording = arriving_rounds(pipeline, staging, scratch_db)
    assert sink.run_once() == TS + 3
    # The second round is being read without the loop asking for it.
    waited = time.monotonic() + 10
    while (TS + 3, TS + 6) not in recording.released:
        assert time.monotonic() < waited, recording.released
        time.sleep(0.01)
    # ... and the thread trims the applied round meanwhile, off the loop's thread.
    while staging.staged_totals()[0] != 3:
        assert time.monotonic() < waited, staging.staged_totals()
        time.sleep(0.01)
    assert recording.trimmed == [(TS + 3, "read-ahead")]
    assert sink.run_once() == TS + 6
    assert recording.released == [(0, TS + 3), (TS + 3, TS + 6)]
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM `{scratch_db}`.keyed")
        assert cursor.fetchone() == (6,)
    assert staging.staged_totals()[0] == 0  # each round trimmed what it applied
    assert recording.trimmed == [(TS + 3, "read-ahead"), (TS + 6, "read-ahead")]
    # Nothing new at the second round's end: the next call starts afresh and finds nothing.
    assert sink.run_once() == TS + 6
    sink.close()
    assert not any(t.name == "read-ahead" for t in threading.enumerate())


def test_the_next_round_is_planned_while_the_last_batch_of_a_round_applies(
    pipeline: Settings, staging: Staging, scratch_db: str
) -> None:
    """A resolved ts that is there once a round's last batch is handed over is read at once:
    the loop finds the next round's first batch planned instead of waiting for it after the
    commit. Nothing is trimmed before the round it belongs to is applied."""
    stage = keyed_rows(pipeline, staging, scratch_db)

    recording = RecordingStaging(staging)
    seen_while_applying: list[bool] = []

    class WaitingTarget(Target):
        def apply_batch(self, plans: Any, upto: int, *args: Any) -> int:
            if upto == TS + 3:
                # The second round arrived before this batch was handed over.
                waited = time.monotonic() + 10
                while (TS + 3, TS + 6) not in recording.released and time.monotonic() < waited:
                    time.sleep(0.01)
                seen_while_applying.append((TS + 3, TS + 6) in recording.released)
                seen_while_applying.append(recording.trimmed == [])
            return super().apply_batch(plans, upto, *args)

    stage(0, 1, 3)
    stage(1, 4, 6)
    # The first round ends at TS + 3 although TS + 6 is resolved: its resolved ts is read
    # before the second message's watermark counts.
    first_resolved(recording, TS + 3)
    sink = SinkLoop(pipeline, recording, WaitingTarget(pipeline))
    assert sink.run_once() == TS + 3
    assert seen_while_applying == [True, True]
    assert sink.run_once() == TS + 6
    sink.close()
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM `{scratch_db}`.keyed")
        assert cursor.fetchone() == (6,)
    assert recording.trimmed[0] == (TS + 3, "read-ahead")
    assert staging.staged_totals()[0] == 0


def test_a_round_read_on_at_the_last_ones_end_starts_with_its_biggest_batch(
    pipeline: Settings, staging: Staging, scratch_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sink is behind when the next round is there at a round's end: its batches start as
    big as the last round's biggest, not small again (a batch's fixed costs count then)."""
    import spark_sink.rounds

    monkeypatch.setattr(spark_sink.rounds, "FIRST_BATCH_ROWS", 1)
    stage = keyed_rows(pipeline, staging, scratch_db)
    stage(0, 1, 3)
    stage(1, 4, 7)
    recording = RecordingStaging(staging)
    first_resolved(recording, TS + 3)
    applied: list[int] = []

    class CountingTarget(Target):
        def apply_batch(self, plans: Any, upto: int, *args: Any) -> int:
            applied.append(upto)
            return super().apply_batch(plans, upto, *args)

    sink = SinkLoop(pipeline, recording, CountingTarget(pipeline))
    assert sink.run_once() == TS + 3
    assert sink.run_once() == TS + 7
    sink.close()
    # Round one: 1 row, then 2 (doubling); round two from 2 rows: 2, then the last 2.
    assert applied == [TS + 1, TS + 3, TS + 5, TS + 7]


def test_a_sink_closed_after_a_round_it_read_past_leaves_that_round_trimmed(
    pipeline: Settings, staging: Staging, scratch_db: str
) -> None:
    sink, recording = arriving_rounds(pipeline, staging, scratch_db)
    # The thread is still reading the next round, its trim not reached, when the sink closes
    # (as `lead` does after one round with once=True).
    recording.slow = 0.5
    assert sink.run_once() == TS + 3
    sink.close()
    assert staging.staged_totals()[0] == 3
    assert recording.trimmed == [(TS + 3, "MainThread")]
    assert not any(t.name == "read-ahead" for t in threading.enumerate())


def test_a_stop_ends_the_round_after_the_batch_in_progress_and_the_next_sink_goes_on(
    pipeline: Settings, staging: Staging, scratch_db: str
) -> None:
    """SIGTERM waits for one batch, never for the backlog: of a round of 60 one-row
    transactions in batches of 5 rows, a stop asked while the second batch applies leaves after
    it, with the checkpoint there; a new sink applies the rest, row-exact."""
    stage = keyed_rows(pipeline, staging, scratch_db)
    stage(0, 1, 60)
    small = pipeline.updated({"batch_rows": 5})
    stop = threading.Event()
    applied: list[int] = []

    class StoppedTarget(Target):
        def apply_batch(self, plans: Any, upto: int, *args: Any) -> int:
            if len(applied) == 1:
                stop.set()  # as SIGTERM does, while this batch applies
            merged = super().apply_batch(plans, upto, *args)
            applied.append(upto)
            return merged

    first = SinkLoop(small, staging, StoppedTarget(small), stop=stop)
    reached = first.run_once()
    first.close()
    assert len(applied) == 2 and reached == applied[-1] < TS + 60
    assert Target(small).checkpoint().resolved_ts == reached
    # What the stopped sink left staged, the next one applies (from the checkpoint) and trims.
    assert staging.staged_totals()[0] == 60
    second = SinkLoop(small, staging, Target(small))
    assert second.run_once() == TS + 60
    second.close()
    assert staging.staged_totals()[0] == 0
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT id FROM `{scratch_db}`.keyed ORDER BY id")
        assert [row[0] for row in cursor.fetchall()] == list(range(1, 61))


def test_a_round_read_on_past_is_trimmed_only_once_the_loop_says_it_is_applied(
    pipeline: Settings, staging: Staging, scratch_db: str
) -> None:
    """With batches still committing on other connections when the loop takes a round's end,
    taking the end is no proof of the commit: the thread reads on, hands over the next rounds'
    steps, and trims a round only once the loop said it is applied."""
    from spark_sink.batches import PlannedBatch
    from spark_sink.rounds import RoundEnd, RoundGate, planned_rounds

    stage = keyed_rows(pipeline, staging, scratch_db)
    for round_ in range(3):
        stage(round_, 3 * round_ + 1, 3 * round_ + 3)
    recording = RecordingStaging(staging)
    gate = RoundGate()
    resolved = iter([TS + 6, TS + 9, TS + 9])
    steps = planned_rounds(pipeline, recording, 0, TS + 3, 100, gate, lambda: next(resolved))
    kinds = []
    for _ in range(4):  # round 1's batch and end, round 2's batch and end: read on past both
        step = next(steps)
        kinds.append(type(step))
    assert kinds == [PlannedBatch, RoundEnd, PlannedBatch, RoundEnd]
    assert recording.trimmed == []
    gate.applied(TS + 3)
    # Round 3's batch: round 2 is read on past, not applied yet; round 1 goes with it.
    assert isinstance(next(steps), PlannedBatch)
    assert recording.trimmed == []
    gate.applied(TS + 6)
    assert isinstance(next(steps), RoundEnd)
    assert [ts for ts, _ in recording.trimmed] == [TS + 6]
    steps.close()


def test_a_failed_read_of_the_next_resolved_ts_at_a_rounds_end_is_raised_not_waited_for(
    pipeline: Settings, staging: Staging, scratch_db: str
) -> None:
    """Redis gone as the thread reads the next resolved ts after a round's end: the loop, at
    that end, goes on (the round is applied) and the next round raises the thread's error for
    the sink's outage handling; it never waits for a decision the thread cannot make."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    stage = keyed_rows(pipeline, staging, scratch_db)
    stage(0, 1, 3)
    sink = SinkLoop(pipeline, staging, Target(pipeline))
    real = sink.gate.resolved
    reads = iter([real])  # the loop's own read answers; the thread's next one fails

    def resolved() -> int | None:
        read = next(reads, None)
        if read is None:
            raise RedisConnectionError("Connection refused")
        return read()

    sink.gate.resolved = resolved  # type: ignore[method-assign]
    outcome: list[object] = []
    loop = threading.Thread(target=lambda: outcome.append(sink.run_once()), daemon=True)
    loop.start()
    loop.join(timeout=30)
    assert not loop.is_alive(), "the loop waits at the round's end for the failed thread"
    assert outcome == [TS + 3]
    with pytest.raises(RedisConnectionError):
        sink.run_once()
    sink.gate.resolved = real  # type: ignore[method-assign]
    assert sink.run_once() == TS + 3
    # The failed thread trimmed nothing: the next round's trim takes the applied one too.
    assert staging.staged_totals()[0] == 3
    stage(1, 4, 6)
    assert sink.run_once() == TS + 6
    sink.close()
    assert staging.staged_totals()[0] == 0
