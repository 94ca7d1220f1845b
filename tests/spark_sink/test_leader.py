"""The leader lease against real Redis: a lapse with no other holder is not the end."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from core.redis_client import RedisClient
from core.staging import Staging
from spark_sink.leader import LeaderLock
from tests.conftest import REDIS_KINDS, redis_of

pytestmark = pytest.mark.integration


@pytest.fixture(params=REDIS_KINDS)
def redis_client(request: pytest.FixtureRequest, redis_client: RedisClient) -> RedisClient:
    """The lease on one Redis and on the Redis Cluster."""
    return redis_of(request, redis_client)


def test_a_lapsed_lease_nobody_took_is_taken_again_with_a_new_epoch(
    staging: Staging, redis_client: Any
) -> None:
    lock = LeaderLock(redis_client, staging.keys, lease_ms=300)
    assert lock.acquire()
    first = lock.epoch
    lost = lock.keep_alive()
    # As after a Redis restart that lost the last renewal: the lease is simply gone.
    redis_client.delete(lock.key)
    time.sleep(0.5)
    assert not lost.is_set()
    assert lock.epoch > first
    assert redis_client.get(lock.key) == lock.token.encode()
    lock.release()


def test_a_lease_another_sink_took_is_lost(staging: Staging, redis_client: Any) -> None:
    lock = LeaderLock(redis_client, staging.keys, lease_ms=300)
    other = LeaderLock(redis_client, staging.keys, lease_ms=300)
    assert lock.acquire()
    redis_client.delete(lock.key)
    assert other.acquire()
    assert not lock.hold()
    other.release()


def test_a_new_epoch_is_on_the_replicas_asked_for_before_the_sink_leads_with_it(
    staging: Staging, redis_client: Any
) -> None:
    """Asking for one replica more than there are (none on one Redis, one on the cluster), the
    lease is taken but not led with; once the replicas hold a new epoch it is (a failover can
    then not hand the same epoch to a second leader)."""
    there = 1 if isinstance(redis_client, RedisCluster) else 0
    short = LeaderLock(redis_client, staging.keys, 300, min_replicas=there + 1, wait_ms=50)
    with pytest.raises(redis.TimeoutError, match="TICDC_SINK_REDIS_MIN_REPLICAS"):
        short.acquire()
    if there:
        lock = LeaderLock(redis_client, staging.keys, 300, min_replicas=1)
        redis_client.delete(lock.key)
        assert lock.acquire()
        assert lock.epoch == 2
        lock.release()
