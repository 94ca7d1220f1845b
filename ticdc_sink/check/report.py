"""What a check prints: per table what differs (the first rows, with their keys), then one
summary line; or all of it as one JSON document (``--json``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.tso import describe_tso, tso_time
from ticdc_sink.check.compare import Difference, TableResult


@dataclass(frozen=True)
class CheckReport:
    """A whole check: its tables' results, the checkpoint ts (or ts) read at, its time."""

    tables: list[TableResult]
    seconds: float
    checked_at: float

    @property
    def matched(self) -> bool:
        return all(t.matched for t in self.tables)

    @property
    def ts(self) -> int:
        """The checkpoint ts read at (the earliest, when threads' snapshots hold several)."""
        return min(t.ts for t in self.tables)

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)

    @property
    def differences(self) -> int:
        return sum(t.differences + (t.problem is not None) for t in self.tables)

    def summary(self) -> str:
        tables = self.tables
        chunks = sum(t.chunks for t in tables)
        drilled = sum(t.drilled for t in tables)
        rate = self.rows / self.seconds if self.seconds > 0 else 0.0
        several = sorted({t.ts for t in tables})
        at = describe_tso(self.ts) if len(several) == 1 else f"{several[0]} to {several[-1]}"
        verdict = (
            "match"
            if self.matched
            else f"DIFFER: {self.differences} differences in "
            f"{sum(not t.matched for t in tables)} of {len(tables)} tables"
        )
        return (
            f"check: {len(tables)} tables, {self.rows} rows in {chunks} chunks "
            f"({drilled} read row by row) at checkpoint ts {at}, in {self.seconds:.1f} s "
            f"({rate:,.0f} rows/s): {verdict}"
        )


def _row(texts: dict[str, str | None] | None) -> str:
    if texts is None:
        return ""
    return ", ".join(f"{name}={value!r}" for name, value in texts.items())


def difference_line(difference: Difference) -> str:
    key = f"key {_row(difference.key)}" if difference.key is not None else "row"
    if difference.upstream is not None and difference.downstream is not None:
        changes = ", ".join(
            f"{name}: upstream {difference.upstream[name]!r}, downstream "
            f"{difference.downstream[name]!r}"
            for name in difference.upstream
        )
        return f"  {key}: {difference.kind}: {changes}"
    side = difference.upstream if difference.upstream is not None else difference.downstream
    return f"  {key}: {difference.kind}: ({_row(side)})"


def text_lines(report: CheckReport) -> list[str]:
    lines = []
    for table in report.tables:
        if table.problem is not None:
            lines.append(f"{table.name}: {table.problem}")
            continue
        if table.matched:
            continue
        lines.append(
            f"{table.name}: {table.differences} rows differ (upstream {table.rows} rows, "
            f"downstream {table.downstream_rows})"
        )
        lines += [difference_line(d) for d in table.shown]
        if table.differences > len(table.shown):
            lines.append(f"  ... and {table.differences - len(table.shown)} more")
    lines.append(report.summary())
    return lines


def document(report: CheckReport, fix_statements: int | None) -> dict[str, Any]:
    """The report as JSON values."""
    return {
        "match": report.matched,
        "ts": report.ts,
        "ts_time": tso_time(report.ts),
        "checked_at": report.checked_at,
        "seconds": round(report.seconds, 3),
        "rows": report.rows,
        "differences": report.differences,
        "fix_statements": fix_statements,
        "tables": [
            {
                "table": t.name,
                "ts": t.ts,
                "match": t.matched,
                "rows": t.rows,
                "downstream_rows": t.downstream_rows,
                "chunks": t.chunks,
                "chunks_read_by_row": t.drilled,
                "differences": t.differences,
                "problem": t.problem,
                "first_differences": [
                    {
                        "kind": d.kind,
                        "key": d.key,
                        "upstream": d.upstream,
                        "downstream": d.downstream,
                    }
                    for d in t.shown
                ],
            }
            for t in report.tables
        ],
    }
