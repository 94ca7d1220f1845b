"""decode(encode(events)) == events, for every protocol, over generated events."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.model import Bootstrap, ColumnFlag, Event, MySQLType, Op, RowChange, column_type
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


def test_simple_encoder_announces_a_table_once_while_its_column_types_stay() -> None:
    """A unique or indexed column keeps its flags through the schema the encoder announces, so
    the table's next rows are described by it and need no new schema version."""
    flag = ColumnFlag
    columns = {
        "id": column_type(MySQLType.LONG, flag.PRIMARY_KEY | flag.HANDLE_KEY),
        "email": column_type(MySQLType.VARCHAR, flag.UNIQUE_KEY),
        "tag": column_type(MySQLType.VARCHAR, flag.NULLABLE | flag.MULTIPLE_KEY),
    }
    rows = [
        RowChange(ts, "s", "t", Op.INSERT, columns, {"id": ts, "email": "e", "tag": None}, None)
        for ts in (1, 2, 3)
    ]
    codec = SimpleJSONCodec()
    messages = [m for row in rows for m in codec.encode([row])]
    decoder = SimpleJSONCodec()
    decoded = [event for m in messages for event in decoder.decode(m.key, m.value)]
    assert [type(event).__name__ for event in decoded] == ["Bootstrap"] + ["RowChange"] * 3
    assert [event for event in decoded if isinstance(event, RowChange)] == rows
