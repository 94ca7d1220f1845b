"""What the sink reads of a downstream table: its columns (and the staging type of each), and the
facts that decide whether rows may replace its rows in place; and how a table is named in SQL."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spark_sink.db.dialect import quote

# Characters of a long string column that a staging index covers (utf8mb4 keys max 3072 bytes).
INDEX_PREFIX = 191
# Table names per information_schema query of several tables (MariaDB and MySQL open only the
# tables an IN list names, though MariaDB lists the schema's directory for a list of more than one).
NAMES_PER_QUERY = 1_000
# Staging columns for BIT, ENUM and SET hold the number: MySQL casts a number into them by value,
# but a string by its bytes or its name.
_NUMERIC_STAGING = ("bit", "enum", "set")


def table_name(schema: str, table: str) -> str:
    return f"{quote(schema)}.{quote(table)}"


@dataclass(frozen=True)
class Column:
    name: str
    column_type: str  # information_schema COLUMN_TYPE, e.g. "bigint(20) unsigned"
    data_type: str
    generated: bool
    # information_schema COLUMN_KEY: PRI for every primary key column; else UNI or MUL for the
    # first column of another index (of a unique one too); else empty.
    key: str = ""

    @property
    def binary(self) -> bool:
        return self.data_type in {
            "binary",
            "varbinary",
            "tinyblob",
            "blob",
            "mediumblob",
            "longblob",
        }

    def index_part(self) -> str:
        """The column as an index part: long strings and blobs need a prefix length."""
        if self.data_type in {"tinytext", "text", "mediumtext", "longtext", "json"} or (
            self.data_type.endswith("blob")
        ):
            return f"{quote(self.name)}({INDEX_PREFIX})"
        if self.data_type in {"char", "varchar", "binary", "varbinary"}:
            declared = int(self.column_type.split("(", 1)[1].split(")", 1)[0])
            if declared > INDEX_PREFIX:
                return f"{quote(self.name)}({INDEX_PREFIX})"
        return quote(self.name)

    @property
    def by_number(self) -> bool:
        """BIT, ENUM and SET: set from a number, by value (text would be bytes or a name)."""
        return self.data_type in _NUMERIC_STAGING

    @property
    def staging_type(self) -> str:
        if self.by_number:
            return "bigint unsigned"
        if self.data_type in {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}:
            return f"{self.column_type} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        return self.column_type


def table_columns(cursor: Any, schema: str, table: str) -> list[Column]:
    """The downstream table's columns in order; empty when the table does not exist."""
    cursor.execute(
        "SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, EXTRA, COLUMN_KEY "
        "FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (schema, table),
    )
    return [_column(*row) for row in cursor.fetchall()]


def _column(name: str, column_type: str, data_type: str, extra: str | None, key: str) -> Column:
    generated = "GENERATED" in (extra or "").upper()
    return Column(name, column_type, data_type.lower(), generated, key or "")


