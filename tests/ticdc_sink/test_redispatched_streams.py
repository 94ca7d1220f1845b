"""TiCDC's own encoded streams dispatched another way (another partition count, rows by table or
by key hash) replicated end to end and compared row by row with the truth, as
test_ticdc_streams.py does for the streams as they were dispatched.

The re-dispatch follows TiCDC's rules (pkg/sink/dispatcher): each row event goes to the partition
its dispatcher picks (``table``: a hash of schema and table; ``index-value``: a hash of the
handle key's values, all columns for a key-less table), resolved events (watermarks) to every
partition, and so do DDL and Simple's bootstraps. A partition's rows between two resolved events
keep commit-ts order. TiCDC's bytes are kept: an Open Protocol message splits into its events
(one key frame and one value frame each); a Craft message whose rows go to different partitions
is the one thing re-encoded, by the project's Craft encoder, one row a message.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from core.model import DDLEvent, Resolved, RowChange
from streams.codecs import Codec, KafkaMessage, codec_for
from streams.codecs.craft import CraftCodec
from streams.codecs.open_protocol import split_frames
from tests.ticdc_sink import test_ticdc_streams as as_dispatched
from tests.ticdc_sink.test_ticdc_streams import (
    PROTOCOLS,
    assert_matches_truth,
    replicate,
    stream_messages,
)

pytestmark = pytest.mark.integration

# The stream folder and the databases, as test_ticdc_streams.py has them.
streams = as_dispatched.streams
databases = as_dispatched.databases

# (dispatcher, partitions): fewer partitions than the streams' 3 by table, more by key hash.
LAYOUTS = [("table", 2), ("index-value", 5)]


def _hash(text: str) -> int:
    return zlib.crc32(text.encode())


def by_table(row: RowChange, partitions: int) -> int:
    """TiCDC's ``table`` dispatcher: every row of a table in one partition."""
    return _hash(f"{row.schema}.{row.table}") % partitions


def by_index_value(row: RowChange, partitions: int) -> int:
    """TiCDC's ``index-value`` dispatcher: the handle key's values (of the new image, the old
    one for a delete)."""
    image = row.new if row.new is not None else row.old or {}
    values = [f"{name}={image.get(name)!r}" for name in sorted(row.key_names())]
    return _hash(f"{row.schema}.{row.table}:{','.join(values)}") % partitions


DISPATCHERS: dict[str, Callable[[RowChange, int], int]] = {
    "table": by_table,
    "index-value": by_index_value,
}


@dataclass
class _Segment:
    """What one original partition sent between two resolved events."""

    rows: list[tuple[int, KafkaMessage, int]] = field(default_factory=list)
    broadcast: list[tuple[int, KafkaMessage]] = field(default_factory=list)


def _single_events(protocol: str, message: KafkaMessage) -> list[KafkaMessage]:
    """An Open Protocol message as one message per event (TiCDC's own bytes, framed anew)."""
    if protocol != "open" or message.key is None:
        return [message]
    keys = split_frames(message.key, 8, "key")
    values = split_frames(message.value, 0, "value") or [b""] * len(keys)
    head = message.key[:8]
    return [
        KafkaMessage(
            head + len(key).to_bytes(8, "big") + key, len(value).to_bytes(8, "big") + value
        )
        for key, value in zip(keys, values, strict=True)
    ]


