"""`ticdc-sink skip-ddl --ts N`: tell the sink to skip one DDL the downstream refuses.

The request is recorded in the pipeline's checkpoint row; the sink reads it when it reaches that
DDL, logs the skip, counts it in ``ticdc_sink_ddl_skipped_total`` and records the DDL as applied
without running it. A request the sink could never meet is refused: for a pipeline that does not
exist, for a ts at which no DDL is staged, and one that would drop another skip not done yet
(unless the operator means it).
"""

from __future__ import annotations

import logging
from typing import Any

from config.errors import ConfigError
from config.settings import Settings
from core.staging import Staging
from spark_sink.db.checkpoint import Checkpoint, CheckpointTable
from spark_sink.db.connection import connect
from spark_sink.db.dialect import server_dialect

log = logging.getLogger("ticdc_sink.sink")


def skip_refusal(
    pipeline: str,
    ddl_ts: int,
    found: Checkpoint | None,
    *,
    staging_known: bool,
    staged: bool,
    replace: bool,
) -> str | None:
    """Why the skip of the DDL at ``ddl_ts`` cannot be recorded, or None: ``found`` is the
    pipeline's checkpoint, ``staging_known`` whether Redis holds anything of the pipeline and
    ``staged`` whether a DDL at ``ddl_ts`` is staged there."""
    where = f"--ts {ddl_ts}"
    if ddl_ts <= 0:
        return f"{where}: a DDL's commit ts is a positive TSO"
    if found is None and not staging_known:
        return (
            f"{where}: no pipeline {pipeline!r}: no checkpoint downstream and nothing staged "
            "in Redis (check TICDC_SINK_GROUP)"
        )
    if found is not None and ddl_ts <= found.ddl_ts:
        return f"{where}: pipeline {pipeline} has already applied the DDL up to ts {found.ddl_ts}"
    if not staged:
        return (
            f"{where}: no DDL is staged at that commit ts in pipeline {pipeline!r} (the sink "
            "names the ts of the DDL it stopped at)"
        )
    if found is not None and not replace and found.ddl_ts < found.skip_ddl_ts != ddl_ts:
        return (
            f"{where}: pipeline {pipeline} is already to skip the DDL at ts "
            f"{found.skip_ddl_ts}, not reached yet; give --replace to skip this one instead"
        )
    return None


def request_skip_ddl(
    settings: Settings, staging: Staging, ddl_ts: int, replace: bool = False
) -> str:
    """Record that the DDL at ``ddl_ts`` is to be skipped; returns what was done, to print."""
    table = CheckpointTable(settings.downstream.meta_db, settings.group)
    conn = connect(settings)
    try:
        with conn.cursor() as cursor:
            # The upsert below in the server's own SQL (MySQL 8.0.20+: no VALUES()).
            table.dialect = server_dialect(cursor)
            # A refused request leaves no meta database behind; an existing table gets the
            # columns this version reads.
            found = None
            if _table_exists(cursor, table):
                table.create(cursor)
                found = table.read(cursor)
            refusal = skip_refusal(
                settings.group,
                ddl_ts,
                found,
                staging_known=bool(staging.partitions()) or staging.holds_members(),
                staged=ddl_ts > 0 and staging.has_ddl_at(ddl_ts),
                replace=replace,
            )
            if refusal is not None:
                raise ConfigError(refusal)
            table.create(cursor)
            table.request_skip(cursor, ddl_ts)
        conn.commit()
    finally:
        conn.close()
    log.warning("pipeline %s: the DDL at ts %d will be skipped", settings.group, ddl_ts)
    return (
        f"pipeline {settings.group}: the sink will skip the DDL at commit ts {ddl_ts} "
        "(recorded in the checkpoint); start or restart the sink"
    )


def _table_exists(cursor: Any, table: CheckpointTable) -> bool:
    cursor.execute(
        "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = 'checkpoint'",
        (table.meta_db,),
    )
    return cursor.fetchone() is not None
