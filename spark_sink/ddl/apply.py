"""A released DDL applied downstream: run once in its routed database (as :func:`ddl_action`
decides) and recorded in the checkpoint, or recorded without running, or skipped."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import pymysql

from config.errors import DDLError
from config.settings import OnDDLError, Settings
from core.model import DDLEvent
from spark_sink.db.checkpoint import Checkpoint, CheckpointTable
from spark_sink.db.connection import SinkConnection
from spark_sink.db.dialect import ANY_SERVER, Dialect
from spark_sink.db.retries import with_retries
from spark_sink.ddl.action import DDLAction, DDLStep, ddl_action
from spark_sink.ddl.text import statements
from spark_sink.metrics import DDL_SKIPPED
from spark_sink.routing import Router

log = logging.getLogger("ticdc_sink.sink")


def execute_ddl(
    cursor: Any, schema: str | None, query: str, home: str, dialect: Dialect = ANY_SERVER
) -> bool:
    """Run a DDL in its database ``schema`` (None: a statement about a whole database, which
    names it itself), then go back to the database ``home``; False when it was already
    applied (ignored as TiCDC does). A database that is not there is an error, never a
    reason to run the DDL elsewhere; ``DDLError`` carries the server's refusal."""
    # The sink's connection takes many statements to a query (its batches' small tables go so):
    # a DDL event is one statement, and a second one in its text never runs.
    if statements(query) > 1:
        raise DDLError("the DDL event holds more than one statement; none of them was run")
    try:
        if schema is not None:
            cursor.execute(dialect.use_database(schema))
        cursor.execute(query)
    except pymysql.MySQLError as error:
        if dialect.is_transient(error):
            raise
        if dialect.already_applied(error):
            log.info("DDL already applied (%s): %s", error.args[1], query)
            return False
        if dialect.unknown_database(error):
            raise DDLError(f"database {schema!r} does not exist downstream ({error})") from None
        raise DDLError(f"the downstream refused it: {error}") from None
    finally:
        with contextlib.suppress(pymysql.MySQLError):
            cursor.execute(dialect.use_database(home))
    return True


class DDLApplier:
    """Applies DDL events over the sink's connection, each recorded in the checkpoint."""

    def __init__(
        self,
        settings: Settings,
        connection: SinkConnection,
        checkpoints: CheckpointTable,
        router: Router,
    ) -> None:
        self.settings = settings
        self.connection = connection
        self.checkpoints = checkpoints
        self.router = router

    def apply(
        self, ddl: DDLEvent, checkpoint: Checkpoint, epoch: int, offsets: dict[str, int]
    ) -> DDLAction | None:
        """Run ``ddl`` once in its routed database and record it in the checkpoint with
        ``offsets``; what the checkpoint says was applied or skipped does not run. Returns its
        action when the DDL may have changed a table's layout (it ran, or was meant to), else
        None."""
        self.connection.open()  # reads the server's dialect
        dialect = self.connection.dialect
        action = ddl_action(
            ddl, checkpoint.ddl_ts, checkpoint.skip_ddl_ts, self.router, dialect.runs_tidb_ddl()
        )
        ddl = action.ddl
        step = action.step
        if step is DDLStep.APPLIED:
            log.info("DDL at %d already applied: %s", ddl.commit_ts, ddl.query)
            return None
        if step is DDLStep.FILTERED:
            return None
        if step is DDLStep.SKIP_ASKED:
            log.warning(
                "DDL at %d skipped, as `ticdc-sink skip-ddl` asked: %s", ddl.commit_ts, ddl.query
            )
            DDL_SKIPPED.labels(self.settings.group, "skip-ddl").inc()
            self._record(ddl, epoch, offsets)
            return None
        if step is DDLStep.NOTHING_TO_RUN:
            log.info(
                "DDL at %d is TiDB's own, nothing to run downstream: %s", ddl.commit_ts, ddl.query
            )
            self._record(ddl, epoch, offsets)
            return None
        try:
            if step is DDLStep.CANNOT_RUN:
                raise DDLError(action.error or "it cannot run downstream")
            query, home = action.query, action.home
            with_retries(
                lambda: self._record(ddl, epoch, offsets, query, home),
                f"DDL at {ddl.commit_ts}",
                dialect,
            )
        except DDLError as error:
            message = (
                f"pipeline {self.settings.group}: the DDL at commit ts {ddl.commit_ts} in database "
                f"{action.database!r} failed: {error}. Query: {ddl.query!r}. To go on: fix the "
                f"downstream and start the sink again, or run `ticdc-sink skip-ddl --ts "
                f"{ddl.commit_ts}` (or set TICDC_SINK_ON_DDL_ERROR=skip) and apply it by hand"
            )
            if self.settings.sink.on_ddl_error is OnDDLError.STOP:
                raise DDLError(message) from None
            log.error("%s; skipped (TICDC_SINK_ON_DDL_ERROR=skip)", message)
            DDL_SKIPPED.labels(self.settings.group, "on-ddl-error").inc()
            self._record(ddl, epoch, offsets)
        return action

    def _record(
        self,
        ddl: DDLEvent,
        epoch: int,
        offsets: dict[str, int],
        query: str | None = None,
        home: str | None = None,
    ) -> None:
        """Run ``query`` (if any) in ``home``, then record the DDL as applied."""
        conn = self.connection.open()
        dialect = self.connection.dialect
        try:
            with conn.cursor() as cursor:
                if query is not None:
                    execute_ddl(cursor, home, query, self.settings.downstream.meta_db, dialect)
                self.checkpoints.advance(cursor, ddl.commit_ts, epoch, offsets, ddl.commit_ts)
            conn.commit()
        except Exception as error:
            if dialect.is_transient(error):
                self.connection.drop()
            raise