def redispatch(
    protocol: str,
    messages: list[tuple[int, KafkaMessage]],
    dispatch: Callable[[RowChange, int], int],
    partitions: int,
) -> list[tuple[int, KafkaMessage]]:
    """The stream's messages dispatched to ``partitions`` by ``dispatch``, as TiCDC would."""
    codecs: dict[int, Codec] = {}
    segments: dict[int, list[_Segment]] = {}
    marks: dict[int, list[KafkaMessage]] = {}
    for source, original in messages:
        codec = codecs.setdefault(source, codec_for(protocol))
        current = segments.setdefault(source, [_Segment()])[-1]
        for message in _single_events(protocol, original):
            events = codec.decode(message.key, message.value)
            rows = [e for e in events if isinstance(e, RowChange)]
            if rows:
                targets = {dispatch(row, partitions) for row in rows}
                if len(targets) == 1:
                    current.rows.append((rows[0].commit_ts, message, targets.pop()))
                else:  # a Craft batch whose rows part ways
                    for row in rows:
                        (alone,) = CraftCodec(max_batch=1, native=False).encode([row])
                        current.rows.append((row.commit_ts, alone, dispatch(row, partitions)))
            elif events and all(isinstance(e, Resolved) for e in events):
                marks.setdefault(source, []).append(message)
                segments[source].append(_Segment())
                current = segments[source][-1]
            else:  # DDL, a Simple bootstrap: to every partition, at its commit ts (a
                # bootstrap has none: after the rows its partition sent before it)
                ddl_ts = [e.commit_ts for e in events if isinstance(e, DDLEvent)]
                ts = max(ddl_ts) if ddl_ts else current.rows[-1][0] if current.rows else 0
                current.broadcast.append((ts, message))
    sources = sorted(segments)
    # TiCDC sends every resolved event to every partition: the streams agree on them.
    resolved = [[m.value + (m.key or b"") for m in marks.get(s, [])] for s in sources]
    assert all(seq == resolved[0] for seq in resolved), "resolved events differ by partition"
    out: list[tuple[int, KafkaMessage]] = []
    for index in range(len(segments[sources[0]])):
        parts = [segments[s][index] for s in sources]
        for partition in range(partitions):
            timed: list[tuple[int, int, KafkaMessage]] = []
            seen: set[tuple[bytes | None, bytes]] = set()
            for part in parts:
                for ts, message in part.broadcast:
                    if (message.key, message.value) not in seen:
                        seen.add((message.key, message.value))
                        timed.append((ts, 0, message))
                timed += [(ts, 1, m) for ts, m, target in part.rows if target == partition]
            # Commit-ts order (stable: a key's changes keep theirs); a DDL before rows of its ts.
            timed.sort(key=lambda item: (item[0], item[1]))
            out += [(partition, message) for _, _, message in timed]
        first = marks.get(sources[0], [])
        if index < len(first):
            out += [(partition, first[index]) for partition in range(partitions)]
    return out


@pytest.mark.parametrize(
    ("protocol", "dispatcher", "partitions"),
    [
        (protocol, dispatcher, partitions)
        for protocol in PROTOCOLS
        for dispatcher, partitions in LAYOUTS
    ],
)
def test_a_redispatched_ticdc_stream_replicates_row_exact(
    protocol: str,
    dispatcher: str,
    partitions: int,
    streams: Path,
    pipeline: Settings,
    databases: dict[str, str],
    redis_client: Any,
) -> None:
    meta = orjson.loads((streams / f"{protocol}.meta.json").read_bytes())
    original = stream_messages(streams / f"{protocol}.jsonl.gz")
    messages = redispatch(protocol, original, DISPATCHERS[dispatcher], partitions)
    used = {partition for partition, _ in messages}
    assert used == set(range(partitions)), f"only partitions {sorted(used)} got messages"
    replicate(pipeline, protocol, meta, partitions, messages, redis_client)
    assert_matches_truth(pipeline, protocol, streams, databases, redis_client)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_redispatch_keeps_every_event(protocol: str, streams: Path) -> None:
    # Every row once, each resolved event in every partition, each key's changes in order.
    original = stream_messages(streams / f"{protocol}.jsonl.gz")
    messages = redispatch(protocol, original, by_index_value, 5)
    codecs: dict[int, Codec] = {}
    rows: list[RowChange] = []
    marks: dict[int, list[int]] = {}
    for partition, message in messages:
        codec = codecs.setdefault(partition, codec_for(protocol))
        for event in codec.decode(message.key, message.value):
            if isinstance(event, RowChange):
                assert by_index_value(event, 5) == partition
                rows.append(event)
            elif isinstance(event, Resolved):
                marks.setdefault(partition, []).append(event.commit_ts)
    meta = orjson.loads((streams / f"{protocol}.meta.json").read_bytes())
    assert len(rows) == meta["row_events"]
    if protocol != "debezium":  # TiCDC's Debezium encoder writes no watermarks
        assert len(marks) == 5 and all(seq == marks[0] for seq in marks.values())
