"""`ticdc-sink verify`: compare downstream tables with the state a producer expected."""

from __future__ import annotations

import datetime as dt
import hashlib
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

from config.errors import NothingToCompareError
from config.settings import Settings
from spark_sink.db.connection import connect
from spark_sink.db.dialect import quote
from streams.codecs.values import b64decode

# Differing rows shown per table when a table does not match.
SHOW_DIFFERENCES = 5


def canonical(value: Any) -> str | None:
    """One text form for a value, whether it came from the producer or from the database."""
    if value is None:
        return None
    if isinstance(value, dict) and "base64" in value:
        value = b64decode(value["base64"])
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return str(value)


def _rows(rows: list[list[Any]]) -> list[tuple[str | None, ...]]:
    return sorted((tuple(canonical(v) for v in row) for row in rows), key=repr)


def checksum(rows: list[tuple[str | None, ...]]) -> str:
    return hashlib.sha256(orjson.dumps(rows)).hexdigest()[:16]


def verify(settings: Settings, expected_path: Path) -> tuple[bool, list[str]]:
    """(match, report lines): row count and checksum per table, and the first differences."""
    expected = orjson.loads(expected_path.read_bytes())
    if not expected:
        raise NothingToCompareError(f"{expected_path} expects no table: nothing to compare")
    report = []
    ok = True
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        for name, table in sorted(expected.items()):
            schema, _, table_name = name.partition(".")
            want = _rows(table["rows"])
            columns = ", ".join(quote(c) for c in table["columns"])
            try:
                cursor.execute(f"SELECT {columns} FROM {quote(schema)}.{quote(table_name)}")
                got = _rows([list(r) for r in cursor.fetchall()])
            except Exception as error:  # a missing table or column is a mismatch, not a crash
                ok = False
                report.append(f"{name}: cannot read downstream table: {error}")
                continue
            same = want == got
            ok &= same
            report.append(
                f"{name}: expected {len(want)} rows ({checksum(want)}), downstream {len(got)} rows "
                f"({checksum(got)}): {'match' if same else 'DIFFER'}"
            )
            if not same:
                missing = [r for r in want if r not in set(got)][:SHOW_DIFFERENCES]
                extra = [r for r in got if r not in set(want)][:SHOW_DIFFERENCES]
                report += [f"  missing downstream: {row}" for row in missing]
                report += [f"  unexpected downstream: {row}" for row in extra]
    return ok, report
