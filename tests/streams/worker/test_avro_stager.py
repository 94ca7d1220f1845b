"""The stager on an Avro stream, over the real Redis and schema registry: a codec per partition
resuming where staging says its partition stands, a registry outage re-raised (never a dead
letter), an unknown schema id a dead letter."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from config.errors import RegistryUnavailableError
from config.settings import OnError
from core.model import ColumnFlag, Op, Resolved, RowChange, column_type
from core.staging import Staging, TopicPartition
from streams.codecs.avro import AvroCodec
from streams.registry_http import RegistryAddress
from streams.schema_registry import SchemaRegistry
from streams.worker.stager import MessageStager
from tests.streams.worker.records import TS, stage_batch

pytestmark = pytest.mark.integration

KEY = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
COLUMNS = {"id": column_type(3, KEY), "v": column_type(15, int(ColumnFlag.NULLABLE))}
FIRST, SECOND = TopicPartition("avro", 0), TopicPartition("avro", 1)


def _insert(unique: str, registry: Any, ts: int, key: int) -> tuple[bytes | None, bytes]:
    row = RowChange(ts, unique, "t", Op.INSERT, COLUMNS, {"id": key, "v": "x"}, None)
    (message,) = AvroCodec(registry, topic_prefix=unique).encode([row])
    return message.key, message.value


def _checkpoint(ts: int) -> bytes:
    return AvroCodec().encode([Resolved(ts)])[0].value


def _deletes(staging: Staging) -> list[RowChange]:
    return [
        change
        for change in staging.release(0, TS + 1_000)
        if isinstance(change, RowChange) and change.op is Op.DELETE
    ]


def test_each_partition_resumes_where_staging_says_it_stands(
    staging: Staging, schema_registry: SchemaRegistry, unique: str
) -> None:
    staging.set_partition_count("avro", 2)
    key, value = _insert(unique, schema_registry, TS, 1)
    _, later = _insert(unique, schema_registry, TS + 50, 2)
    worker = MessageStager(staging, AvroCodec(schema_registry), OnError.DEADLETTER)
    records = [
        (FIRST, 0, key, value),
        (FIRST, 1, None, _checkpoint(TS + 10)),
        (SECOND, 0, key, later),
    ]
    # The native fast path takes none of them: each is decoded by its partition's codec.
    assert worker.decode(records) == [None, None, None]
    stage_batch(worker, records)
    # Another worker takes the first partition over: its first message is a tombstone, which
    # follows the partition's watermark, not the other partition's later row.
    taking_over = MessageStager(staging, AvroCodec(schema_registry), OnError.DEADLETTER)
    stage_batch(taking_over, [(FIRST, 2, key, b""), (SECOND, 1, key, b"")])
    deletes = sorted(change.commit_ts for change in _deletes(staging))
    assert deletes == [TS + 11, TS + 50]


def test_an_unknown_schema_id_is_a_dead_letter_and_an_away_registry_is_not(
    staging: Staging, schema_registry: SchemaRegistry, unique: str, redis_client: redis.Redis
) -> None:
    staging.set_partition_count("avro", 2)
    key, value = _insert(unique, schema_registry, TS, 1)
    unknown = b"\x00" + (2**31 - 1).to_bytes(4, "big") + value[5:]
    worker = MessageStager(staging, AvroCodec(schema_registry), OnError.DEADLETTER)
    stage_batch(worker, [(FIRST, 0, None, unknown)])
    (letter,) = redis_client.xrange(staging.keys.dead_letters)
    assert b"unknown to the schema registry" in letter[1][b"error"]

    # Nothing answers there; the worker is stopping, so the client gives up waiting at once.
    nowhere = "http://127.0.0.1:9/apis/ccompat/v7"
    away = SchemaRegistry(RegistryAddress(nowhere, nowhere), stopping=lambda: True)
    stopping = MessageStager(staging, AvroCodec(away), OnError.DEADLETTER)
    with pytest.raises(RegistryUnavailableError):
        stopping.prepare([(SECOND, 0, key, value)], [None])
    assert redis_client.xlen(staging.keys.dead_letters) == 1


def test_a_batch_prepared_again_decodes_from_what_staging_holds(
    staging: Staging, schema_registry: SchemaRegistry, unique: str
) -> None:
    staging.set_partition_count("avro", 2)
    key, value = _insert(unique, schema_registry, TS, 1)
    other_key, later = _insert(unique, schema_registry, TS + 50, 2)
    worker = MessageStager(staging, AvroCodec(schema_registry), OnError.DEADLETTER)
    batch = [(FIRST, 0, key, value), (FIRST, 1, key, b"")]
    following = [(FIRST, 2, other_key, later)]
    # The line prepares the next batch while one is sent; that send fails, and the batch is
    # prepared again after the next one was decoded: its delete still follows its own row.
    worker.prepare(batch, worker.decode(batch))
    next_batch = worker.prepare(following, worker.decode(following))
    worker.forget_offsets()
    worker.send(worker.prepare(batch, worker.decode(batch), again=True))
    worker.send(next_batch)
    assert [change.commit_ts for change in _deletes(staging)] == [TS + 1]
