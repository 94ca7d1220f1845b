"""Rows the downstream refuses: found one by one after a batch failed, described in one line,
and taken out of the batch's plans when the operator dead-letters them.

A batch that fails on a row fails whole, and the server's error says neither which row nor, often,
which table. So the batch's rows are tried again, bisected down to the refused ones, inside a
transaction that is rolled back: first as the staging load writes them (a NaN or out-of-range
FLOAT, an invalid date: what the load refuses), then, for a table whose staging table took every
row, against the table itself after the batch's deletes of it, as the merge writes them. Only the
table has what the staging table lacks: CHECK constraints, foreign keys, triggers, its unique
keys and the lengths of its indexes.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson
import pymysql

from config.errors import ApplyError, RowRefusedError
from core.model import Value
from spark_sink.db.connection import SinkConnection
from spark_sink.db.dialect import ANY_SERVER, Dialect, bindable, quote
from spark_sink.db.tables import Column
from spark_sink.load.staged import DELETE_FLAG, StagedTable
from spark_sink.load.staging_tables import StagingTables
from spark_sink.plan import Key, TablePlan

# Key values a probe's DELETE binds at once (the merge's chunking keeps statements small too).
_DELETE_CHUNK = 1_000
# The column a MySQL or MariaDB value error names: ... for column `db`.`t`.`c` at row 1,
# ... for column 'c' at row 1.
_COLUMN = re.compile(r"column (?:`(?:[^`]|``)*`\.)*[`']((?:[^`']|``)+)[`'] at row")


@dataclass(frozen=True, slots=True)
class RefusedRow:
    """One row the downstream refuses, and why."""

    schema: str
    table: str
    key: dict[str, Value]
    column: str | None
    commit_ts: int
    error: str
    image: dict[str, Value]
    # The downstream table (quoted), and its row for the key when the row was refused
    # (:func:`downstream_image`; None: a table without a key, nothing recorded).
    target: str = ""
    before: str | None = None

    def describe(self) -> str:
        key = ", ".join(f"{name}={value!r}" for name, value in self.key.items())
        return (
            f"the downstream refuses a row of {self.schema}.{self.table} (key {key}; column "
            f"{self.column or 'unknown'}; commit ts {self.commit_ts}): {self.error}"
        )

    def dead_letter(self) -> dict[str, str]:
        """The fields of its dead letter (``core/staging/dead_letters.py``, a row letter)."""
        fields = {
            "kind": "row",
            "table": f"{self.schema}.{self.table}",
            "key": orjson.dumps(self.key, default=jsonable).decode(),
            "column": self.column or "",
            "commit_ts": str(self.commit_ts),
            "error": self.error,
            "row": orjson.dumps(self.image, default=jsonable).decode(),
            "target": self.target,
        }
        if self.before is not None:
            fields["before"] = self.before
        return fields


def jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, Decimal | dt.timedelta):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def from_json(value: Any) -> Any:
    """A value of a row letter's JSON as it is bound again (``{"hex": ...}``: bytes)."""
    if isinstance(value, dict) and set(value) == {"hex"}:
        return bytes.fromhex(value["hex"])
    return value


def downstream_image(cursor: Any, target: str, key: dict[str, Value], *, lock: bool = False) -> str:
    """The downstream's row of ``target`` for ``key`` as JSON text (``null``: no row), in one
    form whoever reads it, so that two reads compare as text; ``lock``: FOR UPDATE."""
    where = " AND ".join(f"{quote(name)} <=> %s" for name in key)
    cursor.execute(
        f"SELECT * FROM {target} WHERE {where} LIMIT 1" + (" FOR UPDATE" if lock else ""),
        [from_json(value) for value in key.values()],
    )
    found = cursor.fetchone()
    if found is None:
        return "null"
    names = [column[0] for column in cursor.description]
    image = dict(zip(names, found, strict=True))
    return orjson.dumps(image, default=jsonable, option=orjson.OPT_SORT_KEYS).decode()


