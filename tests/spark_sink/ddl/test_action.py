"""What a DDL event does downstream, decided without a server."""

from __future__ import annotations

from config.settings import parse_routes
from core.model import DDLEvent
from spark_sink.ddl.action import DDLStep, ddl_action
from spark_sink.routing import Router

TS = 449_300_000_000_000_000
TIDB_ONLY = "CREATE TABLE t (id BIGINT PRIMARY KEY AUTO_RANDOM, v INT)"


def event(query: str, schema: str | None = "up", table: str | None = "t") -> DDLEvent:
    return DDLEvent(TS, schema, table, query, 3)


def test_applied_skipped_and_filtered_ddl_run_nothing() -> None:
    router = Router((), ("up.skipped",))
    alter = event("ALTER TABLE t ADD COLUMN w INT")
    assert ddl_action(alter, TS, 0, router, False).step is DDLStep.APPLIED
    assert ddl_action(alter, TS - 1, TS, router, False).step is DDLStep.SKIP_ASKED
    skipped = event("ALTER TABLE skipped ADD COLUMN w INT", table="skipped")
    assert ddl_action(skipped, 0, 0, router, False).step is DDLStep.FILTERED


def test_tidb_only_syntax_runs_as_is_on_tidb_and_is_taken_out_elsewhere() -> None:
    router = Router()
    on_tidb = ddl_action(event(TIDB_ONLY), 0, 0, router, runs_tidb_ddl=True)
    assert (on_tidb.step, on_tidb.query, on_tidb.home) == (DDLStep.RUN, TIDB_ONLY, "up")
    elsewhere = ddl_action(event(TIDB_ONLY), 0, 0, router, runs_tidb_ddl=False)
    assert elsewhere.step is DDLStep.RUN
    assert elsewhere.query is not None and "AUTO_RANDOM" not in elsewhere.query
    only_tidb = event("ALTER TABLE t SET TIFLASH REPLICA 1")
    assert ddl_action(only_tidb, 0, 0, router, False).step is DDLStep.NOTHING_TO_RUN
    assert ddl_action(only_tidb, 0, 0, router, True).step is DDLStep.RUN


def test_a_ddl_runs_in_its_routed_database_or_says_why_it_cannot() -> None:
    router = Router(parse_routes("up.*=down.*"))
    routed = ddl_action(event("ALTER TABLE t ADD COLUMN w INT"), 0, 0, router, False)
    assert (routed.step, routed.home, routed.database) == (DDLStep.RUN, "down", "down")
    nowhere = ddl_action(event("ALTER TABLE t ADD COLUMN w INT", schema=None), 0, 0, router, False)
    assert nowhere.step is DDLStep.CANNOT_RUN and nowhere.error
    named = ddl_action(event("CREATE TABLE up.n (id INT)", schema=None), 0, 0, router, False)
    assert named.step is DDLStep.RUN and named.ddl.schema == "up"
    database = ddl_action(event("CREATE DATABASE up", table=None), 0, 0, router, False)
    assert database.step is DDLStep.RUN and database.home is None
