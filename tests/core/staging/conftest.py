"""The staging tests' area: two partitions of one topic."""

from __future__ import annotations

import pytest

from core.redis_client import RedisClient
from core.staging import Staging
from tests.conftest import REDIS_KINDS, redis_of


@pytest.fixture(params=REDIS_KINDS)
def redis_client(request: pytest.FixtureRequest, redis_client: RedisClient) -> RedisClient:
    """Every staging test on one Redis and on the Redis Cluster."""
    return redis_of(request, redis_client)


@pytest.fixture
def staging(staging: Staging) -> Staging:
    staging.set_partition_count("topic", 2)
    return staging