def refused_error(rows: Sequence[RefusedRow]) -> RowRefusedError:
    """The one error that stops the sink on ``rows``, naming the first."""
    more = f" (and {len(rows) - 1} more rows of this batch)" if len(rows) > 1 else ""
    return RowRefusedError(rows[0].describe() + more, rows)


def column_of(error: str) -> str | None:
    """The column a server error names, if it names one."""
    found = _COLUMN.search(error)
    return found.group(1).replace("``", "`") if found else None


def _bound(value: Value) -> Any:
    """A value bound as the staging load sends it: a float as text that the server parses (so
    NaN is refused as the load refused it, not turned into a syntax error), the rest as is."""
    return repr(value) if isinstance(value, float) else value


def refused_rows(cursor: Any, dialect: Dialect, staged: Sequence[StagedTable]) -> list[RefusedRow]:
    """Every row of the ``staged`` tables that their staging tables, or else their targets,
    refuse (nothing stays)."""
    refused = []
    for item in staged:
        found = find_refused(
            cursor, dialect, item.plan, item.stage, item.columns, item.target, {DELETE_FLAG: 0}
        )
        refused += found or find_refused_by_target(cursor, dialect, item)
    cursor.connection.rollback()  # the reads above leave no snapshot to the batch's transaction
    return refused


def find_refused_by_target(cursor: Any, dialect: Dialect, item: StagedTable) -> list[RefusedRow]:
    """Each upsert of ``item`` that its target refuses once the batch's deletes of it ran: each
    row upserted as the merge would, bisected, inside a transaction that is rolled back."""
    plan = item.plan
    wanted = set(plan.columns)
    names = [c.name for c in item.columns if c.name in wanted]
    updates = ", ".join(f"{quote(n)} = {dialect.inserted(n)}" for n in names)
    sql = dialect.upsert_values(item.target, names, updates)
    keys = [k for k in plan.key_columns if k in set(names)]
    rows = [
        _Probe(key, image, [_bound(image.get(n)) for n in names])
        for key, image in plan.upserts.items()
    ]
    found: list[tuple[_Probe, str]] = []
    for statement in dialect.strict_session():
        cursor.execute(statement)
    try:
        if item.keyed and plan.deletes:
            # A row the batch deletes may hold a unique value one of its upserts takes over.
            deleted = [list(key) for key in plan.deletes]
            for start in range(0, len(deleted), _DELETE_CHUNK):
                chunk = deleted[start : start + _DELETE_CHUNK]
                statement = dialect.delete_by_key(item.target, plan.key_columns, len(chunk))
                cursor.execute(statement, [value for key in chunk for value in key])
        _bisect(cursor, sql, rows, found)
    finally:
        cursor.connection.rollback()
        cursor.execute(dialect.restore_session())
    return [_refused(cursor, plan, item.target, keys, row, message) for row, message in found]


def find_refused(
    cursor: Any,
    dialect: Dialect,
    plan: TablePlan,
    stage: str,
    columns: Sequence[Column],
    target: str,
    fixed: dict[str, Value],
) -> list[RefusedRow]:
    """Each row of ``plan`` that its staging table ``stage`` (typed like ``target``; ``fixed``:
    its own columns' values) refuses, inside a transaction that is rolled back (nothing stays).
    All rows are tried at once, then halves of a refused set, down to single rows: a few
    statements per refused row. The server's error names ``target`` where it named ``stage``."""
    names = [c.name for c in columns]
    quoted = ", ".join(quote(n) for n in [*names, *fixed])
    marks = ", ".join(["%s"] * (len(names) + len(fixed)))
    sql = bindable(f"INSERT INTO {stage} ({quoted})") + f" VALUES ({marks})"
    keys = [k for k in plan.key_columns if k in set(names)]
    images: list[tuple[Key, dict[str, Value]]] = list(plan.upserts.items())
    if not plan.has_key:
        images += plan.deletes.items()
    rows = [
        _Probe(key, image, [*(_bound(image.get(n)) for n in names), *fixed.values()])
        for key, image in images
    ]
    found: list[tuple[_Probe, str]] = []
    # Strict for the probe: a server that would only warn and clip refuses here, as the load
    # (which checks warnings) refused the batch.
    for statement in dialect.strict_session():
        cursor.execute(statement)
    try:
        _bisect(cursor, sql, rows, found)
    finally:
        cursor.connection.rollback()
        cursor.execute(dialect.restore_session())
    refused = [
        _refused(cursor, plan, target, keys, row, message.replace(stage, target))
        for row, message in found
    ]
    cursor.connection.rollback()  # the reads above leave no snapshot to the batch's transaction
    return refused