def _named(tables: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``tables`` in runs of :data:`NAMES_PER_QUERY`, each with its IN list's placeholders."""
    runs = []
    for start in range(0, len(tables), NAMES_PER_QUERY):
        run = list(tables[start : start + NAMES_PER_QUERY])
        runs.append((", ".join(["%s"] * len(run)), run))
    return runs


def schema_tables(cursor: Any, schema: str) -> int:
    """How many tables ``schema`` holds (MariaDB lists its directory, opening none)."""
    cursor.execute(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (schema,)
    )
    return int(cursor.fetchone()[0])


def schema_columns(cursor: Any, schema: str) -> dict[str, list[Column]]:
    """:func:`table_columns` of every table of ``schema``, in one query: MariaDB scans the
    schema's directory once and reads each table's definition (~15 us a table), where an IN
    list of more than one name costs a scan of the directory a query."""
    found: dict[str, list[Column]] = {}
    _columns_by_table(cursor, "TABLE_SCHEMA = %s", (schema,), found)
    return found


def tables_columns(cursor: Any, schema: str, tables: Sequence[str]) -> dict[str, list[Column]]:
    """:func:`table_columns` of each of ``tables`` that exists, a query per
    :data:`NAMES_PER_QUERY` tables instead of one a table."""
    found: dict[str, list[Column]] = {}
    for marks, names in _named(tables):
        condition = f"TABLE_SCHEMA = %s AND TABLE_NAME IN ({marks})"
        _columns_by_table(cursor, condition, (schema, *names), found)
    # information_schema may compare names without case: only a table's own name is its.
    asked = set(tables)
    return {table: columns for table, columns in found.items() if table in asked}


def _columns_by_table(
    cursor: Any, condition: str, args: Sequence[Any], found: dict[str, list[Column]]
) -> None:
    """Add to ``found`` the columns information_schema lists where ``condition`` holds, each
    table's in order."""
    cursor.execute(
        "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, EXTRA, COLUMN_KEY "
        f"FROM information_schema.COLUMNS WHERE {condition} "
        "ORDER BY TABLE_NAME, ORDINAL_POSITION",
        args,
    )
    for table, *column in cursor.fetchall():
        found.setdefault(table, []).append(_column(*column))


@dataclass(frozen=True)
class TableFacts:
    """What decides whether rows may replace a downstream table's rows in place."""

    # The column sets of the primary key and every unique key.
    unique_keys: frozenset[frozenset[str]]
    # Another table's foreign key references this one (a replace would fire its ON DELETE).
    referenced: bool
    # The table has triggers (a replace fires DELETE and INSERT ones, not UPDATE ones).
    triggers: bool


def referenced_tables(cursor: Any, schema: str) -> frozenset[str]:
    """The tables of ``schema`` another table's foreign key references, their names lowered.
    One query a schema, not one a table: MariaDB answers a filter on the referenced table by
    opening every table on the server (seconds with thousands of tables), so a query per table
    is quadratic in tables."""
    cursor.execute(
        "SELECT DISTINCT REFERENCED_TABLE_NAME FROM information_schema.KEY_COLUMN_USAGE "
        "WHERE REFERENCED_TABLE_SCHEMA = %s",
        (schema,),
    )
    # Lowered: information_schema compares names without case, as the query per table did.
    return frozenset(name.lower() for (name,) in cursor.fetchall() if name is not None)


def table_facts(
    cursor: Any, schema: str, table: str, referenced: frozenset[str] | None = None
) -> TableFacts:
    """The downstream table's unique keys, and whether foreign keys or triggers involve it
    (``referenced``: :func:`referenced_tables` of ``schema``, read here when not given)."""
    cursor.execute(
        "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0",
        (schema, table),
    )
    keys: dict[str, set[str]] = {}
    for index, column in cursor.fetchall():
        keys.setdefault(index, set()).add(column)
    if referenced is None:
        referenced = referenced_tables(cursor, schema)
    cursor.execute(
        "SELECT COUNT(*) FROM information_schema.TRIGGERS "
        "WHERE EVENT_OBJECT_SCHEMA = %s AND EVENT_OBJECT_TABLE = %s",
        (schema, table),
    )
    (triggers,) = cursor.fetchone()
    return TableFacts(_unique_keys(keys), table.lower() in referenced, int(triggers) > 0)


def _unique_keys(keys: dict[str, set[str]]) -> frozenset[frozenset[str]]:
    return frozenset(frozenset(columns) for columns in keys.values())


def triggered_tables(cursor: Any, schema: str) -> frozenset[str]:
    """The tables of ``schema`` with triggers, their names lowered (one query a schema, as
    :func:`referenced_tables`)."""
    cursor.execute(
        "SELECT DISTINCT EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS "
        "WHERE EVENT_OBJECT_SCHEMA = %s",
        (schema,),
    )
    # Lowered: information_schema compares names without case, as the query per table did.
    return frozenset(name.lower() for (name,) in cursor.fetchall())


def tables_facts(
    cursor: Any,
    schema: str,
    layouts: dict[str, list[Column]],
    referenced: frozenset[str],
    triggered: frozenset[str],
) -> dict[str, TableFacts]:
    """:func:`table_facts` of the tables of ``layouts`` (their columns, as
    :func:`tables_columns` reads them), from ``referenced`` and ``triggered`` (the schema's
    :func:`referenced_tables` and :func:`triggered_tables`). A table whose columns' keys name
    no index but its primary key needs no query: its unique keys are that key (a unique index
    led by a primary key column shows as PRI, so such a key can be missed, never invented: its
    rows then go through the staging table). The others' unique keys are read a query per
    :data:`NAMES_PER_QUERY` tables."""
    keys: dict[str, dict[str, set[str]]] = {}
    indexed = []
    for table, columns in layouts.items():
        if any(c.key not in {"PRI", ""} for c in columns):
            indexed.append(table)
        primary = {c.name for c in columns if c.key == "PRI"}
        keys[table] = {"PRIMARY": primary} if primary else {}
    for marks, names in _named(indexed):
        cursor.execute(
            "SELECT TABLE_NAME, INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
            f"WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN ({marks}) AND NON_UNIQUE = 0",
            (schema, *names),
        )
        found: dict[str, dict[str, set[str]]] = {}
        for table, index, column in cursor.fetchall():
            found.setdefault(table, {}).setdefault(index, set()).add(column)
        keys.update({table: found.get(table, {}) for table in names})
    return {
        table: TableFacts(
            _unique_keys(keys[table]), table.lower() in referenced, table.lower() in triggered
        )
        for table in layouts
    }
