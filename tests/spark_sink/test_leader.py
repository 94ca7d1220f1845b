"""The leader lease against real Redis: a lapse with no other holder is not the end."""

from __future__ import annotations

import time
from typing import Any

import pytest

from core.staging import Staging
from spark_sink.leader import LeaderLock

pytestmark = pytest.mark.integration


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