def _refused(
    cursor: Any, plan: TablePlan, target: str, keys: list[str], row: _Probe, message: str
) -> RefusedRow:
    """The refused row ``row`` of ``plan``, with the server's ``message``."""
    key = {name: row.image.get(name) for name in keys}
    return RefusedRow(
        plan.schema,
        plan.table,
        key,
        column_of(message),
        plan.commit_ts.get(row.key, 0),
        message,
        row.image,
        target,
        # What a replay of its dead letter must still find there (the batch, applied without
        # this row, has no other change of the key).
        downstream_image(cursor, target, key) if plan.has_key and key else None,
    )


@dataclass(frozen=True, slots=True)
class _Probe:
    key: Key
    image: dict[str, Value]
    params: list[Any]


def _bisect(cursor: Any, sql: str, rows: list[_Probe], found: list[tuple[_Probe, str]]) -> None:
    """Insert ``rows``; if refused, undo and try each half, down to the single refused rows
    (each added to ``found`` with the server's error)."""
    if not rows:
        return
    cursor.execute("SAVEPOINT tcs_probe")
    try:
        cursor.executemany(sql, [row.params for row in rows])
        return
    except pymysql.MySQLError as error:
        if ANY_SERVER.is_transient(error) or len(error.args) < 2:
            raise
        message = f"{error.args[0]} {error.args[1]}"
    cursor.execute("ROLLBACK TO SAVEPOINT tcs_probe")
    if len(rows) == 1:
        found.append((rows[0], message))
        return
    middle = len(rows) // 2
    _bisect(cursor, sql, rows[:middle], found)
    _bisect(cursor, sql, rows[middle:], found)


def without_refused(plans: Sequence[TablePlan], rows: Sequence[RefusedRow]) -> None:
    """Take ``rows`` out of ``plans`` (each refused image, with all its copies)."""
    by_table: dict[tuple[str, str], list[RefusedRow]] = {}
    for row in rows:
        by_table.setdefault((row.schema, row.table), []).append(row)
    for plan in plans:
        for row in by_table.get((plan.schema, plan.table), []):
            key = tuple(row.image.get(name) for name in plan.key_columns)
            plan.upserts.pop(key, None)
            if plan.keyless:
                plan.deletes.pop(key, None)
                plan.copies.pop(key, None)


def refused_in(
    connection: SinkConnection, tables: StagingTables, plans: Sequence[TablePlan]
) -> list[RefusedRow]:
    """Every row of ``plans`` the downstream refuses, tried one by one over ``connection``
    against ``tables``' staging tables (nothing stays)."""
    conn = connection.open()
    dialect = connection.dialect
    with conn.cursor() as cursor:
        staged = []
        for plan in plans:
            try:
                item = tables.staged(cursor, dialect, plan)
            except ApplyError:
                continue  # a missing table fails the batch for another reason
            if item is not None:
                tables.make(item, cursor.execute)
                staged.append(item)
        refused = refused_rows(cursor, dialect, staged)
    # The tries wrote into the staging tables (rolled back, but known empty no more).
    tables.known_empty(conn).clear()
    return refused
