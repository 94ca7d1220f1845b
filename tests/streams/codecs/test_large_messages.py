"""Each codec reports TiCDC's large-message forms (claim check, handle-key-only) as such."""

from __future__ import annotations

import pytest

from config.errors import DecodeError
from core.model import ClaimCheck, ColumnFlag, MySQLType, Op, RowChange, column_type
from streams.codecs import Codec
from streams.codecs.canal_json import CanalJSONCodec
from streams.codecs.open_protocol import OpenProtocolCodec
from streams.codecs.simple import SimpleJSONCodec
from streams.codecs.simple_avro import SimpleAvroCodec
from tests.streams.codecs.large_messages import claim_check_message, handle_key_only_message

TS = 449_000_000_000_000_001
# TiCDC's location: the storage URI joined with a UUID file name by Go's filepath.Join.
LOCATION = "file:/tmp/claim-check/5c1d0e3e-8b3a-4f57-9d1c-0c5e8e3f7a21.json"
KEY = column_type(MySQLType.LONG, ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY)
TEXT = column_type(MySQLType.VARCHAR)


def _row(op: Op = Op.INSERT) -> RowChange:
    columns = {"id": KEY, "body": TEXT}
    image = {"id": 7, "body": "x" * 1000}
    if op is Op.DELETE:
        return RowChange(TS, "shop", "docs", op, columns, None, image)
    old = {"id": 7, "body": "y"} if op is Op.UPDATE else None
    return RowChange(TS, "shop", "docs", op, columns, image, old)


def _codecs() -> list[tuple[str, Codec, Codec]]:
    """(name, encoder, decoder) pairs; the Simple JSON codec natively and in Python."""
    return [
        ("open", OpenProtocolCodec(), OpenProtocolCodec()),
        ("open, Python", OpenProtocolCodec(), OpenProtocolCodec(native=False)),
        ("simple", SimpleJSONCodec(), SimpleJSONCodec()),
        ("simple, Python", SimpleJSONCodec(), SimpleJSONCodec(native=False)),
        ("simple-avro", SimpleAvroCodec(), SimpleAvroCodec()),
        ("canal-json", CanalJSONCodec(), CanalJSONCodec()),
    ]


def _introduce(encoder: Codec, decoder: Codec) -> None:
    """Let both codecs know the table (the Simple protocol's BOOTSTRAP)."""
    for message in encoder.encode([_row()]):
        decoder.decode(message.key, message.value)


@pytest.mark.parametrize(("name", "encoder", "decoder"), _codecs(), ids=lambda v: str(v))
def test_a_claim_check_message_decodes_to_its_location(
    name: str, encoder: Codec, decoder: Codec
) -> None:
    _introduce(encoder, decoder)
    message = claim_check_message(encoder, _row(), LOCATION)
    assert decoder.decode(message.key, message.value) == [ClaimCheck(LOCATION)]


@pytest.mark.parametrize(("name", "encoder", "decoder"), _codecs(), ids=lambda v: str(v))
@pytest.mark.parametrize("op", [Op.INSERT, Op.UPDATE, Op.DELETE])
def test_a_handle_key_only_row_is_marked(name: str, encoder: Codec, decoder: Codec, op: Op) -> None:
    _introduce(encoder, decoder)
    message = handle_key_only_message(encoder, _row(op))
    (row,) = decoder.decode(message.key, message.value)
    assert isinstance(row, RowChange)
    assert row.handle_key_only
    assert (row.op, row.commit_ts) == (op, TS)
    for image in (row.new, row.old):
        assert image in (None, {"id": 7})


def test_the_open_fast_path_leaves_a_handle_key_only_row_to_the_worker() -> None:
    codec = OpenProtocolCodec()
    whole = codec.encode([_row()])[0]
    cut = handle_key_only_message(codec, _row())
    messages = [(whole.key, whole.value), (cut.key, cut.value)]
    packed = codec.decode_packed_many(messages)
    assert packed[1] is None
    assert codec.decode_packed(cut.key, cut.value) is None
    if codec._native is not None:  # the native decoder is built here
        assert packed[0] is not None


@pytest.mark.parametrize(
    ("encoder", "decoder"),
    [
        (OpenProtocolCodec(), OpenProtocolCodec(native=False)),
        (SimpleJSONCodec(), SimpleJSONCodec(native=False)),
        (CanalJSONCodec(), CanalJSONCodec()),
    ],
    ids=["open", "simple", "canal-json"],
)
def test_a_location_that_is_not_text_is_a_decode_error(encoder: Codec, decoder: Codec) -> None:
    _introduce(encoder, decoder)
    message = claim_check_message(encoder, _row(), 5)  # type: ignore[arg-type]
    with pytest.raises(DecodeError, match="must be a string"):
        decoder.decode(message.key, message.value)
