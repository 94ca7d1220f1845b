"""Fixtures of the tests that run whole pipelines."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from config.settings import Settings, load_settings
from core.redis_client import redis_client as make_redis_client
from core.staging import Keys, Staging
from spark_sink.db.connection import connect
from tests.ticdc_sink.pipelines import TOPIC_PARTITIONS, forget_logs, process_logs


@pytest.fixture
def pipeline(
    downstream_settings: Settings,
    unique: str,
    redis_client: Any,
    call_failed: Any,
) -> Iterator[Settings]:
    """The settings of a pipeline of this test's own (group, topic, meta database), whose Redis
    keys, databases and process logs are deleted afterwards. It writes into MariaDB, or into the
    server a test parametrizes ``downstream_settings`` with (``ON_EVERY_SERVER``)."""
    configured = downstream_settings.updated(
        {"group": unique, "topics": (unique,), "meta_db": f"{unique}_meta"}
    )
    yield configured
    if call_failed():
        print(f"output of the processes of pipeline {unique}:\n{process_logs(unique)}")
    forget_logs(unique)
    for key in redis_client.scan_iter(Keys(unique).pattern):
        redis_client.delete(key)
    with connect(configured, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}`")
        # The second database of `produce --table-changes`.
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_b`")
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")


@pytest.fixture
async def topic(kafka_admin: Any, unique: str) -> AsyncIterator[str]:
    """A topic of this test's own (named like its ``pipeline``), of :data:`TOPIC_PARTITIONS`
    partitions, deleted afterwards."""
    from aiokafka.admin import NewTopic

    await kafka_admin.create_topics([NewTopic(unique, TOPIC_PARTITIONS, 1)])
    yield unique
    await kafka_admin.delete_topics([unique])


@pytest.fixture
async def topics_deleted(kafka_admin: Any, unique: str) -> AsyncIterator[None]:
    """Deletes the topics a test made named ``<unique>_...`` (and ``<unique>``) afterwards."""
    yield
    names = [t for t in await kafka_admin.list_topics() if t.split("_")[0] == unique]
    if names:
        await kafka_admin.delete_topics(names)


@pytest.fixture
def on_clusters(
    clusters_env: dict[str, str], unique: str, call_failed: Any, mariadb_connect: Any
) -> Iterator[Settings]:
    """A pipeline of this test's own on the clusters, its keys, topic and databases deleted
    afterwards."""
    settings = load_settings(environ={**os.environ, **clusters_env}).updated(
        {"group": unique, "topics": (unique,), "meta_db": f"{unique}_meta"}
    )
    yield settings
    if call_failed():
        print(f"output of the processes of pipeline {unique}:\n{process_logs(unique)}")
    forget_logs(unique)
    Staging(make_redis_client(settings), unique).clear()
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}`")
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")
