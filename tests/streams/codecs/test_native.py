"""The native decoders against the Python codecs they speed up: whatever a native decoder
accepts must decode to exactly the Python codec's events; anything else it hands back."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config.errors import DecodeError
from streams.codecs import KafkaMessage, codec_for
from streams.codecs.craft import CraftCodec
from streams.codecs.native import native_module
from streams.codecs.open_protocol import _KINDS, OpenProtocolCodec
from streams.model import DDLEvent, Event, Resolved
from tests.conftest import IN_CI
from tests.streams.codecs.strategies import event_lists
from tests.streams.codecs.test_bad_input import _mutate, _sample_rows

FUZZ_INPUTS = 10_000
PROTOCOLS = ["open", "craft"]


@pytest.fixture(scope="module", autouse=True)
def _native_installed() -> None:
    if native_module() is None:
        message = "ticdc_sink_native is not installed (make builds it from native/)"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def _native(protocol: str, key: bytes | None, value: bytes) -> list[Event] | None:
    if protocol == "open":
        assert key is not None
        return OpenProtocolCodec()._native.decode(key, value, _KINDS)  # type: ignore[union-attr]
    return CraftCodec()._native.decode(value)  # type: ignore[union-attr]


def _python(protocol: str, key: bytes | None, value: bytes) -> list[Event] | DecodeError:
    codec = OpenProtocolCodec(native=False) if protocol == "open" else CraftCodec(native=False)
    try:
        return codec.decode(key, value)
    except DecodeError as error:
        return error


def _agree(protocol: str, key: bytes | None, value: bytes) -> bool:
    """Whether the native decoder took the message (asserting it agrees with Python if so)."""
    reference = _python(protocol, key, value)  # also fills the tables the native side reads
    events = _native(protocol, key, value)
    if events is None:
        return False
    # Equal, or equal as text: a fuzzed float may be NaN, which equals nothing.
    assert events == reference or repr(events) == repr(reference), (key, value)
    return True


@pytest.mark.parametrize("protocol", PROTOCOLS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_events_decode_alike(protocol: str, data: st.DataObject) -> None:
    events = data.draw(event_lists(protocol))
    for message in codec_for(protocol).encode(events):
        taken = _agree(protocol, message.key, message.value)
        # In well-formed messages only DDL is left to Python.
        decoded = _python(protocol, message.key, message.value)
        assert taken or any(isinstance(e, DDLEvent) for e in decoded)  # type: ignore[union-attr]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_fuzzed_messages_are_decoded_alike_or_handed_back(protocol: str) -> None:
    seeds: list[KafkaMessage] = codec_for(protocol).encode(
        [*_sample_rows(), Resolved(449_000_000_000_000_010)]
    )
    rng = random.Random(f"native-{protocol}")
    taken = 0
    for _ in range(FUZZ_INPUTS):
        seed = rng.choice(seeds)
        if seed.key and rng.random() < 0.3:
            key, value = _mutate(rng, seed.key), seed.value
        else:
            key, value = seed.key, _mutate(rng, seed.value)
        taken += _agree(protocol, key, value)
    # Some mutations leave a valid message (a flipped bit in a value): both sides take those.
    assert 0 < taken < FUZZ_INPUTS


def test_conformance_vectors_decode_alike(conformance: Path) -> None:
    taken = 0
    for folder in ("open_protocol_java_demo", "open_protocol_tibigdata"):
        for key_file in sorted((conformance / folder).glob("*key*.bin")):
            value_file = key_file.with_name(key_file.name.replace("key", "value"))
            if value_file.exists():
                taken += _agree("open", key_file.read_bytes(), value_file.read_bytes())
    for path in sorted((conformance / "craft_tibigdata").glob("*.bin")):
        taken += _agree("craft", b"", path.read_bytes())
    assert taken > 0


def _one_column_row(column: bytes) -> tuple[bytes, bytes]:
    key = b'{"ts":1,"scm":"s","tbl":"t","t":1}'
    value = b'{"u":{"c":' + column + b"}}"
    framed_key = (1).to_bytes(8, "big") + len(key).to_bytes(8, "big") + key
    return framed_key, len(value).to_bytes(8, "big") + value


@pytest.mark.parametrize(
    "column",
    [
        b'{"t":15,"f":1,"v":"\\\\400"}',  # an octal escape Go would not write
        b'{"t":252,"f":0,"v":"not base64!"}',
        b'{"t":3,"f":0,"v":[1]}',
        b'{"t":3,"f":65536,"v":1}',
        b'{"t":true,"f":0,"v":1}',
        b'{"t":3,"f":0,"v":1e400}',
    ],
)
def test_what_python_refuses_is_handed_back(column: bytes) -> None:
    key, value = _one_column_row(column)
    assert _native("open", key, value) is None
    assert isinstance(_python("open", key, value), DecodeError)


def test_an_integer_past_64_bits_is_left_to_python() -> None:
    # orjson reads it as a float: the native side will not guess what Python does with it.
    key, value = _one_column_row(b'{"t":3,"f":0,"v":123456789012345678901234}')
    assert _native("open", key, value) is None


def test_craft_messages_cut_anywhere_are_handed_back() -> None:
    (message,) = codec_for("craft").encode(_sample_rows())
    for end in range(len(message.value)):
        assert _native("craft", b"", message.value[:end]) is None
        assert isinstance(_python("craft", b"", message.value[:end]), DecodeError)
