"""`ticdc-sink check`'s thin shell: sessions opened, tables compared on ``--threads`` threads
(one session each), the report printed and the result recorded; exit 0 only on a match."""

from __future__ import annotations

import queue
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from config.errors import NothingToCompareError
from config.settings import Settings
from ticdc_sink.check.compare import Options, RateLimit, TableResult, compare_table
from ticdc_sink.check.fix import FixSql
from ticdc_sink.check.metrics import write_metrics
from ticdc_sink.check.record import LastCheck, record
from ticdc_sink.check.report import CheckReport, document, text_lines
from ticdc_sink.check.snapshot import Session, open_sessions, upstream_settings
from ticdc_sink.check.tables import TablePair, replicated_tables
from ticdc_sink.exit_codes import EXIT_FAILURE

# Differing rows shown per table.
SHOW_DIFFERENCES = 5


@dataclass(frozen=True)
class CheckRequest:
    """What ``ticdc-sink check`` was asked (its arguments)."""

    upstream: str
    patterns: Sequence[str]
    chunk_rows: int
    threads: int
    rate_limit: int | None
    as_json: bool
    fix_sql: Path | None
    metrics_file: Path | None = None


def run_check(settings: Settings, request: CheckRequest) -> int:
    upstream = upstream_settings(settings, request.upstream)
    started = time.monotonic()
    checked_at = datetime.now(UTC)
    sessions = open_sessions(settings, upstream, request.threads)
    fix = None
    try:
        with sessions[0].upstream.cursor() as cursor:
            pairs = replicated_tables(cursor, settings, request.patterns)
        if not pairs:
            wanted = ",".join(request.patterns) or "any"
            raise NothingToCompareError(
                f"no upstream table matches --tables {wanted} (save skipped ones): "
                "nothing to compare"
            )
        if request.fix_sql is not None:
            fix = FixSql(
                request.fix_sql,
                f"ticdc-sink check of pipeline {settings.group!r} at checkpoint ts "
                f"{sessions[0].ts}",
            )
        options = Options(request.chunk_rows, SHOW_DIFFERENCES, RateLimit(request.rate_limit), fix)
        results = _compare_all(sessions, pairs, options)
    finally:
        for session in sessions:
            session.close()
        if fix is not None:
            fix.close()
    report = CheckReport(results, time.monotonic() - started, checked_at.timestamp())
    if request.as_json:
        statements = fix.statements if fix is not None else None
        print(orjson.dumps(document(report, statements)).decode())
    else:
        print("\n".join(text_lines(report)))
        if fix is not None:
            print(f"check: {fix.statements} statements to review in {fix.path} (not run)")
    last = LastCheck(
        checked_at,
        report.ts,
        report.matched,
        len(results),
        report.rows,
        report.differences,
        round(report.seconds, 3),
    )
    record(settings, last)
    if request.metrics_file is not None:
        write_metrics(request.metrics_file, settings.group, last)
    return 0 if report.matched else EXIT_FAILURE


def _compare_all(
    sessions: list[Session], pairs: list[TablePair], options: Options
) -> list[TableResult]:
    """Every table, each on the first free session."""
    free: queue.Queue[Session] = queue.Queue()
    for session in sessions:
        free.put(session)

    def compare(pair: TablePair) -> TableResult:
        session = free.get()
        try:
            return compare_table(session, pair, options)
        finally:
            free.put(session)

    if len(sessions) == 1:
        return [compare(pair) for pair in pairs]
    with ThreadPoolExecutor(len(sessions), thread_name_prefix="check") as pool:
        return list(pool.map(compare, pairs))
