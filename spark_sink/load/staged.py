"""A table's part of a batch as its staging table holds it: the rows, their delete flags, and
the cells as the loaders send them (text or bytes for the driver, Arrow arrays for CSV and Spark).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from core.model import Value
from spark_sink.db.tables import Column
from spark_sink.plan import TablePlan

# 0 for a row to upsert; n > 0 for the n-th image to delete (a key-less table's deletes are
# staged and counted per image).
DELETE_FLAG = "_tcs_delete"
# Staging types loaded from an Arrow int64 (BIT, ENUM and SET stage as BIGINT UNSIGNED).
_INTEGER_STAGING = ("tinyint", "smallint", "mediumint", "int", "bigint", "year")


@dataclass
class StagedTable:
    """One table of a batch: where it goes, its staging table and what that holds."""

    plan: TablePlan
    # The target and staging tables, quoted and qualified; the staging table's bare name.
    target: str
    stage: str
    stage_name: str
    columns: list[Column]
    # True when the table has its key downstream: deletes then run by key, never staged.
    keyed: bool
    # The staging table's rows: delete images (flags 1..n) unless keyed, then upsert images
    # (flag 0; a key-less table's image once per copy to add).
    images: list[dict[str, Value]]
    deletes: int
    # The CREATE of the staging table (run only when rows load into it).
    create: str

    def flags(self) -> list[int]:
        return [*range(1, self.deletes + 1), *[0] * (len(self.images) - self.deletes)]

    def only_upserts(self) -> StagedTable:
        """This table with its images to upsert only (a key-less table's once per copy): what
        loads straight into the target when its upserts load in place."""
        return replace(self, images=self.images[self.deletes :], deletes=0)

    def only_deletes(self) -> StagedTable:
        """This table with its staged delete images only: what its staging table holds when
        its upserts load straight into the target."""
        # A plain call: this runs for every table of every batch, thousands a batch.
        return StagedTable(
            plan=self.plan,
            target=self.target,
            stage=self.stage,
            stage_name=self.stage_name,
            columns=self.columns,
            keyed=self.keyed,
            images=self.images[: self.deletes],
            deletes=self.deletes,
            create=self.create,
        )

    def values(self, column: Column) -> list[Value]:
        name = column.name
        return [image.get(name) for image in self.images]


def cell(value: Value, column: Column) -> Any:
    """A staged cell: bytes for binary columns, text for the rest (MySQL parses it exactly)."""
    if value is None:
        return None
    if column.binary:
        return value if isinstance(value, bytes) else str(value).encode()
    if isinstance(value, bytes):
        return value
    return repr(value) if isinstance(value, float) else str(value)


def staging_rows(item: StagedTable) -> list[tuple[Any, ...]]:
    """The staging table's rows for a load over the driver, which binds every model value type
    as it is (MySQL converts text, numbers and bytes into the staging column's type)."""
    return list(zip(*(item.values(column) for column in item.columns), item.flags(), strict=True))


def _arrow_type(column: Column) -> Any:
    import pyarrow as pa

    if column.binary:
        return pa.binary()
    if column.staging_type.startswith(_INTEGER_STAGING):
        return pa.int64()
    if column.data_type in {"float", "double"}:
        return pa.float64()
    return pa.string()


def arrow_column(column: Column, values: list[Value]) -> Any:
    """``values`` as an Arrow array typed for ``column``, built in C: ints stay ints and floats
    floats. A value that does not fit (2**64-1 in an int64, a number in a text column) sends
    the whole column as text or bytes instead, which MySQL parses exactly."""
    import pyarrow as pa

    try:
        return pa.array(values, _arrow_type(column))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        cells = [cell(v, column) for v in values]
        as_bytes = column.binary or any(isinstance(c, bytes) for c in cells)
        return pa.array(cells, pa.binary() if as_bytes else pa.string())
