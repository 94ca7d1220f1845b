"""The native decoders against the Python codecs they speed up: whatever a native decoder
accepts must decode to exactly the Python codec's events; anything else it hands back."""

from __future__ import annotations

import contextlib
import json
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config.errors import DecodeError, NotYetDecodableError
from core.model import Event, Op, Resolved, RowChange
from core.packed import PackedEvents, pack_rows
from core.staging import StagedMessage, frame_message, frame_packed
from streams.codecs import KafkaMessage, codec_for
from streams.codecs.craft import CraftCodec
from streams.codecs.open_protocol import OpenProtocolCodec, split_frames
from streams.codecs.simple import SimpleJSONCodec
from tests.streams.codecs.strategies import event_lists
from tests.streams.codecs.test_bad_input import _mutate, _sample_rows

FUZZ_INPUTS = 10_000
PROTOCOLS = ["open", "craft", "simple"]
# The protocols whose native decoder also packs rows for staging.
PACKED = ["open", "craft"]


# Every test here compares against the native decoders.
pytestmark = pytest.mark.usefixtures("native")


class _Pair:
    """A protocol's codec with its native decoder and one without, fed the same messages."""

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self.native_codec: Any = codec_for(protocol)
        self.python_codec: Any = {
            "open": OpenProtocolCodec,
            "craft": CraftCodec,
            "simple": SimpleJSONCodec,
        }[protocol](native=False)

    def native(self, key: bytes | None, value: bytes) -> list[Event] | None:
        # One convention: every native decoder takes (key, value) and returns None to decline.
        return self.native_codec._native.decode(key, value)  # type: ignore[no-any-return]

    def python(
        self, key: bytes | None, value: bytes
    ) -> list[Event] | DecodeError | NotYetDecodableError:
        try:
            return self.python_codec.decode(key, value)  # type: ignore[no-any-return]
        except (DecodeError, NotYetDecodableError) as error:
            return error

    def agree(self, key: bytes | None, value: bytes) -> bool:
        """Whether the native decoder took the message (asserting it agrees with Python if so)."""
        reference = self.python(key, value)
        events = self.native(key, value)
        if events is None:
            # The codec's own Python path keeps its state (Simple schemas, layouts) in step.
            with contextlib.suppress(DecodeError, NotYetDecodableError):
                self.native_codec.decode(key, value)
            return False
        # Equal, or equal as text: a fuzzed float may be NaN, which equals nothing.
        assert events == reference or repr(events) == repr(reference), (key, value)
        if self.protocol in PACKED:
            self._agree_packed(key, value, events)
        return True

    def _agree_packed(self, key: bytes | None, value: bytes, events: list[Event]) -> None:
        """Packed rows are what packing the decoded rows makes, byte for byte (or handed back,
        which only an image naming a column twice, or two images of one kind, may be)."""
        packed = self.native_codec.decode_packed(key, value)
        rows = [e for e in events if isinstance(e, RowChange)]
        if packed is None:
            merged = _names_a_column_twice(value) if self.protocol == "open" else True
            # A row without a commit ts is the worker's to dead-letter, through Python.
            untimed = any(row.commit_ts == 0 for row in rows)
            assert rows and (merged or untimed), (key, value)
            return
        marks = [e.commit_ts for e in events if isinstance(e, Resolved)]
        assert _contents(packed) == (pack_rows(rows), marks), (key, value)
        assert len(packed) == len(rows)


def _contents(packed: PackedEvents | None) -> tuple[list[tuple[int, bytes]], list[int]] | None:
    return None if packed is None else (packed.rows(), packed.resolved)


class _RepeatedNameError(Exception):
    pass


