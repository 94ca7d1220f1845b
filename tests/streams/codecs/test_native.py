"""The native decoders against the Python codecs they speed up: whatever a native decoder
accepts must decode to exactly the Python codec's events; anything else it hands back."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config.errors import DecodeError
from streams.codecs import KafkaMessage, codec_for
from streams.codecs.native import native_module
from streams.codecs.open_protocol import _KINDS, OpenProtocolCodec
from streams.model import Event, Resolved
from tests.conftest import IN_CI
from tests.streams.codecs.strategies import event_lists
from tests.streams.codecs.test_bad_input import _mutate, _sample_rows

FUZZ_INPUTS = 10_000


@pytest.fixture(scope="module")
def native_open() -> Any:
    module = native_module()
    if module is None:
        message = "ticdc_sink_native is not installed (make builds it from native/)"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return OpenProtocolCodec()._native


def _python(key: bytes | None, value: bytes) -> list[Event] | DecodeError:
    try:
        return OpenProtocolCodec(native=False).decode(key, value)
    except DecodeError as error:
        return error


def _agree(native_open: Any, key: bytes, value: bytes) -> bool:
    """Whether the native decoder took the message (asserting it agrees with Python if so)."""
    reference = _python(key, value)  # also fills the column-type table the native side reads
    events = native_open.decode(key, value, _KINDS)
    if events is None:
        return False
    assert events == reference, (key, value)
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_events_decode_alike(native_open: Any, data: st.DataObject) -> None:
    events = data.draw(event_lists("open"))
    messages = codec_for("open").encode(events)
    for message in messages:
        assert message.key is not None
        taken = _agree(native_open, message.key, message.value)
        # Only DDL is left to Python in well-formed messages.
        has_ddl = any(
            not isinstance(e, Resolved) and not hasattr(e, "op")
            for e in OpenProtocolCodec(native=False).decode(message.key, message.value)
        )
        assert taken or has_ddl


def test_fuzzed_messages_are_decoded_alike_or_handed_back(native_open: Any) -> None:
    seeds: list[KafkaMessage] = codec_for("open").encode(
        [*_sample_rows(), Resolved(449_000_000_000_000_010)]
    )
    rng = random.Random("native-open")
    taken = 0
    for _ in range(FUZZ_INPUTS):
        seed = rng.choice(seeds)
        assert seed.key is not None
        if rng.random() < 0.3:
            key, value = _mutate(rng, seed.key), seed.value
        else:
            key, value = seed.key, _mutate(rng, seed.value)
        taken += _agree(native_open, key, value)
    # Some mutations leave a valid message (a flipped bit in a value): both sides take those.
    assert 0 < taken < FUZZ_INPUTS


def test_conformance_vectors_decode_alike(native_open: Any, conformance: Path) -> None:
    taken = 0
    for folder in ("open_protocol_java_demo", "open_protocol_tibigdata"):
        for key_file in sorted((conformance / folder).glob("*key*.bin")):
            value_file = key_file.with_name(key_file.name.replace("key", "value"))
            if value_file.exists():
                taken += _agree(native_open, key_file.read_bytes(), value_file.read_bytes())
    assert taken > 0


def _one_column_row(column: bytes) -> tuple[bytes, bytes]:
    key = b'{"ts":1,"scm":"s","tbl":"t","t":1}'
    value = b'{"u":{"c":' + column + b"}}"
    framed_key = (1).to_bytes(8, "big") + len(key).to_bytes(8, "big") + key
    return framed_key, len(value).to_bytes(8, "big") + value


@pytest.mark.parametrize(
    "column",
    [
        b'{"t":15,"f":1,"v":"\\400"}',  # an octal escape Go would not write
        b'{"t":252,"f":0,"v":"not base64!"}',
        b'{"t":3,"f":0,"v":[1]}',
        b'{"t":3,"f":65536,"v":1}',
        b'{"t":true,"f":0,"v":1}',
        b'{"t":3,"f":0,"v":1e400}',
    ],
)
def test_what_python_refuses_is_handed_back(native_open: Any, column: bytes) -> None:
    key, value = _one_column_row(column)
    assert native_open.decode(key, value, _KINDS) is None
    assert isinstance(_python(key, value), DecodeError)


def test_an_integer_past_64_bits_is_left_to_python(native_open: Any) -> None:
    # orjson reads it as a float: the native side will not guess what Python does with it.
    key, value = _one_column_row(b'{"t":3,"f":0,"v":123456789012345678901234}')
    assert native_open.decode(key, value, _KINDS) is None
