"""What a released DDL event does downstream, decided without touching it: nothing (already
applied, or its table is not replicated), recorded without running (skipped, or TiDB's own syntax
on another server), or run as a routed statement in its database."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from config.errors import DDLError
from core.model import DDLEvent
from spark_sink.ddl.rewrite import named_database, route_ddl
from spark_sink.ddl.text import is_database_ddl, requoted_drop
from spark_sink.ddl.tidb_syntax import mysql_safe
from spark_sink.routing import Router


class DDLStep(StrEnum):
    """What becomes of one DDL event."""

    # Applied before (the checkpoint's ddl_ts is at or past it): nothing to do.
    APPLIED = "applied"
    # A table the routes skip: nothing to do, nothing recorded.
    FILTERED = "filtered"
    # `ticdc-sink skip-ddl` asked to skip it: recorded, never run.
    SKIP_ASKED = "skip-asked"
    # Nothing of it runs downstream (TiDB-only syntax on another server): recorded.
    NOTHING_TO_RUN = "nothing-to-run"
    # Run ``query`` in ``home`` (None: it names its database itself), then recorded.
    RUN = "run"
    # It cannot be made to run downstream (``error`` says why).
    CANNOT_RUN = "cannot-run"


@dataclass(frozen=True)
class DDLAction:
    """The step for a DDL event, and for RUN the statement and where it runs."""

    step: DDLStep
    ddl: DDLEvent
    # The routed database of the event (None when it names no table's database).
    database: str | None = None
    query: str | None = None
    home: str | None = None
    error: str | None = None


def ddl_action(
    ddl: DDLEvent, applied_ddl_ts: int, skip_ddl_ts: int, router: Router, runs_tidb_ddl: bool
) -> DDLAction:
    """The action for ``ddl`` given the checkpoint's last applied DDL ts and the ts an operator
    asked to skip, the routes, and whether the downstream runs TiDB-only syntax as it is."""
    if ddl.commit_ts <= applied_ddl_ts:
        return DDLAction(DDLStep.APPLIED, ddl)
    ddl = replace(ddl, query=requoted_drop(ddl.query, ddl.schema, ddl.table))
    if not ddl.schema:
        # A DDL event without its database (the project's own Simple encoder writes no table
        # schema for DDL) that qualifies its table runs in the database it names.
        ddl = replace(ddl, schema=named_database(ddl.query))
    route = router.route(ddl.schema or "", ddl.table or "")
    if ddl.table and route is None:
        return DDLAction(DDLStep.FILTERED, ddl)
    if ddl.commit_ts == skip_ddl_ts:
        return DDLAction(DDLStep.SKIP_ASKED, ddl)
    database = None
    if ddl.schema:
        database = route[0] if route and ddl.table else router.route_schema(ddl.schema)
    query = ddl.query
    if not runs_tidb_ddl:
        safe = mysql_safe(ddl.query)
        if safe is None:
            return DDLAction(DDLStep.NOTHING_TO_RUN, ddl, database)
        query = safe
    try:
        query = route_ddl(query, ddl.schema or "", router, database)
    except DDLError as error:
        return DDLAction(DDLStep.CANNOT_RUN, ddl, database, error=str(error))
    if is_database_ddl(query):
        return DDLAction(DDLStep.RUN, ddl, database, query, None)
    if database is None:
        return DDLAction(
            DDLStep.CANNOT_RUN, ddl, database, error="the event names no database to run it in"
        )
    return DDLAction(DDLStep.RUN, ddl, database, query, database)
