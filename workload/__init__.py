"""A seeded workload of realistic rows: 10 columns of the common MySQL types.

A development module, not installed with ticdc-sink: the benchmarks (``benchmarks/``) and the tests
(``tests/``) share it, so neither imports the other for it (import-linter holds both to that, see
pyproject.toml). ``ticdc-sink produce`` writes another kind of rows: a coherent upstream history
with DDL and the state it leaves (``ticdc_sink/scenario.py``), where these are a throughput load.
"""

from __future__ import annotations

import random

from core.model import ColumnFlag, ColumnType, Op, RowChange, Value, column_type

KEY = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
NULLABLE = int(ColumnFlag.NULLABLE)
COLUMNS: dict[str, ColumnType] = {
    "id": column_type(8, KEY),
    "account": column_type(3, NULLABLE),
    "name": column_type(15, NULLABLE),
    "amount": column_type(246, NULLABLE),
    "created_at": column_type(12, NULLABLE),
    "score": column_type(5, NULLABLE),
    "note": column_type(252, NULLABLE),
    "flag": column_type(1, NULLABLE),
    "counter": column_type(8, NULLABLE | int(ColumnFlag.UNSIGNED)),
    "tag": column_type(15, NULLABLE | int(ColumnFlag.BINARY)),
}


START_TS = 449_000_000_000_000_000


def row_image(rng: random.Random, key: int) -> dict[str, Value]:
    """A row of the 10-column table with id ``key``, its other values drawn from ``rng``."""
    return {
        "id": key,
        "account": rng.randint(-(2**31), 2**31 - 1),
        "name": f"customer {rng.randint(0, 10**9)} 名前",
        "amount": f"{rng.randint(0, 10**12)}.{rng.randint(0, 99):02d}",
        "created_at": f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 12:34:{key % 60:02d}",
        "score": rng.random() * 1000,
        "note": "lorem ipsum dolor sit amet " * rng.randint(1, 3),
        "flag": rng.randint(0, 1),
        "counter": rng.randint(0, 2**64 - 1),
        "tag": bytes(rng.randrange(256) for _ in range(8)),
    }


def make_rows(count: int, seed: int = 7, start_ts: int = START_TS) -> list[RowChange]:
    """``count`` inserts, updates and deletes over the 10-column table, in commit order."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        image = row_image(rng, i)
        op = rng.choice([Op.INSERT, Op.INSERT, Op.UPDATE, Op.DELETE])
        rows.append(
            RowChange(
                start_ts + i * 4,
                "bench",
                "orders",
                op,
                COLUMNS,
                None if op is Op.DELETE else image,
                None if op is Op.INSERT else dict(image, amount="0.00"),
            )
        )
    return rows
