"""`ticdc-sink status`: the status document of ``streams/status.py`` plus the downstream
checkpoint (and a transaction being committed in chunks, when one is), printed for people or as
JSON; an unreadable downstream is an error, not a blank."""

from __future__ import annotations

import asyncio

import orjson
import pymysql

from config.errors import ServiceError
from config.settings import Settings
from core.redis_client import redis_client
from core.staging import Staging
from spark_sink.db.checkpoint import CheckpointTable
from spark_sink.db.connection import connect
from spark_sink.db.split_position import SplitPosition, SplitPositionTable
from streams.status import kafka_view, pattern_topics, render, snapshot
from ticdc_sink.check.record import read_last_check

# MySQL errors that mean "no checkpoint recorded yet": no meta database, no checkpoint table.
NOT_YET_CREATED = frozenset({1049, 1146})


def read_checkpoint(settings: Settings) -> int | None:
    """The applied resolved ts downstream; None until the sink has recorded one. Raises
    :class:`ServiceError` when the downstream cannot be read."""
    try:
        with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
            found = CheckpointTable(settings.downstream.meta_db, settings.group).read(cursor)
    except pymysql.MySQLError as error:
        if error.args and error.args[0] in NOT_YET_CREATED:
            return None
        raise ServiceError(
            f"cannot read the checkpoint of pipeline {settings.group!r} from the downstream "
            f"{settings.downstream.url} (TICDC_SINK_DOWNSTREAM, meta database "
            f"{settings.downstream.meta_db!r}): {error}"
        ) from error
    return found.resolved_ts if found else None


def read_split(settings: Settings) -> SplitPosition | None:
    """Where a transaction the sink commits in chunks (``TICDC_SINK_SPLIT_LARGE_TXN``) is: its
    commit ts, the pass and the changes of that pass done; None when none is under way."""
    try:
        with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
            found = SplitPositionTable(settings.downstream.meta_db, settings.group).read(cursor)
    except pymysql.MySQLError as error:
        if error.args and error.args[0] in NOT_YET_CREATED:
            return None
        raise ServiceError(
            f"cannot read the split position of pipeline {settings.group!r} from the "
            f"downstream {settings.downstream.url}: {error}"
        ) from error
    return found


def run_status(settings: Settings, as_json: bool) -> int:
    """Print the pipeline's status; exit code 0, or an error when a store cannot be read."""
    staging = Staging(redis_client(settings), settings.group)
    kafka = asyncio.run(kafka_view(settings, staging.partitions()))
    document = snapshot(
        staging,
        kafka.committed,
        kafka.ends,
        checkpoint_ts=read_checkpoint(settings),
        owners=kafka.owners,
        matched=asyncio.run(pattern_topics(settings)),
    )
    split = read_split(settings)
    last_check = read_last_check(settings)
    if last_check is not None:
        document["last_check"] = last_check.fields()
    if split is not None:
        document["split"] = {
            "commit_ts": split.commit_ts,
            "pass": split.pass_.name.lower(),
            "done": split.done,
        }
    print(orjson.dumps(document).decode() if as_json else render(document))
    if split is not None and not as_json:
        print(
            f"a transaction is committed in chunks (TICDC_SINK_SPLIT_LARGE_TXN): {split.describe()}"
        )
    if last_check is not None and not as_json:
        print(last_check.line())
    if not document["partitions"] and not as_json:
        print("no partitions known yet: a worker records them from Kafka's metadata at start")
    return 0
