"""Replication checked against the truth: a SQL workload run directly in the downstream server,
then every table of a replicated database compared with it row by row, as multisets.

Values are compared in one text form per type, so that equal values read equal whichever way
they were written: binary as ``HEX()``, BIT as a number, DECIMAL, dates, times, ENUM and SET as
text, FLOAT widened to DOUBLE, JSON parsed and written back with sorted keys.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config.errors import NothingToCompareError
from config.settings import Settings
from spark_sink.db.connection import connect
from spark_sink.db.dialect import Server, quote, server_dialect

# The database name placeholder of a workload file.
DB_PLACEHOLDER = "{DB}"
# Differing rows shown per table when a table does not match.
SHOW_DIFFERENCES = 5
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_AS_TEXT = {"decimal", "date", "datetime", "timestamp", "time", "enum", "set"}

Row = tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class WorkloadStep:
    """A DDL statement, or the statements of one DML transaction."""

    kind: str
    statements: tuple[str, ...]


def read_workload(path: Path) -> Iterator[WorkloadStep]:
    """The steps of a workload file: JSON lines ``{"kind": "ddl", "sql": "..."}`` or
    ``{"kind": "dml", "sql": ["...", ...]}`` (one transaction), optionally gzipped."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                step = json.loads(line)
                sql = step["sql"]
                yield WorkloadStep(step["kind"], (sql,) if isinstance(sql, str) else tuple(sql))


def run_workload(settings: Settings, path: Path, database: str) -> int:
    """Run the workload at ``path`` with ``{DB}`` as ``database`` (also within a longer name:
    ``{DB}_b``), in UTC: each DDL on its own,
    each DML list as one transaction. Returns the transactions run."""
    placeholder = quote(DB_PLACEHOLDER)
    name = quote(database)
    transactions = 0
    with connect(settings) as conn, conn.cursor() as cursor:
        for step in read_workload(path):
            for statement in step.statements:
                # ``{DB}`` inside a longer quoted name (``{DB}_b``) is the name's inside.
                quoted = statement.replace(placeholder, name)
                cursor.execute(quoted.replace(DB_PLACEHOLDER, database.replace("`", "``")))
            conn.commit()
            transactions += step.kind == "dml"
    return transactions


@dataclass
class TableRows:
    """A table's rows in their compared form, as a multiset."""

    columns: tuple[str, ...]
    rows: Counter[Row] = field(default_factory=Counter)


def json_columns_of(cursor: Any, schema: str, table: str) -> set[str]:
    """MariaDB's JSON is LONGTEXT with a ``json_valid`` check: the columns that have one. TiDB's
    and MySQL's JSON columns say ``json`` as their data type (and their ``CHECK_CONSTRAINTS``
    has no table name)."""
    if server_dialect(cursor).server is not Server.MARIADB:
        return set()
    cursor.execute(
        "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
        "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s",
        (schema, table),
    )
    found = set()
    for (clause,) in cursor.fetchall():
        text = str(clause)
        if text.lower().startswith("json_valid(`"):
            found.add(text[len("json_valid(`") :].rsplit("`", 1)[0].replace("``", "`"))
    return found


def compared_expression(name: str, data_type: str) -> str:
    column = quote(name)
    if data_type in _BINARY:
        return f"HEX({column})"
    if data_type == "bit":
        return f"CAST({column} AS UNSIGNED)"
    if data_type == "float":
        return f"CAST({column} AS DOUBLE)"
    if data_type in _AS_TEXT:
        return f"CAST({column} AS CHAR)"
    return column


def compared_text(value: Any, is_json: bool) -> str | None:
    if value is None:
        return None
    if is_json:
        return json.dumps(json.loads(value), sort_keys=True, ensure_ascii=False)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def read_tables(
    cursor: Any, schema: str, ignore_columns: Mapping[str, set[str]] | None = None
) -> dict[str, TableRows]:
    """Every base table of ``schema`` in its compared form (``ignore_columns``: per table,
    columns left out)."""
    cursor.execute(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
        "AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME",
        (schema,),
    )
    tables = [name for (name,) in cursor.fetchall()]
    out = {}
    for table in tables:
        skipped = (ignore_columns or {}).get(table, set())
        cursor.execute(
            "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        columns = [(n, t.lower()) for n, t in cursor.fetchall() if n not in skipped]
        json_columns = json_columns_of(cursor, schema, table)
        select = ", ".join(compared_expression(n, t) for n, t in columns)
        cursor.execute(f"SELECT {select} FROM {quote(schema)}.{quote(table)}")
        flags = [n in json_columns or t == "json" for n, t in columns]
        rows: Counter[Row] = Counter(
            tuple(compared_text(v, j) for v, j in zip(row, flags, strict=True))
            for row in cursor.fetchall()
        )
        out[table] = TableRows(tuple(n for n, _ in columns), rows)
    return out


def differences(expected: dict[str, TableRows], actual: dict[str, TableRows]) -> list[str]:
    """Report lines for every table that differs (empty when all match)."""
    report = []
    for table in sorted(expected.keys() | actual.keys()):
        want, got = expected.get(table), actual.get(table)
        if want is None or got is None:
            report.append(f"{table}: only in the {'replica' if want is None else 'truth'}")
            continue
        if want.columns != got.columns:
            report.append(f"{table}: columns differ: truth {want.columns}, replica {got.columns}")
            continue
        if want.rows == got.rows:
            continue
        missing, extra = want.rows - got.rows, got.rows - want.rows
        report.append(
            f"{table}: truth {want.rows.total()} rows, replica {got.rows.total()}: "
            f"{missing.total()} missing, {extra.total()} unexpected"
        )
        shown = [f"  missing x{n}: {row}" for row, n in missing.most_common(SHOW_DIFFERENCES)]
        shown += [f"  unexpected x{n}: {row}" for row, n in extra.most_common(SHOW_DIFFERENCES)]
        report += shown
    return report


def compare_databases(
    settings: Settings,
    truth: str,
    replica: str,
    ignore_columns: Mapping[str, set[str]] | None = None,
) -> list[str]:
    """Differences between every table of database ``truth`` and of ``replica`` (empty: equal).
    Raises :class:`NothingToCompareError` when the comparison could not fail: the two are one
    database, one is missing, or the truth holds no table."""
    if truth == replica:
        raise NothingToCompareError(
            f"--db and --truth-db both name {truth!r}: a database always matches itself"
        )
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        missing = [name for name in (replica, truth) if not _exists(cursor, name)]
        if missing:
            raise NothingToCompareError(
                f"no database {', '.join(map(repr, missing))} on the downstream "
                f"{settings.downstream.url} (TICDC_SINK_DOWNSTREAM)"
            )
        expected = read_tables(cursor, truth, ignore_columns)
        if not expected:
            raise NothingToCompareError(
                f"the truth database {truth!r} holds no table: nothing to compare the replica with"
            )
        return differences(expected, read_tables(cursor, replica, ignore_columns))


def _exists(cursor: Any, database: str) -> bool:
    cursor.execute("SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (database,))
    return cursor.fetchone() is not None
