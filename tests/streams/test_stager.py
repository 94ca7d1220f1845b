"""MessageStager over the real Redis: dead letters, halting, Simple DML before its schema."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from config.errors import DecodeError
from config.settings import OnError
from streams.codecs import codec_for
from streams.model import Op, Resolved, RowChange, column_type
from streams.schema_store import RedisSchemaStore
from streams.staging import Staging, TopicPartition
from streams.worker import DECODE_PART_MIN, Acknowledge, MessageStager, StagingLine, _split

pytestmark = pytest.mark.integration

TP = TopicPartition("topic", 0)
TS = 449_000_000_000_000_100


@pytest.fixture
def staging(staging: Staging) -> Staging:
    staging.set_partition_count("topic", 1)
    return staging


def _simple_messages() -> list[Any]:
    row = RowChange(TS, "db", "t", Op.INSERT, {"id": column_type(3, 10)}, {"id": 5}, None)
    bootstrap, dml = codec_for("simple").encode([row])
    (watermark,) = codec_for("simple").encode([Resolved(TS + 10)])
    return [bootstrap, dml, watermark, row]


def test_a_simple_dml_before_its_schema_is_held_then_staged(staging: Staging) -> None:
    bootstrap, dml, watermark, row = _simple_messages()
    schemas = RedisSchemaStore(staging.client, staging.key("schemas"))
    stager = MessageStager(staging, codec_for("simple", schemas), OnError.DEADLETTER)
    stager.stage_batch([(TP, 0, None, dml.value), (TP, 1, None, watermark.value)])
    # Held, not dropped, and the partition's progress stops just short of it.
    assert len(staging.held()) == 1
    assert staging.global_resolved_ts() == TS - 1
    assert list(staging.release(0, TS + 10)) == []
    stager.stage_batch([(TP, 2, None, bootstrap.value)])
    assert staging.held() == []
    assert staging.global_resolved_ts() == TS + 10
    assert list(staging.release(0, TS + 10)) == [row]
    # A second worker's codec finds the schema in Redis.
    other = codec_for("simple", RedisSchemaStore(staging.client, staging.key("schemas")))
    assert other.decode(None, dml.value) == [row]


def test_bad_messages_are_dead_lettered_and_the_partition_goes_on(staging: Staging) -> None:
    good = codec_for("open").encode([Resolved(TS)])[0]
    stager = MessageStager(staging, codec_for("open"), OnError.DEADLETTER)
    stager.stage_batch([(TP, 0, b"\x00" * 8, b"junk"), (TP, 1, good.key, good.value)])
    letters = staging.client.xrange(staging.key("deadletters"))
    assert len(letters) == 1
    fields = letters[0][1]
    assert fields[b"offset"] == b"0" and fields[b"value"] == b"junk"
    assert b"open:" in fields[b"error"]
    assert staging.global_resolved_ts() == TS
    # Re-delivery of the bad message does not dead-letter it twice.
    stager.stage_batch([(TP, 0, b"\x00" * 8, b"junk")])
    assert staging.client.xlen(staging.key("deadletters")) == 1


def test_halt_mode_stops_on_a_bad_message(staging: Staging) -> None:
    stager = MessageStager(staging, codec_for("open"), OnError.HALT)
    with pytest.raises(DecodeError):
        stager.stage_batch([(TP, 0, b"\x00" * 8, b"junk")])
    assert staging.staged_offset(TP) is None


def test_metrics_count_decoded_staged_and_dead_lettered(staging: Staging) -> None:
    from prometheus_client import REGISTRY

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"pipeline": staging.pipeline, **labels}) or 0.0

    rows = [
        RowChange(TS + i, "db", "t", Op.INSERT, {"id": column_type(3, 10)}, {"id": i}, None)
        for i in range(3)
    ]
    good = codec_for("open").encode([*rows, Resolved(TS + 10)])
    stager = MessageStager(staging, codec_for("open"), OnError.DEADLETTER)
    stager.stage_batch(
        [(TP, i, m.key, m.value) for i, m in enumerate(good)] + [(TP, 9, b"\x00" * 8, b"junk")]
    )
    assert sample("ticdc_sink_rows_staged_total") == 3
    assert sample("ticdc_sink_dead_letters_total") == 1
    watermark = sample(
        "ticdc_sink_partition_watermark_timestamp_seconds", topic="topic", partition="0"
    )
    assert watermark == (TS + 10 >> 18) / 1000


def test_canal_json_without_the_tidb_extension_is_dead_lettered_by_name(
    staging: Staging,
) -> None:
    row = RowChange(TS, "db", "t", Op.INSERT, {"id": column_type(3, 10)}, {"id": 5}, None)
    (with_extension,) = codec_for("canal-json").encode([row])
    plain = orjson.loads(with_extension.value)
    del plain["_tidb"]
    stager = MessageStager(staging, codec_for("canal-json"), OnError.DEADLETTER)
    stager.stage_batch([(TP, 0, None, orjson.dumps(plain)), (TP, 1, None, with_extension.value)])
    (letter,) = staging.client.xrange(staging.key("deadletters"))
    assert b"enable-tidb-extension=true" in letter[1][b"error"]
    assert letter[1][b"offset"] == b"0"
    assert list(staging.release(0, TS)) == [row]
    halting = MessageStager(staging, codec_for("canal-json"), OnError.HALT)
    with pytest.raises(DecodeError, match="no commit ts"):
        halting.stage_batch([(TP, 2, None, orjson.dumps(plain))])


def test_a_partition_that_went_elsewhere_and_back_is_checked_again(staging: Staging) -> None:
    messages = [codec_for("open").encode([Resolved(TS + i)])[0] for i in range(6)]
    records = [(TP, i, m.key, m.value) for i, m in enumerate(messages)]
    bad = (TP, 4, b"\x00" * 8, b"junk")
    first = MessageStager(staging, codec_for("open"), OnError.DEADLETTER)
    first.stage_batch(records[:3])
    # Another worker stages offsets 3-5 (one of them bad) while it owns the partition ...
    MessageStager(staging, codec_for("open"), OnError.DEADLETTER).stage_batch(
        [records[3], bad, records[5]]
    )
    # ... then the first gets it back, resuming from an offset the other never committed.
    first.forget_offsets()
    first.stage_batch([records[3], bad, records[5]])
    assert len(staging.client.xrange(staging.key("deadletters"))) == 1
    assert staging.staged_offset(TP) == 5


class _App:
    """What the staging line asks of the Faust app."""

    should_stop = False

    def __init__(self) -> None:
        self.crashed: BaseException | None = None

    async def crash(self, error: BaseException) -> None:
        self.crashed = error


def _acknowledger(staging: Staging, acked: list[int], last_offset: int) -> Acknowledge:
    async def acknowledge() -> None:
        # Never before the batch is staged: Faust commits what is acknowledged.
        assert staging.staged_offset(TP) == last_offset
        acked.append(last_offset)

    return acknowledge


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.01)


async def test_the_line_stages_what_the_sync_batch_does(staging: Staging) -> None:
    # The worker's path: decoded in a thread, sent from another, acknowledged once staged.
    bootstrap, dml, watermark, row = _simple_messages()
    schemas = RedisSchemaStore(staging.client, staging.key("schemas"))
    stager = MessageStager(staging, codec_for("simple", schemas), OnError.DEADLETTER)
    line = StagingLine(_App(), stager)
    acked: list[int] = []
    batches = [
        [(TP, 0, None, dml.value), (TP, 1, None, watermark.value)],
        [(TP, 2, None, bootstrap.value), (TP, 3, b"x", b"junk")],
    ]
    for batch in batches:
        await line.submit(batch, _acknowledger(staging, acked, batch[-1][1]))
    await _until(lambda: len(acked) == 2)
    await line.close()
    assert acked == [1, 3]
    assert staging.held() == []
    assert list(staging.release(0, TS + 10)) == [row]
    assert staging.client.xlen(staging.key("deadletters")) == 1


@pytest.mark.parametrize(("batch_size", "threads"), [(3, 1), (160, 3)])
async def test_the_line_keeps_each_partition_in_order_across_many_batches(
    staging: Staging, batch_size: int, threads: int
) -> None:
    rows = [
        RowChange(TS + i, "db", "t", Op.INSERT, {"id": column_type(3, 10)}, {"id": i}, None)
        for i in range(1, 4000)
    ]
    codec = codec_for("open")
    messages = codec.encode(rows) + codec.encode([Resolved(TS + 10_000)])
    records = [(TP, offset, m.key, m.value) for offset, m in enumerate(messages)]
    line = StagingLine(
        _App(), MessageStager(staging, codec, OnError.DEADLETTER), decode_threads=threads
    )
    acked: list[int] = []
    for start in range(0, len(records), batch_size):
        batch = records[start : start + batch_size]
        await line.submit(batch, _acknowledger(staging, acked, batch[-1][1]))
    await _until(lambda: bool(acked) and acked[-1] == len(records) - 1)
    await line.close()
    assert acked == sorted(acked)
    assert list(staging.release(0, TS + 10_000)) == rows


@given(count=st.integers(0, 600), parts=st.integers(1, 8))
def test_a_batch_splits_into_runs_that_keep_its_order(count: int, parts: int) -> None:
    records = [(TP, offset, None, b"") for offset in range(count)]
    runs = _split(records, parts)
    assert [r for run in runs for r in run] == records
    assert len(runs) <= parts
    assert len(runs) == 1 or min(map(len, runs)) >= DECODE_PART_MIN


async def test_a_failed_line_stops_the_worker(staging: Staging) -> None:
    app = _App()
    line = StagingLine(app, MessageStager(staging, codec_for("open"), OnError.HALT))
    acked: list[int] = []
    await line.submit([(TP, 0, b"\x00" * 8, b"junk")], _acknowledger(staging, acked, 0))
    await _until(lambda: app.crashed is not None)
    await line.close()
    assert isinstance(app.crashed, DecodeError)
    assert acked == []
    assert staging.staged_offset(TP) is None


def test_a_change_below_a_quiet_partitions_watermark_is_logged(
    staging: Staging, caplog: pytest.LogCaptureFixture
) -> None:
    # Debezium: the stream the rule is for (its codec has no native fast path).
    codec = codec_for("debezium")
    stager = MessageStager(staging, codec, OnError.DEADLETTER)
    row = RowChange(TS, "db", "t", Op.INSERT, {"id": column_type(3, 10)}, {"id": 5}, None)
    later = RowChange(TS + 5, "db", "t", Op.INSERT, {"id": column_type(3, 10)}, {"id": 6}, None)
    messages = [*codec.encode([row]), *codec.encode([later])]
    # The worker moved the quiet partition to TS (TICDC_SINK_RESOLVE_WHEN_IDLE).
    stager.idle_marks[TP] = TS
    with caplog.at_level("WARNING", logger="ticdc_sink.worker"):
        stager.stage_batch([(TP, i, m.key, m.value) for i, m in enumerate(messages)])
    (warning,) = [r.getMessage() for r in caplog.records if "when quiet" in r.getMessage()]
    assert f"a change at commit ts {TS} arrived after the partition was resolved up to" in warning
    # It is still staged: the sink applies it if it has not passed it yet.
    assert staging.staged_totals()[0] == 2


def test_a_dml_before_its_schema_is_held_even_where_bad_input_halts(staging: Staging) -> None:
    _, dml, watermark, _ = _simple_messages()
    schemas = RedisSchemaStore(staging.client, staging.key("schemas"))
    stager = MessageStager(staging, codec_for("simple", schemas), OnError.HALT)
    # The hold signal is no DecodeError: halting on bad input does not stop on it, nor is it
    # ever a dead letter.
    stager.stage_batch([(TP, 0, None, dml.value), (TP, 1, None, watermark.value)])
    assert len(staging.held()) == 1
    assert staging.client.xlen(staging.key("deadletters")) == 0
    assert staging.staged_offset(TP) == 1
