"""`ticdc-sink skip-ddl --ts N`: tell the sink to skip one DDL the downstream refuses.

The request is recorded in the pipeline's checkpoint row; the sink reads it when it reaches that
DDL, logs the skip, counts it in ``ticdc_sink_ddl_skipped_total`` and records the DDL as applied
without running it.
"""

from __future__ import annotations

import logging

from config.errors import ConfigError
from config.settings import Settings
from spark_sink.db.checkpoint import CheckpointTable
from spark_sink.db.connection import connect
from spark_sink.db.dialect import server_dialect

log = logging.getLogger("ticdc_sink.sink")


def request_skip_ddl(settings: Settings, ddl_ts: int) -> str:
    """Record that the DDL at ``ddl_ts`` is to be skipped; returns what was done, to print."""
    if ddl_ts <= 0:
        raise ConfigError(f"skip-ddl --ts {ddl_ts}: a DDL's commit ts is a positive TSO")
    table = CheckpointTable(settings.downstream.meta_db, settings.group)
    conn = connect(settings)
    try:
        with conn.cursor() as cursor:
            # The upsert below in the server's own SQL (MySQL 8.0.20+: no VALUES()).
            table.dialect = server_dialect(cursor)
            table.create(cursor)
            found = table.read(cursor)
            if found is not None and ddl_ts <= found.ddl_ts:
                raise ConfigError(
                    f"skip-ddl --ts {ddl_ts}: pipeline {settings.group} has already applied "
                    f"the DDL up to ts {found.ddl_ts}"
                )
            table.request_skip(cursor, ddl_ts)
        conn.commit()
    finally:
        conn.close()
    log.warning("pipeline %s: the DDL at ts %d will be skipped", settings.group, ddl_ts)
    return (
        f"pipeline {settings.group}: the sink will skip the DDL at commit ts {ddl_ts} "
        "(recorded in the checkpoint); start or restart the sink"
    )
