"""Pre-encoded command batches against the real Redis."""

from __future__ import annotations

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from core.resp import CommandBatch, encode_args

pytestmark = pytest.mark.integration


@settings(max_examples=200)
@given(st.lists(st.one_of(st.binary(), st.text(), st.integers(-(2**63), 2**64))))
def test_arguments_encode_as_redis_py_encodes_them(args: list[bytes | str | int]) -> None:
    packed = redis.Connection().pack_command("ECHO", *args)
    assert b"".join(packed) == b"*%d\r\n" % (len(args) + 1) + encode_args(["ECHO", *args])


def test_replies_come_back_in_order(redis_client: redis.Redis, unique: str) -> None:
    batch = CommandBatch()
    batch.command("SET", unique, b"\x00\r\n")
    batch.command("APPEND", unique, "é")
    batch.encoded(2, [encode_args(["GET"]), encode_args([unique])])
    batch.command("DEL", unique)
    assert len(batch) == 4
    assert batch.execute(redis_client) == [b"OK", 5, "\x00\r\né".encode(), 1]


def test_an_error_is_raised_after_every_reply_is_read(
    redis_client: redis.Redis, unique: str
) -> None:
    batch = CommandBatch()
    batch.command("SET", unique, "text")
    batch.command("INCR", unique)  # an error reply, in the middle
    batch.command("SET", f"{unique}:after", "ran")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        batch.execute(redis_client)
    # The commands after the error ran, and the connection is still in step.
    assert redis_client.get(f"{unique}:after") == b"ran"
    assert redis_client.ping()
    redis_client.delete(unique, f"{unique}:after")


def test_an_empty_batch_sends_nothing(redis_client: redis.Redis) -> None:
    assert CommandBatch().execute(redis_client) == []


def test_an_error_inside_a_transaction_is_raised(redis_client: redis.Redis, unique: str) -> None:
    batch = CommandBatch()
    batch.command("MULTI")
    batch.command("SET", unique, "text")
    batch.command("INCR", unique)  # fails when EXEC runs it: the error is inside EXEC's reply
    batch.command("EXEC")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        batch.execute(redis_client)
    assert redis_client.get(unique) == b"text"
    redis_client.delete(unique)
