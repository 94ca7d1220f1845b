"""`ticdc-sink status` as users run it, against the real Redis and MariaDB."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from typing import Any

import orjson
import pytest

from config.settings import Settings
from core.kafka_client import kafka_options
from spark_sink.db.checkpoint import CheckpointTable

pytestmark = pytest.mark.integration

TS = 1_712_799_072_265 << 18


def _status(unique: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ticdc_sink", "status", *args],
        env={
            **os.environ,
            "TICDC_SINK_GROUP": unique,
            "TICDC_SINK_META_DB": f"{unique}_meta",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unreadable_downstream_is_an_error_not_a_blank(unique: str, redis_client: Any) -> None:
    result = _status(unique, TICDC_SINK_DOWNSTREAM="mysql://app:hunter2@127.0.0.1:1/")
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "ticdc-sink status: TICDC_SINK_DOWNSTREAM: cannot reach the downstream at 127.0.0.1:1"
    )
    assert "hunter2" not in line


def test_the_checkpoint_shows_with_its_time_and_lag(
    settings: Settings, unique: str, redis_client: Any, mariadb_connect: Any
) -> None:
    assert orjson.loads(_status(unique, "--json").stdout)["checkpoint_ts"] is None
    with mariadb_connect() as conn, conn.cursor() as cursor:
        table = CheckpointTable(f"{unique}_meta", unique)
        table.create(cursor)
        table.advance(cursor, TS, 1, {})
    try:
        document = orjson.loads(_status(unique, "--json").stdout)
        assert document["checkpoint_ts"] == TS
        assert document["checkpoint_time"] == "2024-04-11T01:31:12.265Z"
        assert document["replication_lag_seconds"] > 86400
        text = _status(unique).stdout
        assert f"checkpoint ts       {TS} (2024-04-11T01:31:12.265Z, " in text
    finally:
        with mariadb_connect() as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")


def test_a_partition_a_worker_holds_shows_its_owner_never_none(
    settings: Settings, unique: str, staging: Any, tmp_path: Any
) -> None:
    from tests.ticdc_sink.pipelines import start_worker, stop, wait_for
    from ticdc_sink.produce import run_produce

    configured = settings.updated({"group": unique, "topics": (unique,)})
    run_produce(configured, unique, "open", 2, 5, seed=1, expected=tmp_path / "expected.json")
    worker = start_worker(settings, unique, unique)
    documents: list[dict[str, Any]] = []

    def owned() -> bool:
        assert worker.poll() is None, "the worker stopped"
        documents.append(orjson.loads(_status(unique, "--json").stdout))
        owners = [row["owner"] for row in documents[-1]["partitions"]]
        return len(owners) == 2 and all(owner not in (None, "unknown") for owner in owners)

    try:
        wait_for(owned, "the worker to hold both partitions", timeout=90)
        text = _status(unique).stdout
    finally:
        stop(worker)
        asyncio.run(_delete_topic(configured, unique))
    # The worker's Kafka client id (its host and pid), and the host Kafka saw it connect from.
    for row in documents[-1]["partitions"]:
        assert re.fullmatch(r"ticdc-sink-worker-[\w.-]+-\d+@127\.0\.0\.1", row["owner"])
    assert "None" not in text
    assert text.splitlines()[-1].endswith(f"  {row['owner']}")


async def _delete_topic(settings: Settings, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


async def test_with_a_pattern_status_shows_the_matched_topics_and_those_not_recorded(
    unique: str, staging: Any, kafka_admin: Any, mariadb_connect: Any
) -> None:
    from aiokafka.admin import NewTopic

    recorded, new = f"{unique}_a", f"{unique}_b"
    await kafka_admin.create_topics([NewTopic(recorded, 2, 1), NewTopic(new, 1, 1)])
    staging.set_partition_count(recorded, 2)
    try:
        result = await asyncio.to_thread(
            _status, unique, "--json", TICDC_SINK_TOPICS_PATTERN=f"{unique}_.*"
        )
        text = await asyncio.to_thread(_status, unique, TICDC_SINK_TOPICS_PATTERN=f"{unique}_.*")
    finally:
        await kafka_admin.delete_topics([recorded, new])
    document = orjson.loads(result.stdout)
    assert document["topics"] == [
        {"topic": recorded, "partitions": 2, "recorded": True},
        {"topic": new, "partitions": 1, "recorded": False},
    ]
    assert document["blocking_topics"] == [new]
    assert f"{new} (1 partition, not recorded yet: holds the sink)" in text.stdout


def test_the_last_check_shows_when_at_which_ts_and_its_verdict(
    settings: Settings, unique: str, redis_client: Any, mariadb_connect: Any
) -> None:
    import datetime as dt

    from ticdc_sink.check.record import LastCheck, record

    configured = settings.updated({"group": unique, "meta_db": f"{unique}_meta"})
    at = dt.datetime(2026, 11, 28, 9, 30, tzinfo=dt.UTC)
    try:
        assert "last_check" not in orjson.loads(_status(unique, "--json").stdout)
        record(configured, LastCheck(at, TS, False, 12, 1000, 3, 41.0))
        document = orjson.loads(_status(unique, "--json").stdout)
        assert document["last_check"] == {
            "checked_at": "2026-11-28T09:30:00Z",
            "ts": TS,
            "match": False,
            "tables": 12,
            "rows": 1000,
            "differences": 3,
            "seconds": 41.0,
        }
        text = _status(unique).stdout
        assert (
            f"last check: 2026-11-28T09:30:00Z, at checkpoint ts {TS} (2024-04-11T01:31:12.265Z, "
        ) in text
        assert "DIFFER (3 differences); 12 tables, 1000 rows in 41.0 s" in text
    finally:
        with mariadb_connect() as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")
