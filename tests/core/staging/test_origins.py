"""The Kafka message a released row was staged from, looked up in staging against the real Redis:
TiCDC's own Open Protocol stream staged as the worker stages it, every released row found in
the message that holds it, and nothing for a trimmed one."""

from __future__ import annotations

import base64
import gzip
from pathlib import Path

import orjson
import pytest

from config.settings import OnError
from core.model import Op, RowChange
from core.staging import Staging, TopicPartition, origins
from streams.codecs import codec_for
from streams.worker.stager import MessageStager
from tests.core.staging.changes import BIG_TS, NO_KEY, P0, P1, row
from tests.streams.worker.records import stage_batch

pytestmark = pytest.mark.integration

# The stream's messages staged per round trip.
STAGE_CHUNK = 500
# Every how many released rows one is looked up alone.
SAMPLE_EVERY = 25


def _stage_open_stream(
    staging: Staging, conformance: Path
) -> dict[tuple[TopicPartition, int], list[RowChange]]:
    """TiCDC's Open Protocol stream (``ticdc_encoded/open.jsonl.gz``), each line at the next
    offset of its partition, staged by the worker's stager; per message, the rows it decodes
    to."""
    folder = conformance / "ticdc_encoded"
    meta = orjson.loads((folder / "open.meta.json").read_bytes())
    staging.set_partition_count("topic", meta["partitions"])
    codec = codec_for("open")
    records = []
    decoded: dict[tuple[TopicPartition, int], list[RowChange]] = {}
    offsets = [0] * meta["partitions"]
    with gzip.open(folder / "open.jsonl.gz") as lines:
        for line in lines:
            item = orjson.loads(line)
            tp = TopicPartition("topic", item["p"])
            offset = offsets[tp.partition]
            offsets[tp.partition] += 1
            key = base64.b64decode(item["k"]) if item["k"] is not None else None
            value = base64.b64decode(item["v"])
            records.append((tp, offset, key, value))
            rows = [e for e in codec.decode(key, value) if isinstance(e, RowChange)]
            if rows:
                decoded[(tp, offset)] = rows
    stager = MessageStager(staging, codec_for("open"), OnError.HALT)
    for start in range(0, len(records), STAGE_CHUNK):
        stage_batch(stager, records[start : start + STAGE_CHUNK])
    return decoded


@pytest.mark.parametrize("page", [origins.LOOKUP_PAGE, 1])
def test_every_row_of_ticdcs_stream_is_found_in_the_message_that_holds_it(
    staging: Staging, conformance: Path, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    monkeypatch.setattr(origins, "LOOKUP_PAGE", page)
    decoded = _stage_open_stream(staging, conformance)
    # Several messages of one partition at one commit ts: the first member there is not enough.
    spans = {(tp, rows[0].commit_ts) for (tp, _), rows in decoded.items()}
    assert len(spans) < len(decoded)
    released = [c for c in staging.release(0, 1 << 63) if isinstance(c, RowChange)]
    assert len(released) == sum(map(len, decoded.values()))
    # Asked in an order of their own: a look-up pairing rows with changes by position is wrong.
    found = staging.origins(released[::-1])[::-1]
    # Each message's rows are exactly the changes that name it: identical rows of t_nokey
    # (distinct upstream) each name a message of their own.
    holds = {message: list(rows) for message, rows in decoded.items()}
    for change, origin in zip(released, found, strict=True):
        assert origin is not None, change
        holds[(origin.tp, origin.offset)].remove(change)
    assert not [message for message, rows in holds.items() if rows]
    # One at a time, as the sink mostly asks.
    for change in released[::SAMPLE_EVERY]:
        (origin,) = staging.origins([change])
        assert origin is not None and change in decoded[(origin.tp, origin.offset)]


def test_identical_rows_of_a_keyless_table_name_their_own_messages(staging: Staging) -> None:
    same = RowChange(BIG_TS + 1, "db", "n", Op.INSERT, NO_KEY, {"a": 1, "b": "x"}, None)
    staging.stage(P1, 4, [same])
    staging.stage(P0, 7, [row(BIG_TS + 1, 1)])
    staging.stage(P0, 8, [same, row(BIG_TS + 1, 2)])
    staging.stage(P0, 9, [same])
    released = [c for c in staging.release(0, BIG_TS + 1) if isinstance(c, RowChange)]
    keyless = [c for c in released if c.table == "n"]
    assert [(o.tp, o.offset) for o in staging.origins(keyless) if o] == [(P0, 8), (P0, 9), (P1, 4)]
    assert [o.offset for o in staging.origins([released[1], released[0]]) if o] == [8, 7]


def test_a_trimmed_row_is_not_found(staging: Staging) -> None:
    gone, kept = row(BIG_TS + 1, 1), row(BIG_TS + 2, 2)
    staging.stage(P0, 3, [gone])
    staging.stage(P1, 5, [kept])
    staging.trim(BIG_TS + 1)
    assert staging.origins([gone, kept]) == [None, origins.Origin(P1, 5)]
    assert staging.origins([]) == []
