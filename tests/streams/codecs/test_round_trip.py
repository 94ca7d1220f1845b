"""decode(encode(events)) == events, for every protocol, over generated events."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.model import Bootstrap, Event
from streams.codecs import codec_for
from streams.codecs.compression import Compression
from streams.codecs.simple import SimpleJSONCodec
from tests.streams.codecs.strategies import event_lists, rows

PROTOCOLS = ["open", "craft", "simple", "simple-avro", "canal-json", "debezium"]


def _round_trip(protocol: str, events: list[Event]) -> list[Event]:
    messages = codec_for(protocol).encode(events)
    decoder = codec_for(protocol)
    decoded = [event for m in messages for event in decoder.decode(m.key, m.value)]
    # The Simple encoder announces each table's schema before its first DML, as TiCDC does.
    return [event for event in decoded if not isinstance(event, Bootstrap)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(protocol: str, data: st.DataObject) -> None:
    events = data.draw(event_lists(protocol))
    assert _round_trip(protocol, events) == events


@settings(max_examples=10, deadline=None)
@given(events=st.lists(rows("open", "s", "t"), min_size=40, max_size=40))
def test_open_protocol_batches_at_most_sixteen_rows(events: list[Event]) -> None:
    messages = codec_for("open").encode(events)
    assert [len(codec_for("open").decode(m.key, m.value)) for m in messages] == [16, 16, 8]


@pytest.mark.parametrize("method", [Compression.SNAPPY, Compression.LZ4])
@settings(max_examples=20, deadline=None)
@given(event=rows("simple", "s", "t"))
def test_simple_with_large_message_compression(method: Compression, event: Event) -> None:
    encoder = SimpleJSONCodec(compression=method)
    decoder = SimpleJSONCodec(compression=method)
    decoded = [e for m in encoder.encode([event]) for e in decoder.decode(None, m.value)]
    assert decoded[-1] == event
