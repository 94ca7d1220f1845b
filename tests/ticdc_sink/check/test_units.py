"""The check's pure parts: the GC safe point's line, key ranges' conditions, fix literals."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from ticdc_sink.check.chunks import KeyRange
from ticdc_sink.check.fix import literal
from ticdc_sink.check.snapshot import gc_problem

# 2024-04-11T01:31:12.265Z
TS = 1_712_799_072_265 << 18


def test_a_ts_before_the_safe_point_names_tidb_gc_life_time() -> None:
    line = gc_problem(TS, "20240411-01:31:13.000 +0000")
    assert line is not None
    assert line.startswith(f"the checkpoint ts {TS} (2024-04-11T01:31:12.265Z, ")
    assert "older than the upstream's GC safe point (2024-04-11T01:31:13.000Z)" in line
    assert "SET GLOBAL tidb_gc_life_time" in line


def test_a_ts_at_or_after_the_safe_point_or_none_recorded_is_readable() -> None:
    assert gc_problem(TS, "20240411-01:31:12.265 +0000") is None
    assert gc_problem(TS, "20240411-03:31:12.000 +0200") is None  # the same moment, later zone
    assert gc_problem(TS, None) is None
    assert gc_problem(TS, "not a time") is None


def test_key_ranges_bound_single_and_composite_keys() -> None:
    assert KeyRange(None, None).where(["id"]) == ("", [])
    assert KeyRange(None, (5,)).where(["id"]) == (" WHERE `id` <= %s", [5])
    assert KeyRange((1, "a"), (2, "b")).where(["a", "100%"]) == (
        " WHERE (`a`, `100%%`) > (%s, %s) AND (`a`, `100%%`) <= (%s, %s)",
        [1, "a", 2, "b"],
    )
    assert KeyRange((7,), (9,)).where([]) == ("", [])


def test_fix_literals_read_back_as_the_values() -> None:
    assert literal(None) == "NULL"
    assert literal("it's") == "'it\\'s'"
    assert literal(b"\x00\xff") == "_binary X'00ff'"
    assert literal(Decimal("1.50")) == "1.50"
    assert literal(dt.datetime(2024, 4, 11, 1, 2, 3, 4000)) == "'2024-04-11 01:02:03.004000'"
    assert literal({"b", "a"}) == "'a,b'"
    assert literal(-dt.timedelta(hours=1, minutes=2, seconds=3.25)) == "'-01:02:03.250000'"
    assert literal(dt.timedelta(hours=838)) == "'838:00:00'"


def test_the_report_names_each_difference_by_key_and_ends_in_one_summary_line() -> None:
    from ticdc_sink.check.compare import EXTRA, MISSING, Difference, TableResult
    from ticdc_sink.check.report import CheckReport, text_lines

    table = TableResult("shop.orders", TS, rows=10, downstream_rows=10, chunks=3, drilled=1)
    table.add(Difference(MISSING, {"id": "4"}, {"id": "4", "v": "x"}, None), 1)
    table.add(Difference(EXTRA, {"id": "9"}, None, {"id": "9", "v": None}), 1)
    same = TableResult("shop.items", TS, rows=5, downstream_rows=5, chunks=1)
    gone = TableResult("shop.gone", TS, problem="no table shop.gone downstream")
    lines = text_lines(CheckReport([table, same, gone], 2.0, 0.0))
    assert lines[:4] == [
        "shop.orders: 2 rows differ (upstream 10 rows, downstream 10)",
        "  key id='4': missing downstream: (id='4', v='x')",
        "  ... and 1 more",
        "shop.gone: no table shop.gone downstream",
    ]
    assert lines[4].startswith(
        f"check: 3 tables, 15 rows in 4 chunks (1 read row by row) at checkpoint ts {TS} "
    )
    assert lines[4].endswith("in 2.0 s (8 rows/s): DIFFER: 3 differences in 2 of 3 tables")


def test_the_rate_limit_spaces_reads_to_its_rows_per_second() -> None:
    import time

    from ticdc_sink.check.compare import RateLimit

    limit = RateLimit(1_000)
    started = time.monotonic()
    for _ in range(3):
        limit.take(50)
    assert time.monotonic() - started >= 0.14
    unbounded = RateLimit(None)
    started = time.monotonic()
    unbounded.take(1_000_000)
    assert time.monotonic() - started < 0.05


def test_the_upstream_takes_none_of_the_downstreams_password_or_tls_settings() -> None:
    from config.settings import load_settings
    from ticdc_sink.check.snapshot import upstream_settings

    settings = load_settings(
        environ={
            "TICDC_SINK_DOWNSTREAM": "mysql://sink@db:3306/",
            "TICDC_SINK_DOWNSTREAM_PASSWORD": "downstream-secret",
            "TICDC_SINK_DOWNSTREAM_SSL_MODE": "required",
        }
    )
    assert settings.downstream.url.password.get_secret_value() == "downstream-secret"
    url = upstream_settings(settings, "mysql://checker:up@tidb:4000/").downstream.url
    assert (url.user, url.password.get_secret_value(), url.host, url.port) == (
        "checker",
        "up",
        "tidb",
        4000,
    )
    assert url.ssl_mode is None
