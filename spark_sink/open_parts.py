"""What the sink holds of an upstream transaction it applies in parts, between its first part and
its last: the open downstream transaction and, per staging table, what the parts loaded into it
(see :meth:`spark_sink.apply_batch.BatchApplier.apply_part`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PartStage:
    """A staging table the parts of one transaction load their images into: its target, the
    columns any part's rows set, the rows staged (what decides how it is emptied), the images
    among them, and whether a part loaded its images straight into the target instead."""

    target: str
    columns: list[str]
    rows: int = 0
    images: int = 0
    in_place: bool = False


@dataclass
class OpenParts:
    """The downstream transaction the parts of one upstream transaction apply in, so far."""

    connection: Any
    resolved_ts: int
    stages: dict[str, PartStage] = field(default_factory=dict)
    merged: int = 0
