"""Reading a handle-key-only row's full image from the upstream TiDB, as TiCDC's consumer does.

With ``large-message-handle-option=handle-key-only`` TiCDC sends only the key columns of a row
too large for Kafka. Its consumer reads the row back by a snapshot read: ``SET @@tidb_snapshot``
to the commit ts for the new image (the commit ts - 1 for the old one), then ``SELECT *`` by the
key. The statements and the image are pure functions; :class:`UpstreamReader` runs them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from config.errors import LargeMessageError
from config.settings import Downstream
from core.model import (
    FLOAT_TYPES,
    INTEGER_TYPES,
    ColumnFlag,
    ColumnType,
    MySQLType,
    Op,
    RowChange,
    Value,
    column_type,
)
from core.sql import quote
from streams.codecs.values import format_float

Statement = tuple[str, tuple[Value, ...]]
# Types whose text value the model keeps as an int (BIT arrives as big-endian bytes; ENUM and
# SET are read a second time as their numbers).
_INT_TYPES = INTEGER_TYPES | {MySQLType.YEAR, MySQLType.ENUM, MySQLType.SET}
# Read a second time as numbers (``column + 0``): ENUM and SET for their index and bits, FLOAT
# for its exact value (TiDB writes a FLOAT's text with 6 digits in exponent form: -1.17549e-38).
_NUMBERED = (MySQLType.ENUM, MySQLType.SET, MySQLType.FLOAT)
# MySQL's result-set column flags: ENUM and SET columns arrive typed as strings with these.
NOT_NULL_FLAG = 0x01
PRI_KEY_FLAG = 0x02
UNIQUE_KEY_FLAG = 0x04
MULTIPLE_KEY_FLAG = 0x08
UNSIGNED_FLAG = 0x20
ENUM_FLAG = 0x100
SET_FLAG = 0x800
# The ``binary`` character set: what TiDB (and TiCDC's binary flag) give numbers, dates, JSON
# and binary strings alike.
BINARY_CHARSET = 63
_WIRE_TO_TICDC = (
    (PRI_KEY_FLAG, ColumnFlag.PRIMARY_KEY),
    (UNIQUE_KEY_FLAG, ColumnFlag.UNIQUE_KEY),
    (MULTIPLE_KEY_FLAG, ColumnFlag.MULTIPLE_KEY),
    (UNSIGNED_FLAG, ColumnFlag.UNSIGNED),
)
# A lost or stale upstream connection is made again once before a read gives up.
READ_ATTEMPTS = 2


def _bound_name(identifier: str) -> str:
    # PyMySQL formats a statement with bound values by ``%``: a ``%`` in a name is doubled.
    return quote(identifier).replace("%", "%%")


def snapshot_read(schema: str, table: str, key: dict[str, Value], ts: int) -> list[Statement]:
    """The statements that read the row with ``key`` as of TSO ``ts``, values bound (LIMIT 2:
    more than one row by a key is an error to report, not to pick from)."""
    where = " AND ".join(f"{_bound_name(name)} = %s" for name in key)
    table_name = f"{_bound_name(schema)}.{_bound_name(table)}"
    return [
        ("SET @@tidb_snapshot = %s", (ts,)),
        (f"SELECT * FROM {table_name} WHERE {where} LIMIT 2", tuple(key.values())),
    ]


def wire_types(fields: Sequence[tuple[int, int, int]]) -> list[ColumnType]:
    """Each result column's model type and TiCDC flags from its wire (type code, flags, charset
    number), as TiCDC describes the same column: ENUM and SET arrive as strings marked by a
    flag, VARCHAR and VARBINARY as VAR_STRING (TiCDC says VARCHAR); the binary flag is the
    binary character set's, so numbers, dates and JSON carry it too."""
    kinds: list[ColumnType] = []
    for code, wire, charset in fields:
        if wire & ENUM_FLAG:
            code = MySQLType.ENUM
        elif wire & SET_FLAG:
            code = MySQLType.SET
        elif code == MySQLType.VAR_STRING:
            code = MySQLType.VARCHAR
        flags = 0 if wire & NOT_NULL_FLAG else int(ColumnFlag.NULLABLE)
        if charset == BINARY_CHARSET:
            flags |= ColumnFlag.BINARY
        for bit, flag in _WIRE_TO_TICDC:
            if wire & bit:
                flags |= flag
        kinds.append(column_type(code, flags))
    return kinds


def number_read(
    schema: str, table: str, columns: Sequence[str], key: dict[str, Value]
) -> Statement:
    """The statement reading ENUM, SET and FLOAT ``columns`` as numbers, within the same
    snapshot: TiCDC sends an ENUM's index and a SET's bits, and a FLOAT as its single-precision
    value (read here exactly, widened to a double)."""
    numbers = ", ".join(f"{_bound_name(name)} + 0" for name in columns)
    where = " AND ".join(f"{_bound_name(name)} = %s" for name in key)
    table_name = f"{_bound_name(schema)}.{_bound_name(table)}"
    return f"SELECT {numbers} FROM {table_name} WHERE {where}", tuple(key.values())


