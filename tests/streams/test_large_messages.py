"""Cut-down messages made whole: a claim check replaced by what it stored, in its place."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.errors import LargeMessageError
from streams.claim_check import ClaimCheckReader
from streams.codecs.open_protocol import OpenProtocolCodec
from streams.large_messages import LargeMessages
from streams.model import ColumnFlag, MySQLType, Op, Resolved, RowChange, column_type
from tests.streams.codecs.large_messages import (
    claim_check_message,
    handle_key_only_message,
    stored_object,
)

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
