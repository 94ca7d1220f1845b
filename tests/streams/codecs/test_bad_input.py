"""Hostile and broken messages raise DecodeError, and nothing else, quickly."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

import pytest

from config.errors import ConfigError, DecodeError, NotYetDecodableError
from core.model import ColumnFlag, Op, Resolved, RowChange, column_type
from streams.codecs import Codec, KafkaMessage, codec_for
from streams.codecs.avro import MemoryRegistry
from streams.codecs.craft import CraftCodec
from streams.codecs.open_protocol import OpenProtocolCodec
from streams.codecs.simple import MissingSchemaError, SimpleJSONCodec

FUZZ_INPUTS_PER_PROTOCOL = 10_000
PROTOCOLS = ["open", "craft", "simple", "simple-avro", "canal-json", "debezium", "avro"]


def _sample_rows() -> list[RowChange]:
    key = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
    columns = {
        "id": column_type(8, key | ColumnFlag.UNSIGNED),
        "name": column_type(15, ColumnFlag.NULLABLE),
        "blob": column_type(252, ColumnFlag.BINARY | ColumnFlag.NULLABLE),
        "price": column_type(246, ColumnFlag.NULLABLE),
        "score": column_type(5, ColumnFlag.NULLABLE),
        "at": column_type(12, ColumnFlag.NULLABLE),
    }
    rows = []
    for i in range(4):
        image = {
            "id": (1 << 64) - 1 - i,
            "name": f"名字 {i}",
            "blob": bytes([0, 255, i]),
            "price": "12345.678901234567890",
            "score": 0.5 + i,
            "at": "2024-01-01 00:00:00.000001",
        }
        op = [Op.INSERT, Op.UPDATE, Op.DELETE, Op.UPDATE][i]
        rows.append(
            RowChange(
                449_000_000_000_000_000 + i,
                "db",
                "tbl",
                op,
                columns,
                None if op is Op.DELETE else image,
                None if op is Op.INSERT else image,
            )
        )
    return rows


def _seeds(protocol: str) -> tuple[Callable[[], Codec], list[KafkaMessage]]:
    registry = MemoryRegistry()
    encoder = codec_for(protocol, registry=registry)
    messages = encoder.encode([*_sample_rows(), Resolved(449_000_000_000_000_010)])
    if protocol.startswith("simple"):
        bootstrap = messages[0]

        def primed() -> Codec:
            codec = codec_for(protocol)
            codec.decode(bootstrap.key, bootstrap.value)
            return codec

        return primed, messages
    return lambda: codec_for(protocol, registry=registry), messages


def _mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(6)
        if not buf:
            buf += rng.randbytes(rng.randint(1, 16))
        elif choice == 0:
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        elif choice == 1:
            del buf[rng.randrange(len(buf)) :]
        elif choice == 2:
            at = rng.randrange(len(buf))
            buf[at:at] = rng.randbytes(rng.randint(1, 8))
        elif choice == 3:
            at = rng.randrange(len(buf))
            del buf[at : at + rng.randint(1, 8)]
        elif choice == 4:
            at = rng.randrange(len(buf))
            buf[at] = rng.choice([0x00, 0x7F, 0x80, 0xFF, ord('"'), ord("{"), ord("\\")])
        else:
            at = rng.randrange(len(buf))
            buf[at : at + 8] = struct.pack(">Q", rng.choice([0, 1 << 62, (1 << 64) - 1]))
    return bytes(buf)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_fuzzed_messages_raise_only_decode_errors(protocol: str) -> None:
    make_codec, seeds = _seeds(protocol)
    codec = make_codec()
    rng = random.Random(f"fuzz-{protocol}")
    failures = 0
    for _ in range(FUZZ_INPUTS_PER_PROTOCOL):
        seed = rng.choice(seeds)
        mutate_key = seed.key is not None and rng.random() < 0.3
        key = _mutate(rng, seed.key) if mutate_key and seed.key else seed.key
        value = seed.value if mutate_key else _mutate(rng, seed.value)
        try:
            codec.decode(key, value)
        except DecodeError as exc:
            failures += 1
            assert exc.protocol == protocol
            assert str(exc).startswith(protocol)
        except NotYetDecodableError as held:
            # A mutated schema version: held for its schema, which is not bad input either.
            assert held.protocol == protocol
        except ConfigError as refused:
            # A mutated Avro schema id naming the key's schema: a value without the TiDB
            # extension, which is the changefeed's setting to name, not the message.
            assert protocol == "avro" and "enable-tidb-extension" in str(refused)
            failures += 1
    # Most mutations break a message; a fuzzer whose inputs all decode is not fuzzing.
    assert failures > FUZZ_INPUTS_PER_PROTOCOL // 10


def test_open_protocol_frame_past_the_end_names_the_offset() -> None:
    key = struct.pack(">QQ", 1, 1 << 40) + b"{}"
    with pytest.raises(DecodeError, match=r"runs past the end.*at byte 8"):
        OpenProtocolCodec().decode(key, b"")


def test_open_protocol_wrong_types_are_named() -> None:
    key_json = b'{"ts":"soon","t":1}'
    key = struct.pack(">QQ", 1, len(key_json)) + key_json
    with pytest.raises(DecodeError, match="'ts' must be a uint64"):
        OpenProtocolCodec().decode(key, struct.pack(">Q", 2) + b"{}")
    key_json = b'{"ts":1,"scm":"a","tbl":"b","t":1}'
    key = struct.pack(">QQ", 1, len(key_json)) + key_json
    value = b'{"u":{"c":{"t":3,"v":{"deep":[1]}}}}'
    with pytest.raises(DecodeError, match=r"at u\.c"):
        OpenProtocolCodec().decode(key, struct.pack(">Q", len(value)) + value)


def test_deep_nesting_is_refused_not_recursed() -> None:
    key_json = b'{"ts":1,"scm":"a","tbl":"b","t":1}'
    key = struct.pack(">QQ", 1, len(key_json)) + key_json
    value = b'{"u":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(DecodeError):
        OpenProtocolCodec().decode(key, struct.pack(">Q", len(value)) + value)


def test_craft_varint_over_ten_bytes() -> None:
    with pytest.raises(DecodeError, match="varint"):
        CraftCodec().decode(None, b"\xff" * 11 + b"\x01")


def test_craft_huge_counts_do_not_allocate() -> None:
    # A size table claiming 2**62 entries in a 20-byte message.
    message = b"\x01" + b"\x02\xff\xff\xff\xff\xff\xff\xff\xff\x3f" + b"\x0a"
    with pytest.raises(DecodeError):
        CraftCodec().decode(None, message)


def test_invalid_utf8_text_is_a_decode_error() -> None:
    codec = SimpleJSONCodec()
    with pytest.raises(DecodeError, match="not JSON"):
        codec.decode(None, b'{"type":"WATERMARK","commitTs":1,"x":"\xff"}')


def test_simple_dml_before_its_schema_names_the_table() -> None:
    dml = (
        b'{"version":1,"database":"d","table":"t","type":"INSERT","commitTs":5,"buildTs":0,'
        b'"schemaVersion":7,"data":{"a":"1"}}'
    )
    with pytest.raises(MissingSchemaError) as caught:
        SimpleJSONCodec().decode(None, dml)
    assert (caught.value.schema, caught.value.table, caught.value.version) == ("d", "t", 7)
    untyped = SimpleJSONCodec(require_schema=False).decode(None, dml)
    assert isinstance(untyped[0], RowChange) and untyped[0].new == {"a": "1"}
