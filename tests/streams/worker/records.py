"""What the worker's tests feed the stager: one partition, a commit ts, a Simple stream."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.model import Op, Resolved, RowChange, column_type
from core.staging import TopicPartition
from streams.codecs import codec_for
from streams.worker.stager import MessageStager, PreparedBatch, Record

TP = TopicPartition("topic", 0)
TS = 449_000_000_000_000_100


def simple_messages() -> list[Any]:
    """A Simple bootstrap, a DML that needs it, a watermark after both, and the row itself."""
    row = RowChange(TS, "db", "t", Op.INSERT, {"id": column_type(3, 10)}, {"id": 5}, None)
    bootstrap, dml = codec_for("simple").encode([row])
    (watermark,) = codec_for("simple").encode([Resolved(TS + 10)])
    return [bootstrap, dml, watermark, row]


def stage_batch(stager: MessageStager, records: Sequence[Record]) -> PreparedBatch:
    """``records`` staged in one round trip as the staging line stages a batch, on one thread:
    decoded, prepared, sent."""
    batch = stager.prepare(records, stager.decode(records))
    stager.send(batch)
    return batch
