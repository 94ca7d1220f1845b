"""The stager: its contract on an in-memory store (replays, what a batch changes, a failed round
trip), and over the real Redis (dead letters, halting, Simple DML before its schema)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from config.errors import HaltedError
from config.settings import OnError
from core.model import Op, Resolved, RowChange, column_type
from core.redis_client import RedisClient
from core.staging import Staging, TopicPartition
from streams.codecs import codec_for
from streams.schema_store import RedisSchemaStore
from streams.worker.stager import MessageStager
from tests.conftest import REDIS_KINDS, redis_of
from tests.streams.worker.memory_store import MemoryStore
from tests.streams.worker.records import TP, TS, simple_messages, stage_batch


@pytest.fixture(params=REDIS_KINDS)
def redis_client(request: pytest.FixtureRequest, redis_client: RedisClient) -> RedisClient:
    """The stager's round trips on one Redis and on the Redis Cluster."""
    return redis_of(request, redis_client)


@pytest.fixture
def staging(staging: Staging) -> Staging:
    staging.set_partition_count(TP.topic, 1)
    return staging


@pytest.mark.integration
def test_a_simple_dml_before_its_schema_is_held_then_staged(staging: Staging) -> None:
    bootstrap, dml, watermark, row = simple_messages()
    schemas = RedisSchemaStore(staging.schemas())
    stager = MessageStager(staging, codec_for("simple", schemas), OnError.DEADLETTER)
    stage_batch(stager, [(TP, 0, None, dml.value), (TP, 1, None, watermark.value)])
    # Held, not dropped, and the partition's progress stops just short of it.
    assert len(staging.held()) == 1
    assert staging.global_resolved_ts() == TS - 1
    assert list(staging.release(0, TS + 10)) == []
    stage_batch(stager, [(TP, 2, None, bootstrap.value)])
    assert staging.held() == []
    assert staging.global_resolved_ts() == TS + 10
    assert list(staging.release(0, TS + 10)) == [row]
    # A second worker's codec finds the schema in Redis.
    other = codec_for("simple", RedisSchemaStore(staging.schemas()))
    assert other.decode(None, dml.value) == [row]


@pytest.mark.integration
def test_bad_messages_are_dead_lettered_and_the_partition_goes_on(
    redis_client: redis.Redis, staging: Staging
) -> None:
    good = codec_for("open").encode([Resolved(TS)])[0]
    stager = MessageStager(staging, codec_for("open"), OnError.DEADLETTER)
    stage_batch(stager, [(TP, 0, b"\x00" * 8, b"junk"), (TP, 1, good.key, good.value)])
    letters = redis_client.xrange(staging.keys.dead_letters)
    assert len(letters) == 1
    fields = letters[0][1]
    assert fields[b"offset"] == b"0" and fields[b"value"] == b"junk"
    assert b"open:" in fields[b"error"]
    assert staging.global_resolved_ts() == TS
    # Re-delivery of the bad message does not dead-letter it twice.
    stage_batch(stager, [(TP, 0, b"\x00" * 8, b"junk")])
    assert redis_client.xlen(staging.keys.dead_letters) == 1


@pytest.mark.integration
def test_halt_mode_stops_on_a_bad_message(staging: Staging) -> None:
    stager = MessageStager(staging, codec_for("open"), OnError.HALT)
    with pytest.raises(HaltedError, match=r"at topic:0 offset 0 \(TICDC_SINK_ON_ERROR=halt\)"):
        stage_batch(stager, [(TP, 0, b"\x00" * 8, b"junk")])
    assert staging.staged_offset(TP) is None


@pytest.mark.integration
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
    stage_batch(
        stager,
        [(TP, i, m.key, m.value) for i, m in enumerate(good)] + [(TP, 9, b"\x00" * 8, b"junk")],
    )
    assert sample("ticdc_sink_rows_staged_total") == 3
    assert sample("ticdc_sink_dead_letters_total") == 1
    watermark = sample(
        "ticdc_sink_partition_watermark_timestamp_seconds", topic="topic", partition="0"
    )
    assert watermark == (TS + 10 >> 18) / 1000
    # An older resolved event leaves the partition's watermark, and its gauge, where they were.
    (older,) = codec_for("open").encode([Resolved(TS - (5_000 << 18))])
    stage_batch(stager, [(TP, 10, older.key, older.value)])
    assert staging.global_resolved_ts() == TS + 10
    assert (
        sample("ticdc_sink_partition_watermark_timestamp_seconds", topic="topic", partition="0")
        == watermark
    )


