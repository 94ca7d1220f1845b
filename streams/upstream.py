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
# Types whose text value the model keeps as an int (BIT arrives as big-endian bytes).
_INT_TYPES = INTEGER_TYPES | {MySQLType.YEAR}


def quote(identifier: str) -> str:
    """A backtick-quoted identifier (spark_sink has the same; imports go the other way)."""
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
            try:
                rows, description = self._query(snapshot_read(change.schema, change.table, key, ts))
            except Exception as error:  # PyMySQL's errors, a lost connection
                self._conn = None
                raise LargeMessageError(
                    protocol, f"handle-key-only row of {where}: upstream read failed: {error}"
                ) from None
        if len(rows) != 1:
            raise LargeMessageError(
                protocol, f"handle-key-only row of {where}: {len(rows)} upstream rows by its key"
            )
        names = [d[0] for d in description]
        codes = [d[1] for d in description]
        key_types = {name: change.columns[name] for name in key if name in change.columns}
        return row_image(names, codes, rows[0], key_types)

    def _query(self, statements: list[Statement]) -> tuple[list[Any], Any]:
        conn = self._conn or self._connect()
        with conn.cursor() as cursor:
            try:
                for sql, args in statements:
                    cursor.execute(sql, args)
                return list(cursor.fetchall()), cursor.description
            finally:
                cursor.execute("SET @@tidb_snapshot = ''")

    def _connect(self) -> Any:
        import pymysql

        self._conn = pymysql.connect(
            host=self.address.host,
            port=self.address.port,
            user=self.address.user,
            password=self.address.password.get_secret_value(),
            charset="utf8mb4",
            init_command="SET time_zone = '+00:00'",
            autocommit=True,
            conv={},  # every value as text or bytes: the model's exact forms come from those
        )
        return self._conn