def row_image(
    names: Sequence[str],
    kinds: Sequence[ColumnType],
    values: Sequence[Any],
    key_types: dict[str, ColumnType],
) -> tuple[dict[str, ColumnType], dict[str, Value]]:
    """The column types and image of a row read as text (PyMySQL without converters: ``str``
    for text, ``bytes`` for binary); key columns keep the types the message gave them."""
    columns: dict[str, ColumnType] = {}
    image: dict[str, Value] = {}
    for name, kind, raw in zip(names, kinds, values, strict=True):
        value: Value = raw
        code = kind.mysql_type
        if raw is not None:
            if code in _INT_TYPES:
                value = int(raw)
            elif code == MySQLType.FLOAT:
                # The shortest decimal of the single-precision value, as TiCDC writes it.
                value = float(format_float(float(raw), single=True))
            elif code in FLOAT_TYPES:
                value = float(raw)
            elif code == MySQLType.BIT:
                value = int.from_bytes(raw, "big")
        columns[name] = key_types.get(name) or kind
        image[name] = value
    return columns, image


class UpstreamReader:
    """Reads rows from the upstream TiDB over one PyMySQL connection (made on first use)."""

    def __init__(self, address: Downstream) -> None:
        self.address = address
        self._conn: Any = None
        self._lock = threading.Lock()

    def whole(self, change: RowChange, protocol: str) -> RowChange:
        """``change`` with its full images read upstream; a row not there (gone past TiDB's GC
        safe point, say) raises :class:`LargeMessageError`."""
        columns: dict[str, ColumnType] = {}
        new = old = None
        if change.new is not None:
            columns, new = self._read(change, change.new, change.commit_ts, protocol)
        if change.old is not None and change.op is not Op.INSERT:
            columns, old = self._read(change, change.old, change.commit_ts - 1, protocol)
        return replace(change, columns=columns, new=new, old=old, handle_key_only=False)

    def _read(
        self, change: RowChange, key: dict[str, Value], ts: int, protocol: str
    ) -> tuple[dict[str, ColumnType], dict[str, Value]]:
        where = f"{change.schema}.{change.table} at ts {ts}"
        if not key:
            # A table without a primary or not-null unique key (replicated by force-replicate):
            # TiCDC sends no column at all, and there is nothing to select the row by.
            raise LargeMessageError(
                protocol, f"handle-key-only row of {where}: the table has no handle-key column"
            )
        with self._lock:
            for attempt in range(1, READ_ATTEMPTS + 1):
                try:
                    rows, names, kinds = self._query(change.schema, change.table, key, ts)
                    break
                except Exception as error:  # PyMySQL's errors, a lost connection
                    self._conn = None
                    if attempt == READ_ATTEMPTS:
                        raise LargeMessageError(
                            protocol,
                            f"handle-key-only row of {where}: upstream read failed: {error}",
                        ) from None
        if len(rows) != 1:
            raise LargeMessageError(
                protocol, f"handle-key-only row of {where}: {len(rows)} upstream rows by its key"
            )
        key_types = {name: change.columns[name] for name in key if name in change.columns}
        return row_image(names, kinds, rows[0], key_types)

    def _query(
        self, schema: str, table: str, key: dict[str, Value], ts: int
    ) -> tuple[list[list[Any]], list[str], list[ColumnType]]:
        """The rows by ``key`` as of ``ts``, their column names and model types."""
        conn = self._conn or self._connect()
        with conn.cursor() as cursor:
            try:
                for sql, args in snapshot_read(schema, table, key, ts):
                    cursor.execute(sql, args)
                rows = [list(row) for row in cursor.fetchall()]
                # PyMySQL keeps the columns' flags only on its result's fields.
                fields = cursor._result.fields
                names = [field.name for field in fields]
                kinds = wire_types([(f.type_code, f.flags, f.charsetnr) for f in fields])
                numbered = [i for i, kind in enumerate(kinds) if kind.mysql_type in _NUMBERED]
                if rows and numbered:
                    cursor.execute(*number_read(schema, table, [names[i] for i in numbered], key))
                    for i, number in zip(numbered, cursor.fetchone(), strict=True):
                        rows[0][i] = number
                return rows, names, kinds
            finally:
                cursor.execute("SET @@tidb_snapshot = ''")

    def _connect(self) -> Any:
        import pymysql
        import pymysql.converters

        self._conn = pymysql.connect(
            host=self.address.host,
            port=self.address.port,
            user=self.address.user,
            password=self.address.password.get_secret_value(),
            charset="utf8mb4",
            init_command="SET time_zone = '+00:00'",
            autocommit=True,
            # Values as the server sends them (text, or bytes for binary columns): the model's
            # exact forms are made from those; parameters are still encoded as usual.
            conv={
                t: f for t, f in pymysql.converters.conversions.items() if not isinstance(t, int)
            },
        )
        return self._conn