@pytest.mark.integration
def test_canal_json_without_the_tidb_extension_is_dead_lettered_by_name(
    redis_client: redis.Redis,
    staging: Staging,
) -> None:
    row = RowChange(TS, "db", "t", Op.INSERT, {"id": column_type(3, 10)}, {"id": 5}, None)
    (with_extension,) = codec_for("canal-json").encode([row])
    plain = orjson.loads(with_extension.value)
    del plain["_tidb"]
    stager = MessageStager(staging, codec_for("canal-json"), OnError.DEADLETTER)
    stage_batch(stager, [(TP, 0, None, orjson.dumps(plain)), (TP, 1, None, with_extension.value)])
    (letter,) = redis_client.xrange(staging.keys.dead_letters)
    assert b"enable-tidb-extension=true" in letter[1][b"error"]
    assert letter[1][b"offset"] == b"0"
    assert list(staging.release(0, TS)) == [row]
    halting = MessageStager(staging, codec_for("canal-json"), OnError.HALT)
    with pytest.raises(HaltedError, match="no commit ts"):
        stage_batch(halting, [(TP, 2, None, orjson.dumps(plain))])


@pytest.mark.integration
def test_a_partition_that_went_elsewhere_and_back_is_checked_again(
    redis_client: redis.Redis, staging: Staging
) -> None:
    messages = [codec_for("open").encode([Resolved(TS + i)])[0] for i in range(6)]
    records = [(TP, i, m.key, m.value) for i, m in enumerate(messages)]
    bad = (TP, 4, b"\x00" * 8, b"junk")
    first = MessageStager(staging, codec_for("open"), OnError.DEADLETTER)
    stage_batch(first, records[:3])
    # Another worker stages offsets 3-5 (one of them bad) while it owns the partition ...
    other = MessageStager(staging, codec_for("open"), OnError.DEADLETTER)
    stage_batch(other, [records[3], bad, records[5]])
    # ... then the first gets it back, resuming from an offset the other never committed.
    first.forget_offsets()
    stage_batch(first, [records[3], bad, records[5]])
    assert len(redis_client.xrange(staging.keys.dead_letters)) == 1
    assert staging.staged_offset(TP) == 5


@pytest.mark.integration
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
        stage_batch(stager, [(TP, i, m.key, m.value) for i, m in enumerate(messages)])
    (warning,) = [r.getMessage() for r in caplog.records if "when quiet" in r.getMessage()]
    assert f"a change at commit ts {TS} arrived after the partition was resolved up to" in warning
    # It is still staged: the sink applies it if it has not passed it yet.
    assert staging.staged_totals()[0] == 2


# --- the contract, on an in-memory store ---------------------------------------------------------

P1 = TopicPartition("topic", 1)


def _row(ts: int, ident: int) -> RowChange:
    return RowChange(ts, "db", "t", Op.INSERT, {"id": column_type(3, 10)}, {"id": ident}, None)


def test_a_batch_says_what_it_stages_per_partition() -> None:
    codec = codec_for("open")
    messages = codec.encode([_row(TS + i, i) for i in range(1, 4)])
    (mark,) = codec.encode([Resolved(TS + 10)])
    records = [(TP, i, m.key, m.value) for i, m in enumerate(messages)]
    records += [(TP, len(messages), mark.key, mark.value), (P1, 7, mark.key, mark.value)]
    store = MemoryStore()
    stager = MessageStager(store, codec, OnError.DEADLETTER)
    batch = stage_batch(stager, records)
    mine, other = batch.changes[TP], batch.changes[P1]
    assert (mine.rows, mine.marks, mine.last_offset) == (3, [TS + 10], len(messages))
    assert (other.rows, other.marks, other.last_offset) == (0, [TS + 10], 7)
    assert store.offsets == {TP: len(messages), P1: 7}
    assert stager.rows_staged == 3
    assert stager.messages_staged == len(records)


