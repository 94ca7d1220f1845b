"""Framing: the native framing byte for byte the Python framing, which frames alone without the
native wheel."""

from __future__ import annotations

import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.staging import framing, layout
from core.staging.framing import FramedMessage, StagedMessage, frame_message
from streams.codecs.open_protocol import OpenProtocolCodec
from tests.core.staging.changes import BIG_TS, row


def test_without_the_native_wheel_python_frames_packed_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(framing, "native_module", lambda: None)

    class Packed:
        @property
        def resolved(self) -> list[int]:
            return [7]

        def rows(self) -> list[tuple[int, bytes]]:
            return [(5, b"row")]

        def __len__(self) -> int:
            return 1

    (framed,) = framing.frame_packed([(3, Packed())])
    assert isinstance(framed, FramedMessage)
    assert framed == frame_message(StagedMessage(3, [(5, b"row")], (), 7))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3_000)), min_size=1, max_size=150),
    offset=st.integers(0, 2**63 - 1),
)
def test_natively_framed_runs_of_rows_equal_the_python_framing(
    native: types.ModuleType, shape: list[tuple[int, int]], offset: int
) -> None:
    """Messages of up to 150 rows at a few commit ts, some rows kilobytes long: members reach
    the row and byte caps, natively framed as Python frames them."""
    shape.sort(key=lambda pair: pair[0])
    rows = [row(BIG_TS + ts, n, "v" * size) for n, (ts, size) in enumerate(shape)]
    codec = OpenProtocolCodec(max_batch=len(rows))
    (message,) = codec.encode(rows)
    packed = codec.decode_packed(message.key, message.value)
    assert packed is not None and len(packed) == len(shape)
    (framed,) = framing.frame_packed([(offset, packed)])
    expected = frame_message(StagedMessage(offset, packed.rows(), (), None))
    assert framed == expected
    assert framed.member_count == len(layout.member_runs(packed.rows()))
    assert framed.rows == len(shape)
