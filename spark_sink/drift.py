"""Schema drift: upstream changes that name a table or column the downstream does not have.

Never silent: the sink stops with the table and column and the ways forward, unless
``TICDC_SINK_ON_SCHEMA_DRIFT=ignore``, which drops what has no place downstream and counts each
dropped value in a metric.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from config.errors import SchemaDriftError
from config.settings import OnSchemaDrift, Settings
from spark_sink.metrics import SCHEMA_DRIFT_DROPPED
from spark_sink.plan import TablePlan

log = logging.getLogger("ticdc_sink.sink")


def _ways_forward(settings: Settings, upstream: str) -> str:
    return (
        "Ways forward: create it downstream as upstream has it, then start the sink again; or "
        f"skip the table (TICDC_SINK_SKIP_TABLES={upstream}); or set "
        "TICDC_SINK_ON_SCHEMA_DRIFT=ignore to drop what the downstream has no place for "
        "(counted in ticdc_sink_schema_drift_dropped_total)."
    )


def missing_table(
    settings: Settings, plan: TablePlan, target: str, route: str | None = None
) -> None:
    """The downstream has no table ``target`` for ``plan``: stop, or count its rows dropped.
    ``route``: the TICDC_SINK_ROUTES rule that takes its rows to the table Avro renamed."""
    upstream = f"{plan.schema}.{plan.table}"
    rows = len(plan.upserts) + len(plan.deletes)
    if route is not None and settings.sink.on_schema_drift is OnSchemaDrift.STOP:
        downstream = route.partition("=")[2]
        raise SchemaDriftError(
            f"pipeline {settings.group}: table {upstream} is the name TiCDC's Avro protocol gives "
            f"{downstream} (Avro names hold only letters, digits and '_'; so do its columns): "
            f"set TICDC_SINK_ROUTES='{route}' (with any routes already set) and start the sink "
            "again; its columns are matched by their Avro names"
        )
    if settings.sink.on_schema_drift is OnSchemaDrift.STOP:
        raise SchemaDriftError(
            f"pipeline {settings.group}: {rows} changes of table {upstream} have no table "
            f"downstream ({target} does not exist). {_ways_forward(settings, upstream)}"
        )
    log.warning("schema drift ignored: %d changes of %s dropped (no %s)", rows, upstream, target)
    SCHEMA_DRIFT_DROPPED.labels(settings.group, target, "").inc(rows)


def missing_columns(
    settings: Settings, plan: TablePlan, target: str, downstream: Collection[str]
) -> list[str]:
    """The plan's columns ``target`` lacks (stop, unless ignored: then count each dropped
    value and return them)."""
    missing = [name for name in plan.columns if name not in downstream]
    if not missing:
        return []
    upstream = f"{plan.schema}.{plan.table}"
    if settings.sink.on_schema_drift is OnSchemaDrift.STOP:
        shown = ", ".join(repr(m) for m in missing)
        raise SchemaDriftError(
            f"pipeline {settings.group}: table {upstream} has column(s) {shown} upstream that "
            f"{target} does not have downstream; their values would be lost. "
            + _ways_forward(settings, upstream).replace("create it", "add the column(s)")
        )
    rows = len(plan.upserts)
    for name in missing:
        SCHEMA_DRIFT_DROPPED.labels(settings.group, target, name).inc(rows)
    log.warning(
        "schema drift ignored: column(s) %s of %s dropped from %d rows", missing, upstream, rows
    )
    return missing
