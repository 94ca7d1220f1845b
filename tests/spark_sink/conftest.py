"""A sink's pipeline of a test's own, for the tests of the sink's loop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from config.settings import Settings
from core.staging import Staging
from spark_sink.db.connection import connect


@pytest.fixture
def pipeline(settings: Settings, unique: str, staging: Staging) -> Iterator[Settings]:
    """The settings of a pipeline named after the test, its staging area over one partition of
    ``topic``; its meta database is dropped afterwards. (The target's tests, which also run on
    TiDB, define theirs.)"""
    configured = settings.updated({"group": unique, "meta_db": f"{unique}_meta"})
    staging.set_partition_count("topic", 1)
    yield configured
    with connect(configured, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")