@given(
    deliveries=st.lists(
        st.tuples(st.sampled_from([TP, P1]), st.integers(0, 3), st.integers(1, 6)), max_size=12
    )
)
def test_every_offset_is_staged_once_in_order_whatever_kafka_redelivers(
    deliveries: list[tuple[TopicPartition, int, int]],
) -> None:
    # Each delivery: a partition, how far back it rewinds from the next new offset, how many.
    codec = codec_for("open")
    store = MemoryStore()
    stager = MessageStager(store, codec, OnError.DEADLETTER)
    following = {TP: 0, P1: 0}
    for tp, rewind, count in deliveries:
        # Offsets that do not follow on from the last batch (a seek) are checked in the store.
        start = max(0, following[tp] - rewind)
        records = []
        for offset in range(start, start + count):
            (mark,) = codec.encode([Resolved(TS + offset)])
            records.append((tp, offset, mark.key, mark.value))
        stage_batch(stager, records)
        following[tp] = max(following[tp], start + count)
    for tp, end in following.items():
        staged = [offset for offset, _, _ in store.staged.get(tp, [])]
        assert staged == list(range(end))
        assert [m for _, _, m in store.staged.get(tp, [])] == [TS + o for o in range(end)]


def test_a_failed_round_trip_is_forgotten_and_the_next_batch_asks_the_store() -> None:
    codec = codec_for("open")
    marks = [codec.encode([Resolved(TS + i)])[0] for i in range(6)]
    records = [(TP, i, m.key, m.value) for i, m in enumerate(marks)]
    store = MemoryStore()
    stager = MessageStager(store, codec, OnError.DEADLETTER)
    stage_batch(stager, records[:2])
    reads = store.offset_reads
    # Offsets that follow on from the last batch need no look-up.
    stage_batch(stager, records[2:4])
    assert store.offset_reads == reads
    store.failures = 1
    with pytest.raises(ConnectionError):
        stage_batch(stager, records[4:])
    assert stager.messages_staged == 4
    stage_batch(stager, records[4:])
    assert store.offset_reads == reads + 1
    assert [offset for offset, _, _ in store.staged[TP]] == list(range(6))


def test_a_held_message_is_staged_once_its_schema_arrives() -> None:
    bootstrap, dml, _, row = simple_messages()
    store = MemoryStore()
    stager = MessageStager(store, codec_for("simple"), OnError.DEADLETTER)
    first = stage_batch(stager, [(TP, 0, None, dml.value)])
    assert not first.schemas_changed
    assert [(h.offset, h.commit_ts) for h in store.held_messages] == [(0, TS)]
    second = stage_batch(stager, [(TP, 1, None, bootstrap.value)])
    assert second.schemas_changed
    assert store.held_messages == []
    assert store.late_rows == [row]


def test_dead_letters_are_queued_with_their_batch_and_kept_to_the_cap() -> None:
    store = MemoryStore()
    stager = MessageStager(store, codec_for("open"), OnError.DEADLETTER, dead_letter_max=2)
    batch = stage_batch(stager, [(TP, offset, b"\x00" * 8, b"junk") for offset in range(3)])
    assert batch.dead_letters == 3
    assert [(tp, offset) for tp, offset, _ in store.dead] == [(TP, 1), (TP, 2)]
    # Dead-lettered offsets count as staged: a replay does not dead-letter them again.
    assert store.offsets == {TP: 2}
    assert stager.dead_letters == 3


def test_a_dml_before_its_schema_is_held_even_where_bad_input_halts() -> None:
    _, dml, watermark, _ = simple_messages()
    store = MemoryStore()
    stager = MessageStager(store, codec_for("simple"), OnError.HALT)
    # The hold signal is no DecodeError: halting on bad input does not stop on it, nor is it
    # ever a dead letter.
    stage_batch(stager, [(TP, 0, None, dml.value), (TP, 1, None, watermark.value)])
    assert [held.offset for held in store.held_messages] == [0]
    assert store.dead == []
    assert store.offsets[TP] == 1


class _Raising:
    """A codec that decodes nothing and raises ``error`` (a bug no codec means to raise)."""

    protocol = "open"
    partitioned = False

    def __init__(self, error: Exception) -> None:
        self.error = error

    def decode(self, key: bytes | None, value: bytes) -> list[Any]:
        raise self.error

    def decode_packed_many(self, messages: Any) -> list[None]:
        return [None] * len(messages)


