"""One upstream transaction many times larger than the chunk the tests set, over a table with a
primary and a NOT NULL unique key, staged in Redis as 16-row messages of one partition: deletes,
updates, key moves (some split by TiCDC into a delete and an insert), swaps of unique values and
inserts, shuffled as TiCDC sends a transaction. What the downstream must hold before and after."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from config.settings import Settings
from core.model import ColumnFlag, Op, RowChange, column_type
from core.staging import Staging, TopicPartition
from spark_sink.db.connection import connect

TS = 449_300_000_000_000_000
KEY = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
COLUMNS = {
    "id": column_type(3, KEY),
    "u": column_type(3, int(ColumnFlag.UNIQUE_KEY)),
    "v": column_type(15, int(ColumnFlag.NULLABLE)),
}
Row = tuple[int, int, str]


@dataclass(frozen=True)
class BigTransaction:
    """The table's rows before the transaction (committed at ``TS``) and after it (``TS + 1``)."""

    before: list[Row]
    after: list[Row]
    changes: int
    # Stages the big transaction (with its watermark), when the base was staged alone.
    stage_rest: Callable[[], None] | None = None


def create_table(settings: Settings, db: str) -> None:
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE `{db}`.big (id INT PRIMARY KEY, u INT NOT NULL UNIQUE, v VARCHAR(16))"
        )


def stage_big_transaction(
    staging: Staging,
    db: str,
    base: int,
    seed: int = 7,
    base_alone: bool = False,
    resolved: int = TS + 1,
) -> BigTransaction:
    """``base`` rows at ``TS``, then one transaction at ``TS + 1`` of about 2.5 x ``base``
    changes, staged with the watermark ``resolved`` after it (its commit ts by default; TiCDC's
    resolved events usually come past it); with ``base_alone`` only the base is staged (its
    watermark at ``TS``) and :attr:`BigTransaction.stage_rest` stages the rest."""
    rng = random.Random(seed)
    rows = {i: {"id": i, "u": i, "v": "base"} for i in range(base)}
    before = sorted((r["id"], r["u"], r["v"]) for r in rows.values())
    first = [RowChange(TS, db, "big", Op.INSERT, COLUMNS, dict(r), None) for r in rows.values()]
    events: list[RowChange] = []
    ts = TS + 1
    ids = list(range(base))
    rng.shuffle(ids)
    fifth = base // 5
    deleted, updated, moved, split, swapped = (ids[n * fifth : (n + 1) * fifth] for n in range(5))
    for i in deleted:
        events.append(RowChange(ts, db, "big", Op.DELETE, COLUMNS, None, rows.pop(i)))
    for i in updated:
        old = rows[i]
        rows[i] = {**old, "v": "updated"}
        events.append(RowChange(ts, db, "big", Op.UPDATE, COLUMNS, rows[i], old))
    for i in moved + split:
        # Onto a key a deleted row freed, or a new one: the old key goes, the new one comes.
        old = rows.pop(i)
        new = {**old, "id": (deleted.pop() if deleted else base * 10 + i), "v": "moved"}
        rows[new["id"]] = new
        if i in split:
            events.append(RowChange(ts, db, "big", Op.DELETE, COLUMNS, None, old))
            events.append(RowChange(ts, db, "big", Op.INSERT, COLUMNS, new, None))
        else:
            events.append(RowChange(ts, db, "big", Op.UPDATE, COLUMNS, new, old))
    for a, b in zip(swapped[::2], swapped[1::2], strict=False):
        old_a, old_b = rows[a], rows[b]
        rows[a], rows[b] = {**old_a, "u": old_b["u"]}, {**old_b, "u": old_a["u"]}
        events.append(RowChange(ts, db, "big", Op.UPDATE, COLUMNS, rows[a], old_a))
        events.append(RowChange(ts, db, "big", Op.UPDATE, COLUMNS, rows[b], old_b))
    for n in range(base):
        new = {"id": base * 100 + n, "u": base * 100 + n, "v": "new"}
        rows[new["id"]] = new
        events.append(RowChange(ts, db, "big", Op.INSERT, COLUMNS, new, None))
    rng.shuffle(events)
    tp = TopicPartition("topic", 0)
    staging.stage(tp, 0, first, watermark=TS)

    def stage_rest() -> None:
        for offset, start in enumerate(range(0, len(events), 16), 1):
            staging.stage(tp, offset, events[start : start + 16])
        staging.stage(tp, offset + 1, [], watermark=resolved)

    after = sorted((r["id"], r["u"], r["v"]) for r in rows.values())
    if base_alone:
        return BigTransaction(before, after, len(events), stage_rest)
    stage_rest()
    return BigTransaction(before, after, len(events))


def table_rows(settings: Settings, db: str) -> list[Row]:
    """The downstream table's rows, in key order."""
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT id, u, v FROM `{db}`.big ORDER BY id")
        return [(int(i), int(u), str(v)) for i, u, v in cursor.fetchall()]