def _names_a_column_twice(value: bytes) -> bool:
    """Whether some object in the message names a member twice (a dict keeps one of them)."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({name for name, _ in pairs}) != len(pairs):
            raise _RepeatedNameError
        return dict(pairs)

    try:
        for frame in split_frames(value, 0, "value"):
            json.loads(frame, object_pairs_hook=unique)
    except _RepeatedNameError:
        return True
    return False


def _native(protocol: str, key: bytes | None, value: bytes) -> list[Event] | None:
    return _Pair(protocol).native(key, value)


def _python(protocol: str, key: bytes | None, value: bytes) -> list[Event] | DecodeError:
    return _Pair(protocol).python(key, value)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_events_decode_alike(protocol: str, data: st.DataObject) -> None:
    events = data.draw(event_lists(protocol))
    pair = _Pair(protocol)
    for message in codec_for(protocol).encode(events):
        pair.agree(message.key, message.value)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_well_formed_rows_are_taken(protocol: str) -> None:
    pair = _Pair(protocol)
    messages = codec_for(protocol).encode(_sample_rows())
    # Simple: the BOOTSTRAP and the first row of a table (which makes its layout) go to Python.
    taken = [pair.agree(m.key, m.value) for m in messages]
    assert all(taken[2:] if protocol == "simple" else taken)
    if protocol in PACKED:
        assert all(pair.native_codec.decode_packed(m.key, m.value) for m in messages)


@pytest.mark.parametrize("protocol", sorted(PACKED))
def test_a_batch_packs_as_its_messages_do_one_by_one(protocol: str) -> None:
    # The worker decodes a whole batch in one call, from a thread.
    seeds = codec_for(protocol).encode([*_sample_rows(), Resolved(449_000_000_000_000_010)])
    rng = random.Random(f"many-{protocol}")
    messages: list[tuple[Any, Any]] = [(s.key, s.value) for s in seeds]
    messages += [(s.key, _mutate(rng, s.value)) for s in rng.choices(seeds, k=300)]
    # Not bytes: left to the Python codec, in its place in the batch.
    messages.insert(1, (seeds[0].key, bytearray(seeds[0].value)))
    codec = codec_for(protocol)
    one_by_one = [_contents(codec.decode_packed(key, value)) for key, value in messages]
    assert [_contents(packed) for packed in codec.decode_packed_many(messages)] == one_by_one
    assert one_by_one[1] is None
    assert sum(packed is not None for packed in one_by_one) > len(seeds)


@pytest.mark.parametrize("protocol", sorted(PACKED))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), first_offset=st.integers(0, 2**63 - 1_000))
def test_packed_messages_frame_as_python_frames_their_rows(
    protocol: str, data: st.DataObject, first_offset: int
) -> None:
    # The worker stages natively framed messages; frame_message is the reference.
    codec = codec_for(protocol)
    events = data.draw(event_lists(protocol))
    messages = [*codec.encode(events), *codec.encode([Resolved(449_000_000_000_000_010)])]
    packed = [codec.decode_packed(m.key, m.value) for m in messages]
    taken = [(first_offset + i, p) for i, p in enumerate(packed) if p is not None]
    assert taken
    for (offset, one), framed in zip(taken, frame_packed(taken), strict=True):
        watermark = max(one.resolved, default=None)
        expected = frame_message(StagedMessage(offset, one.rows(), (), watermark))
        assert framed == replace(expected, marks=one.resolved)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_fuzzed_messages_are_decoded_alike_or_handed_back(protocol: str) -> None:
    seeds: list[KafkaMessage] = codec_for(protocol).encode(
        [*_sample_rows(), Resolved(449_000_000_000_000_010)]
    )
    pair = _Pair(protocol)
    for seed in seeds:  # a Simple table's schema and layout first
        pair.agree(seed.key, seed.value)
    rng = random.Random(f"native-{protocol}")
    taken = 0
    for _ in range(FUZZ_INPUTS):
        seed = rng.choice(seeds)
        if seed.key and rng.random() < 0.3:
            key, value = _mutate(rng, seed.key), seed.value
        else:
            key, value = seed.key, _mutate(rng, seed.value)
        taken += pair.agree(key, value)
    # Some mutations leave a valid message (a flipped bit in a value): both sides take those.
    assert 0 < taken < FUZZ_INPUTS


def test_conformance_vectors_decode_alike(conformance: Path) -> None:
    taken = 0
    open_pair, craft_pair = _Pair("open"), _Pair("craft")
    for folder in ("open_protocol_java_demo", "open_protocol_tibigdata"):
        for key_file in sorted((conformance / folder).glob("*key*.bin")):
            value_file = key_file.with_name(key_file.name.replace("key", "value"))
            if value_file.exists():
                taken += open_pair.agree(key_file.read_bytes(), value_file.read_bytes())
    for path in sorted((conformance / "craft_tibigdata").glob("*.bin")):
        taken += craft_pair.agree(b"", path.read_bytes())
    assert taken > 0


def _framed(key: bytes, value: bytes) -> tuple[bytes, bytes]:
    """One Open Protocol event as a message: version and length-prefixed key, framed value."""
    framed_key = (1).to_bytes(8, "big") + len(key).to_bytes(8, "big") + key
    return framed_key, len(value).to_bytes(8, "big") + value


def _one_column_row(column: bytes) -> tuple[bytes, bytes]:
    return _framed(b'{"ts":1,"scm":"s","tbl":"t","t":1}', b'{"u":{"c":' + column + b"}}")


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


@pytest.mark.parametrize(
    "bad",
    [b'"\\ud800"', b'"\\udc00"', b'"\\x41"', b'"a\x01"', b'"\xff"', b'"\xed\xa0\x80"'],
)
@pytest.mark.parametrize("protocol", ["open", "simple"])
def test_a_bad_string_in_a_skipped_field_is_handed_back(protocol: str, bad: bytes) -> None:
    # serde_json skips unknown fields without the checks orjson makes of the whole document.
    pair = _Pair(protocol)
    messages = codec_for(protocol).encode(_sample_rows())
    for message in messages:
        pair.agree(message.key, message.value)
    if protocol == "simple":
        key, value = None, messages[1].value[:-1] + b',"zz":' + bad + b"}"
    else:
        key, value = _one_column_row(b'{"t":3,"f":0,"v":1,"zz":' + bad + b"}")
    assert pair.native(key, value) is None
    assert isinstance(pair.python(key, value), DecodeError)


def _bootstrap(mysql_type: str) -> bytes:
    column = {"name": "c", "dataType": {"mysqlType": mysql_type}, "nullable": True}
    table = {"schema": "s", "table": "t", "tableID": 1, "version": 7, "columns": [column]}
    table["indexes"] = []
    bootstrap = {"version": 1, "type": "BOOTSTRAP", "commitTs": 0, "buildTs": 1}
    return orjson.dumps(bootstrap | {"tableSchema": table})


def test_a_table_announced_again_is_read_with_its_new_layout() -> None:
    codec = codec_for("simple")
    row = b'{"version":1,"database":"s","table":"t","type":"INSERT","commitTs":10,"buildTs":10,'
    row += b'"schemaVersion":7,"data":{"c":"5"}}'
    codec.decode(None, _bootstrap("int"))
    codec.decode(None, row)  # the Python path makes the table's layout
    assert codec._native.decode(None, row)[0].new == {"c": 5}
    # Re-announced with another type under the same version: a new layout, which the native
    # decoder must not confuse with the one it prepared before.
    codec.decode(None, _bootstrap("varchar"))
    codec.decode(None, row)
    assert codec._native.decode(None, row)[0].new == {"c": "5"}


@dataclass(slots=True)
class _Reordered:
    schema: str
    commit_ts: int


@dataclass(slots=True)
class _Checked:
    commit_ts: int

    def __post_init__(self) -> None:
        raise AssertionError("a native decoder would skip this")


@pytest.mark.parametrize("resolved", [_Reordered, _Checked])
def test_a_model_the_native_side_does_not_build_is_refused(resolved: type, native: Any) -> None:
    with pytest.raises(TypeError, match=r"native/src/model\.rs"):
        native.Model(RowChange, resolved, Op.INSERT, Op.UPDATE, Op.DELETE)


@pytest.mark.parametrize(
    "body",
    [
        # An old image with a column the new one lacks, and another type for a shared one.
        b'{"u":{"a":{"t":3,"f":0,"v":1}},"p":{"b":{"t":3,"v":2},"a":{"t":8,"f":32,"v":1}}}',
        # Images naming their columns in different orders.
        b'{"u":{"a":{"t":3,"v":1},"b":{"t":15,"v":"x"}},"p":{"b":{"t":15,"v":"y"},"a":{"t":3}}}',
        # A column named twice (a dict keeps the last value, in the first place).
        b'{"d":{"a":{"t":3,"v":1},"b":{"t":3,"v":2},"a":{"t":8,"v":3}}}',
        b'{"u":{"big":{"t":8,"f":160,"v":18446744073709551615},"neg":{"t":8,"v":-9223372036854775808}}}',
    ],
)
def test_packed_rows_are_packed_decoded_rows(body: bytes) -> None:
    key, value = _framed(b'{"ts":1,"scm":"s","tbl":"t","t":1,"ptn":7}', body)
    assert _Pair("open").agree(key, value)
