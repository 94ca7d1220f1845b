"""Staging on a Redis Cluster: a pipeline's keys share one slot, pipelines spread over the
masters, and a slot moved while the worker stages (as `redis-cli --cluster reshard` moves it)
loses nothing and stages nothing twice."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from config.errors import ConfigError
from config.settings import Settings
from core.connectivity import check_redis
from core.packed import pack_rows
from core.redis_client import REDIS_TRANSIENT, RedisClient, redis_client
from core.staging import Keys, Staging, TopicPartition
from core.staging.framing import StagedMessage
from tests.core.slots import SlotMove
from tests.core.staging.changes import BIG_TS, P0, P1, row
from ticdc_sink.services.cluster import redis_cluster_up, redis_nodes

pytestmark = pytest.mark.integration

ROWS = 3


@pytest.fixture
def cluster_staging(redis_cluster_client: RedisCluster, unique: str) -> Iterator[Staging]:
    area = Staging(redis_cluster_client, unique)
    area.set_partition_count("topic", 2)
    yield area
    area.clear()


def test_every_key_of_a_pipeline_is_in_one_slot_and_pipelines_spread(
    redis_cluster_client: RedisCluster,
) -> None:
    keys = Keys("shop")
    tp = TopicPartition("orders", 3)
    names = [keys.rows(tp), keys.resolved(tp), keys.offsets, keys.leader, keys.dead_letters]
    assert len({redis_cluster_client.keyslot(name) for name in names}) == 1
    masters = {
        redis_cluster_client.get_node_from_key(Keys(f"pipeline-{i}").offsets).name  # type: ignore[no-untyped-call]
        for i in range(12)
    }
    assert len(masters) == 3


def _stage_until(
    staging: Staging, moved: threading.Event, staged: list[int], failures: list[BaseException]
) -> None:
    """Stage a message on each partition a round trip, until the slot has moved (twice)."""
    try:
        offset = 0
        while not moved.is_set():
            batch = staging.batch()
            for tp in (P0, P1):
                rows = [row(BIG_TS + offset, offset * ROWS + i) for i in range(ROWS)]
                batch.stage(tp, [StagedMessage(offset, pack_rows(rows))])
            batch.send()
            offset += 1
        staged.append(offset)
    except BaseException as error:
        failures.append(error)


def _staged_on(staging: Staging) -> None:
    """Wait until the staging thread has staged another batch."""
    before = staging.staged_offset(P1)
    deadline = time.monotonic() + 10
    while staging.staged_offset(P1) == before:
        assert time.monotonic() < deadline, "staging stopped while the slot moved"
        time.sleep(0.002)


def test_a_slot_moved_while_staging_loses_nothing(
    redis_cluster_client: RedisCluster, cluster_staging: Staging
) -> None:
    moved = threading.Event()
    staged: list[int] = []
    failures: list[BaseException] = []
    worker = threading.Thread(target=_stage_until, args=(cluster_staging, moved, staged, failures))
    worker.start()
    slot = redis_cluster_client.keyslot(cluster_staging.keys.offsets)
    try:
        while cluster_staging.staged_offset(P1) is None:
            time.sleep(0.005)
        # There and back, one key at a time: the batches meet ASK, TRYAGAIN and MOVED.
        there = SlotMove(redis_cluster_client, slot)
        for move in (there, there.back()):
            try:
                _staged_on(cluster_staging)
                move.begin()
                # Meanwhile a batch waits (TRYAGAIN: its script's keys are split between two
                # masters), or follows ASK once they all moved.
                while move.migrate_keys(1):
                    time.sleep(0.02)
                move.finish()
                _staged_on(cluster_staging)
            finally:
                move.close()
    finally:
        moved.set()
        worker.join(timeout=60)
    assert not failures, failures
    (messages,) = staged
    last = messages - 1
    assert cluster_staging.staged_offsets([P0, P1]) == {P0: last, P1: last}
    assert cluster_staging.staged_totals()[0] == 2 * messages * ROWS
    for tp in (P0, P1):
        assert redis_cluster_client.zcard(cluster_staging.keys.rows(tp)) == messages


def test_a_secured_cluster_stages_as_one_secured_server(
    secure_redis_cluster_settings: Settings, unique: str
) -> None:
    """TLS only with client certificates and an ACL user, on every node: the staging batch,
    the stage script and the reads as on the plain cluster."""
    check_redis(secure_redis_cluster_settings)
    area = Staging(redis_client(secure_redis_cluster_settings), unique)
    area.set_partition_count("topic", 2)
    try:
        batch = area.batch()
        for tp in (P0, P1):
            rows = [row(BIG_TS + 1, i) for i in range(ROWS)]
            batch.stage(tp, [StagedMessage(7, pack_rows(rows), (), BIG_TS + 1)])
        batch.send()
        assert area.staged_offsets([P0, P1]) == {P0: 7, P1: 7}
        assert area.staged_totals()[0] == 2 * ROWS
        assert area.global_resolved_ts() == BIG_TS + 1
    finally:
        area.clear()


def test_a_wrong_password_on_the_secured_cluster_names_the_setting(
    secure_redis_cluster_settings: Settings,
) -> None:
    wrong = secure_redis_cluster_settings.updated({"redis_password": "not-the-password"})
    with pytest.raises(ConfigError, match=r"^TICDC_SINK_REDIS_PASSWORD .*refused the login"):
        check_redis(wrong)


def test_a_batch_short_of_its_replicas_fails_and_its_replay_waits_again(
    redis_client: RedisClient, staging: Staging
) -> None:
    """On one Redis (no replica) and on the cluster (one a master), asking for one replica more
    than there are: the batch is staged on the master but the send fails, so the worker commits
    nothing; the retry, whose messages are all replays, waits again."""
    replicas = 2 if isinstance(redis_client, RedisCluster) else 1
    writer = Staging(redis_client, staging.pipeline, replicas)
    writer.wait_ms = 50
    batch = writer.batch()
    batch.stage(P0, [StagedMessage(3, pack_rows([row(BIG_TS, 1)]))])
    with pytest.raises(redis.TimeoutError, match="TICDC_SINK_REDIS_MIN_REPLICAS"):
        batch.send()
    assert writer.staged_offset(P0) == 3
    with pytest.raises(redis.TimeoutError, match=r"^[01] of [12] Redis replicas"):
        writer.batch().send()


def test_a_batch_sent_with_a_replica_is_on_the_replica_when_it_returns(
    redis_cluster_client: RedisCluster, cluster_staging: Staging
) -> None:
    writer = Staging(redis_cluster_client, cluster_staging.pipeline, 1)
    slot = redis_cluster_client.keyslot(writer.keys.offsets)
    replica_node = redis_cluster_client.nodes_manager.slots_cache[slot][1]
    replica = redis.Redis(replica_node.host, replica_node.port, single_connection_client=True)
    replica.execute_command("READONLY")
    try:
        for offset in range(50):
            batch = writer.batch()
            batch.stage(P0, [StagedMessage(offset, pack_rows([row(BIG_TS + offset, offset)]))])
            batch.send()
            assert replica.hget(writer.keys.offsets, P0.field) == str(offset).encode()
    finally:
        replica.close()


def _stage_through_outages(
    staging: Staging, stop: threading.Event, acknowledged: list[int], failures: list[BaseException]
) -> None:
    """Stage a message on P0 a round trip as the worker does: an outage is waited out and the
    same batch sent again; ``acknowledged`` gets each offset whose send returned."""
    offset = 0
    try:
        while not stop.is_set():
            rows = [row(BIG_TS + offset, offset * ROWS + i) for i in range(ROWS)]
            while True:
                batch = staging.batch()
                batch.stage(P0, [StagedMessage(offset, pack_rows(rows))])
                try:
                    batch.send()
                    break
                except REDIS_TRANSIENT:
                    time.sleep(0.1)
            acknowledged.append(offset)
            offset += 1
    except BaseException as error:
        failures.append(error)


def test_a_killed_master_loses_no_batch_sent_with_a_replica(
    redis_cluster_client: RedisCluster, cluster_staging: Staging
) -> None:
    """SIGKILL the master of the pipeline's slot while batches stage with one replica asked
    for: its replica takes over, and holds every batch whose send returned."""
    writer = Staging(redis_cluster_client, cluster_staging.pipeline, 1)
    master, standby = redis_cluster_client.nodes_manager.slots_cache[
        redis_cluster_client.keyslot(writer.keys.offsets)
    ][:2]
    node = next(n for n in redis_nodes() if n.endpoint.port == master.port)
    replica = redis.Redis(standby.host, standby.port)
    stop = threading.Event()
    acknowledged: list[int] = []
    failures: list[BaseException] = []
    thread = threading.Thread(
        target=_stage_through_outages, args=(writer, stop, acknowledged, failures)
    )
    thread.start()
    try:
        while len(acknowledged) < 20:
            time.sleep(0.01)
        pid = node.our_pid()
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)
        killed_at = len(acknowledged)
        # The replica takes over (the node timeout, then an election); alone, it holds no
        # batch for long (WAIT finds no replica) until the killed node is back as its replica.
        deadline = time.monotonic() + 30
        while replica.info("replication")["role"] != "master":
            assert time.monotonic() < deadline, "the replica never took over"
            time.sleep(0.1)
        redis_cluster_up()
        while len(acknowledged) < killed_at + 20:
            assert time.monotonic() < deadline, "staging never resumed after the failover"
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(timeout=30)
        replica.close()
        redis_cluster_up()
    assert not failures, failures
    last = acknowledged[-1]
    assert writer.staged_offset(P0) == last
    assert redis_cluster_client.zcard(writer.keys.rows(P0)) == last + 1
    assert writer.staged_totals()[0] == (last + 1) * ROWS