def _canal_insert(value: str) -> bytes:
    row = RowChange(TS, "db", "t", Op.INSERT, {"id": column_type(8, 10)}, {"id": 5}, None)
    (message,) = codec_for("canal-json").encode([row])
    return message.value.replace(b'"id":"5"', b'"id":"%s"' % value.encode())


@pytest.mark.parametrize("value", [str(1 << 64), str(-(1 << 63) - 1)])
def test_an_integer_past_its_type_is_one_dead_letter_and_the_partition_goes_on(value: str) -> None:
    store = MemoryStore()
    stager = MessageStager(store, codec_for("canal-json"), OnError.DEADLETTER)
    good = _canal_insert("7")
    batch = stage_batch(stager, [(TP, 0, None, _canal_insert(value)), (TP, 1, None, good)])
    ((tp, offset, error),) = store.dead
    assert (tp, offset) == (TP, 0)
    assert error.startswith("GrammarError: canal-json: breaks rule column-value: bad value")
    assert "out of range" in error
    assert batch.changes[TP].rows == 1 and store.offsets == {TP: 1}


@pytest.mark.parametrize("bug", [OverflowError("Integer value out of range"), RecursionError()])
def test_an_unexpected_exception_is_a_dead_letter_logged_and_counted_as_a_bug(
    bug: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    from prometheus_client import REGISTRY

    store = MemoryStore(pipeline=f"bugs-{type(bug).__name__}")
    stager = MessageStager(store, _Raising(bug), OnError.DEADLETTER)  # type: ignore[arg-type]
    stage_batch(stager, [(TP, 0, None, b"x"), (TP, 1, None, b"y")])
    assert [(offset, error.split(":")[0]) for _, offset, error in store.dead] == [
        (0, type(bug).__name__),
        (1, type(bug).__name__),
    ]
    assert (
        REGISTRY.get_sample_value("ticdc_sink_decode_bugs_total", {"pipeline": store.pipeline}) == 2
    )
    assert "bug: topic:0 offset 0" in caplog.text
    halting = MessageStager(MemoryStore(), _Raising(bug), OnError.HALT)  # type: ignore[arg-type]
    with pytest.raises(HaltedError, match=type(bug).__name__):
        stage_batch(halting, [(TP, 0, None, b"x")])


def test_a_redis_outage_while_decoding_is_waited_out_not_dead_lettered() -> None:
    store = MemoryStore()
    stager = MessageStager(store, _Raising(redis.ConnectionError("gone")), OnError.DEADLETTER)  # type: ignore[arg-type]
    with pytest.raises(redis.ConnectionError):
        stage_batch(stager, [(TP, 0, None, b"x")])
    assert store.dead == []


def test_a_held_message_whose_schema_never_comes_is_dead_lettered_past_the_bound() -> None:
    _, dml, watermark, _ = simple_messages()
    store = MemoryStore()
    stager = MessageStager(store, codec_for("simple"), OnError.DEADLETTER, held_max_messages=3)
    stage_batch(stager, [(TP, 0, None, dml.value), (TP, 1, None, watermark.value)])
    stager.retry_held()
    assert [h.offset for h in store.held_messages] == [0] and store.dead == []
    stage_batch(stager, [(TP, offset, None, watermark.value) for offset in (2, 3)])
    stager.retry_held()
    assert store.held_messages == []
    ((tp, offset, error),) = store.dead
    assert (tp, offset) == (TP, 0)
    assert "no table schema yet for db.t" in error and "TICDC_SINK_HELD_MAX_MESSAGES" in error


def test_a_held_message_that_fails_once_its_schema_comes_is_dead_lettered() -> None:
    bootstrap, dml, _, _ = simple_messages()
    bad = dml.value.replace(b'"id":"5"', b'"id":"%d"' % (1 << 40))
    store = MemoryStore()
    stager = MessageStager(store, codec_for("simple"), OnError.DEADLETTER)
    stage_batch(stager, [(TP, 0, None, bad)])
    stage_batch(stager, [(TP, 1, None, bootstrap.value)])
    assert store.held_messages == [] and store.late_rows == []
    ((_, offset, error),) = store.dead
    assert offset == 0 and "out of range for a LONG column" in error
