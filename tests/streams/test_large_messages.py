"""Cut-down messages made whole: a claim check replaced by what it stored, in its place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from config.errors import LargeMessageError
from core.model import ColumnFlag, MySQLType, Op, Resolved, RowChange, column_type
from core.staging import Staging
from streams.claim_check import ClaimCheckReader
from streams.codecs import codec_for
from streams.codecs.open_protocol import OpenProtocolCodec
from streams.large_messages import LargeMessages
from tests.streams.codecs.large_messages import (
    claim_check_message,
    handle_key_only_message,
    stored_object,
)
from tests.ticdc_sink.pipelines import run_worker_until_resolved
from ticdc_sink.produce import send

TS = 449_000_000_000_000_001
KEY = column_type(MySQLType.LONG, ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY)
TEXT = column_type(MySQLType.VARCHAR)


def _row(op: Op = Op.INSERT, ident: int = 7) -> RowChange:
    image = {"id": ident, "body": "x" * 100}
    if op is Op.DELETE:
        return RowChange(TS, "shop", "docs", op, {"id": KEY, "body": TEXT}, None, image)
    return RowChange(TS, "shop", "docs", op, {"id": KEY, "body": TEXT}, image, None)


def test_a_claim_check_becomes_the_stored_message(tmp_path: Path) -> None:
    codec = OpenProtocolCodec()
    (whole,) = codec.encode([_row()])
    (tmp_path / "a.json").write_bytes(stored_object(whole))
    check = claim_check_message(codec, _row(), f"file:{tmp_path}/a.json")
    events = LargeMessages().decode(codec, check.key, check.value)
    assert events == [_row()]


def test_without_an_upstream_a_handle_key_only_insert_is_refused_with_the_reason() -> None:
    codec = OpenProtocolCodec()
    cut = handle_key_only_message(codec, _row())
    with pytest.raises(LargeMessageError) as raised:
        LargeMessages().decode(codec, cut.key, cut.value)
    assert "handle-key-only insert of shop.docs" in str(raised.value)
    assert "set TICDC_SINK_UPSTREAM" in str(raised.value)


def test_a_handle_key_only_delete_stays_a_delete_by_key() -> None:
    codec = OpenProtocolCodec()
    cut = handle_key_only_message(codec, _row(Op.DELETE))
    (row,) = LargeMessages().decode(codec, cut.key, cut.value)
    assert isinstance(row, RowChange)
    assert (row.op, row.old, row.handle_key_only) == (Op.DELETE, {"id": 7}, True)


def test_a_message_of_whole_events_is_left_alone(tmp_path: Path) -> None:
    codec = OpenProtocolCodec()
    (message,) = codec.encode([_row(), _row(ident=8)])
    reader = ClaimCheckReader(readers={})  # any read would fail
    events = LargeMessages(reader).decode(codec, message.key, message.value)
    assert events == [_row(), _row(ident=8)]
    (mark,) = codec.encode([Resolved(TS)])
    assert LargeMessages(reader).decode(codec, mark.key, mark.value) == [Resolved(TS)]


# --- the worker, against real Kafka and Redis -------------------------------------------------


@pytest.fixture
async def topic(kafka_admin: Any, unique: str) -> Any:
    from aiokafka.admin import NewTopic

    await kafka_admin.create_topics([NewTopic(unique, 1, 1)])
    yield unique
    await kafka_admin.delete_topics([unique])


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["open", "simple", "simple-avro", "canal-json"])
async def test_the_worker_stages_a_claim_checked_row_in_its_place(
    redis_client: redis.Redis,
    settings: Any,
    topic: str,
    staging: Staging,
    unique: str,
    tmp_path: Path,
    protocol: str,
) -> None:
    codec = codec_for(protocol)
    rows = [_row(ident=i) for i in (1, 2, 3)]
    # The first message announces the table (the Simple protocol's BOOTSTRAP).
    messages = codec.encode([rows[0]])
    # Stored as TiCDC's claim-check stores it, under a file name in a folder of its own.
    (big,) = codec.encode([rows[1]])
    (tmp_path / "big.json").write_bytes(stored_object(big))
    messages += [
        claim_check_message(codec, rows[1], f"file:{tmp_path}/big.json"),
        *codec.encode([rows[2], Resolved(TS)]),
    ]
    await send(settings, topic, 1, [(0, m) for m in messages])
    run_worker_until_resolved(settings, staging, topic, unique, TS, TICDC_SINK_PROTOCOL=protocol)
    released = [e for e in staging.release(0, TS) if isinstance(e, RowChange)]
    assert [(r.op, r.new) for r in released] == [(r.op, r.new) for r in rows]
    assert redis_client.xlen(staging.keys.dead_letters) == 0


@pytest.mark.integration
async def test_the_worker_dead_letters_what_it_cannot_make_whole(
    redis_client: redis.Redis,
    settings: Any,
    topic: str,
    staging: Staging,
    unique: str,
    tmp_path: Path,
) -> None:
    codec = OpenProtocolCodec()
    rows = [_row(ident=i) for i in (1, 2, 3, 4)]
    missing = f"file:{tmp_path}/never-written.json"
    messages = [
        *codec.encode([rows[0]]),
        claim_check_message(codec, rows[1], missing),
        handle_key_only_message(codec, rows[2]),
        *codec.encode([rows[3], Resolved(TS)]),
    ]
    await send(settings, topic, 1, [(0, m) for m in messages])
    run_worker_until_resolved(
        settings, staging, topic, unique, TS, TICDC_SINK_CLAIM_CHECK_ATTEMPTS="2"
    )
    released = [e for e in staging.release(0, TS) if isinstance(e, RowChange)]
    assert released == [rows[0], rows[3]]
    letters = redis_client.xrange(staging.keys.dead_letters)
    assert [int(fields[b"offset"]) for _, fields in letters] == [1, 2]
    unreadable, key_only = (fields[b"error"].decode() for _, fields in letters)
    assert f"claim-check object file://{tmp_path}/never-written.json" in unreadable
    assert "unreadable after 2 attempts" in unreadable
    assert "handle-key-only insert of shop.docs" in key_only
    assert "TICDC_SINK_UPSTREAM" in key_only
    # The dead letter keeps the message as it came (the location), not a half-made row.
    assert letters[0][1][b"key"] == messages[1].key
