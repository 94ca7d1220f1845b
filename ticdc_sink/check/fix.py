"""``--fix-sql``: the statements that would make the downstream equal the upstream, by key
(REPLACE the upstream's row, DELETE a row the upstream has not), written for a person to read
and run; a check never runs them."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from pymysql.converters import escape_item

from spark_sink.db.dialect import quote


def literal(value: Any) -> str:
    """A value as SQL text (a SET read as a Python set is its comma list; a TIME below zero
    keeps its sign on the whole, where PyMySQL's own writes -1 day + 22 h as -2 h)."""
    if isinstance(value, set | frozenset):
        value = ",".join(sorted(value))
    if isinstance(value, dt.timedelta):
        return f"'{time_text(value)}'"
    return str(escape_item(value, "utf8mb4"))


def time_text(value: dt.timedelta) -> str:
    """A TIME value as MySQL writes it: ``-01:02:03.250000``."""
    whole = abs(value)
    seconds = whole.days * 86400 + whole.seconds
    text = f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    if whole.microseconds:
        text += f".{whole.microseconds:06d}"
    return ("-" if value < dt.timedelta(0) else "") + text


class FixSql:
    """The fix file, written as differences are found (threads share it)."""

    def __init__(self, path: Path, header: str) -> None:
        self.path = path
        self.statements = 0
        self._file: TextIO = path.open("w", encoding="utf-8")
        self._lock = threading.Lock()
        # TIMESTAMP values are written in UTC, as the check read them.
        self._write(
            f"-- {header}\n-- review before running; `ticdc-sink check` runs none.\n"
            "SET time_zone = '+00:00';\n"
        )

    def _write(self, text: str, statements: int = 0) -> None:
        with self._lock:
            self._file.write(text)
            self.statements += statements

    def replace(self, table: str, columns: Sequence[str], values: Sequence[Any]) -> None:
        self._write(
            f"REPLACE INTO {table} ({', '.join(quote(c) for c in columns)}) "
            f"VALUES ({', '.join(literal(v) for v in values)});\n",
            1,
        )

    def delete(self, table: str, keys: Sequence[str], values: Sequence[Any]) -> None:
        where = " AND ".join(
            f"{quote(k)} = {literal(v)}" for k, v in zip(keys, values, strict=False)
        )
        self._write(f"DELETE FROM {table} WHERE {where};\n", 1)

    def note(self, text: str) -> None:
        self._write(f"-- {text}\n")

    def close(self) -> None:
        self._file.close()
