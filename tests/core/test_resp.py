"""Pre-encoded command batches against the real Redis."""

from __future__ import annotations

import threading

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.cluster import RedisCluster

from core.redis_client import RedisClient
from core.resp import CommandBatch, encode_args
from tests.conftest import REDIS_KINDS, redis_of
from tests.core.slots import SlotMove


@pytest.fixture(params=REDIS_KINDS)
def redis_client(request: pytest.FixtureRequest, redis_client: RedisClient) -> RedisClient:
    """Each batch on one Redis and on the Redis Cluster (routed by its key's slot)."""
    return redis_of(request, redis_client)


pytestmark = pytest.mark.integration


@pytest.fixture
def key(unique: str) -> str:
    """A key whose hash tag keeps the test's keys in one Redis Cluster slot."""
    return f"{{{unique}}}"


@settings(max_examples=200)
@given(st.lists(st.one_of(st.binary(), st.text(), st.integers(-(2**63), 2**64))))
def test_arguments_encode_as_redis_py_encodes_them(args: list[bytes | str | int]) -> None:
    packed = redis.Connection().pack_command("ECHO", *args)
    assert b"".join(packed) == b"*%d\r\n" % (len(args) + 1) + encode_args(["ECHO", *args])


def test_replies_come_back_in_order(redis_client: redis.Redis, key: str) -> None:
    batch = CommandBatch(key)
    batch.command("SET", key, b"\x00\r\n")
    batch.command("APPEND", key, "é")
    batch.encoded(2, [encode_args(["GET"]), encode_args([key])])
    batch.command("DEL", key)
    assert len(batch) == 4
    assert batch.execute(redis_client) == [b"OK", 5, "\x00\r\né".encode(), 1]


def test_an_error_is_raised_after_every_reply_is_read(redis_client: redis.Redis, key: str) -> None:
    batch = CommandBatch(key)
    batch.command("SET", key, "text")
    batch.command("INCR", key)  # an error reply, in the middle
    batch.command("SET", f"{key}:after", "ran")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        batch.execute(redis_client)
    # The commands after the error ran, and the connection is still in step.
    assert redis_client.get(f"{key}:after") == b"ran"
    assert redis_client.ping()
    redis_client.delete(key, f"{key}:after")


def test_an_empty_batch_sends_nothing(redis_client: redis.Redis, key: str) -> None:
    assert CommandBatch(key).execute(redis_client) == []


def test_an_error_inside_a_transaction_is_raised(redis_client: redis.Redis, key: str) -> None:
    batch = CommandBatch(key)
    batch.command("MULTI")
    batch.command("SET", key, "text")
    batch.command("INCR", key)  # fails when EXEC runs it: the error is inside EXEC's reply
    batch.command("EXEC")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        batch.execute(redis_client)
    assert redis_client.get(key) == b"text"
    redis_client.delete(key)


def test_a_batch_follows_its_slot_while_it_moves(
    redis_cluster_client: RedisCluster, key: str
) -> None:
    """Half moved, the slot's old master runs what it still holds and answers ASK for the
    rest (a transaction touching both: TRYAGAIN, then ASK once all moved); moved, it answers
    MOVED. Each unit runs once, where its keys are."""
    move = SlotMove(redis_cluster_client, redis_cluster_client.keyslot(key))
    stay, leave = f"{key}:stay", f"{key}:leave"
    redis_cluster_client.set(stay, 0)
    redis_cluster_client.set(leave, 0)
    try:
        move.begin()
        assert move.source.execute_command("MIGRATE", "127.0.0.1", move.target_port, leave, 0, 5000)
        batch = CommandBatch(key)
        batch.command("INCR", stay)  # still on the old master
        batch.command("INCR", leave)  # ASK: on the new one already
        batch.command("MULTI")
        batch.command("INCR", stay)
        batch.command("INCR", leave)
        batch.command("EXEC")
        batch.command("INCR", stay)
        thread = threading.Timer(0.3, move.finish)
        thread.start()
        # The transaction meets TRYAGAIN until finish() has moved every key of the slot.
        replies = batch.execute(redis_cluster_client)
        thread.join()
        assert replies[0] == 1 and replies[1] == 1 and replies[-2] == [2, 2]
        assert replies[-1] == 3
        # Moved: the old master answers MOVED, the batch goes to the new one.
        again = CommandBatch(key)
        again.command("INCR", stay)
        again.command("INCR", leave)
        assert again.execute(redis_cluster_client) == [4, 3]
        assert move.target.get(stay) == b"4"
    finally:
        move.close()
        redis_cluster_client.delete(stay, leave)
