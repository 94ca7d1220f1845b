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
from streams.model import (
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

Statement = tuple[str, tuple[Value, ...]]
# Types whose text value the model keeps as an int (BIT arrives as big-endian bytes; ENUM and
# SET are read a second time as their numbers).
_INT_TYPES = INTEGER_TYPES | {MySQLType.YEAR, MySQLType.ENUM, MySQLType.SET}
_INDEXED = (MySQLType.ENUM, MySQLType.SET)
# MySQL's result-set column flags: ENUM and SET columns arrive typed as strings with these.
ENUM_FLAG = 0x100
SET_FLAG = 0x800
# A lost or stale upstream connection is made again once before a read gives up.
READ_ATTEMPTS = 2


def quote(identifier: str) -> str:
    """A backtick-quoted identifier: any name from the stream is safe inside SQL (the sink's
    statements, in spark_sink, quote with this one too)."""
    return "`" + identifier.replace("`", "``") + "`"


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


def wire_types(fields: Sequence[tuple[int, int]]) -> list[int]:
    """Each result column's model type from its wire (type code, flags): ENUM and SET arrive
    as strings marked by a flag."""
    return [
        MySQLType.ENUM if flags & ENUM_FLAG else MySQLType.SET if flags & SET_FLAG else code
        for code, flags in fields
    ]


def index_read(schema: str, table: str, columns: Sequence[str], key: dict[str, Value]) -> Statement:
    """The statement reading ENUM and SET ``columns`` as the numbers the model keeps (TiCDC
    sends an ENUM's index and a SET's bits), within the same snapshot."""
    numbers = ", ".join(f"{_bound_name(name)} + 0" for name in columns)
    where = " AND ".join(f"{_bound_name(name)} = %s" for name in key)
    table_name = f"{_bound_name(schema)}.{_bound_name(table)}"
    return f"SELECT {numbers} FROM {table_name} WHERE {where}", tuple(key.values())


def row_image(
    names: Sequence[str],
    type_codes: Sequence[int],
    values: Sequence[Any],
    key_types: dict[str, ColumnType],
) -> tuple[dict[str, ColumnType], dict[str, Value]]:
    """The column types and image of a row read as text (PyMySQL without converters: ``str``
    for text, ``bytes`` for binary); key columns keep the types the message gave them."""
    columns: dict[str, ColumnType] = {}
    image: dict[str, Value] = {}
    for name, code, raw in zip(names, type_codes, values, strict=True):
        value: Value = raw
        if raw is not None:
            if code in _INT_TYPES:
                value = int(raw)
            elif code in FLOAT_TYPES:
                value = float(raw)
            elif code == MySQLType.BIT:
                value = int.from_bytes(raw, "big")
        flags = ColumnFlag.BINARY if isinstance(raw, bytes) and code != MySQLType.BIT else 0
        columns[name] = key_types.get(name) or column_type(code, int(flags))
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
        with self._lock:
            for attempt in range(1, READ_ATTEMPTS + 1):
                try:
                    rows, names, codes = self._query(change.schema, change.table, key, ts)
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
        return row_image(names, codes, rows[0], key_types)

    def _query(
        self, schema: str, table: str, key: dict[str, Value], ts: int
    ) -> tuple[list[list[Any]], list[str], list[int]]:
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
                codes = wire_types([(field.type_code, field.flags) for field in fields])
                numbered = [i for i, code in enumerate(codes) if code in _INDEXED]
                if rows and numbered:
                    cursor.execute(*index_read(schema, table, [names[i] for i in numbered], key))
                    for i, number in zip(numbered, cursor.fetchone(), strict=True):
                        rows[0][i] = number
                return rows, names, codes
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
