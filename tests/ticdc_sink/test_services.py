"""Smoke tests of the real services that `ticdc-sink services up` starts."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from core.kafka_client import kafka_options
from ticdc_sink.services import all_services
from ticdc_sink.services.base import ServiceState

pytestmark = pytest.mark.integration

MAX_UNSIGNED_BIGINT = 18446744073709551615


def test_every_service_answers() -> None:
    states = {service.name: service.state() for service in all_services()}
    assert all(state is not ServiceState.STOPPED for state in states.values()), states


async def test_kafka_consumer_group_round_trip(
    kafka_admin: Any, settings: Any, unique: str
) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import NewTopic

    await kafka_admin.create_topics([NewTopic(unique, num_partitions=4, replication_factor=1)])
    described = await kafka_admin.describe_topics([unique])
    assert len(described[0]["partitions"]) == 4

    producer = AIOKafkaProducer(**kafka_options(settings, enable_idempotence=True))
    await producer.start()
    try:
        for i in range(40):
            await producer.send(unique, f"value-{i}".encode(), key=f"key-{i % 8}".encode())
        await producer.flush()
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        unique,
        **kafka_options(settings),
        group_id=unique,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    seen: dict[bytes, set[int]] = {}
    received = 0
    # The first group on a new broker waits for Kafka to create __consumer_offsets.
    deadline = asyncio.get_running_loop().time() + 60
    try:
        while received < 40:
            assert asyncio.get_running_loop().time() < deadline, f"{received} of 40 in 60 s"
            batches = await consumer.getmany(timeout_ms=1_000)
            for tp, messages in batches.items():
                received += len(messages)
                for message in messages:
                    seen.setdefault(message.key, set()).add(tp.partition)
        await consumer.commit()
    finally:
        await consumer.stop()

    # One key, one partition: the property TiCDC's row ordering depends on.
    assert all(len(partitions) == 1 for partitions in seen.values())
    committed = await kafka_admin.list_consumer_group_offsets(unique)
    assert sum(meta.offset for meta in committed.values()) == 40
    assert {tp for tp in committed} == {TopicPartition(unique, p) for p in range(4)}
    await kafka_admin.delete_topics([unique])


def test_redis_round_trip_with_aof(redis_client: Any, unique: str) -> None:
    assert redis_client.config_get("appendonly")["appendonly"] == "yes"
    redis_client.set(unique, b"\x00\xff payload")
    assert redis_client.get(unique) == b"\x00\xff payload"
    redis_client.delete(unique)


def test_mariadb_round_trip_keeps_unsigned_bigint_and_microseconds(
    mariadb_connect: Any, scratch_db: str
) -> None:
    stamp = dt.datetime(2024, 2, 29, 23, 59, 59, 999999)
    with mariadb_connect(database=scratch_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id BIGINT UNSIGNED PRIMARY KEY, at DATETIME(6))")
        cur.execute("INSERT INTO t VALUES (%s, %s)", (MAX_UNSIGNED_BIGINT, stamp))
        cur.execute("SELECT id, at, @@session.time_zone FROM t")
        assert cur.fetchone() == (MAX_UNSIGNED_BIGINT, stamp, "+00:00")


def test_spark_writes_and_reads_mariadb_over_jdbc(
    spark: Any, settings: Any, mariadb_connect: Any, scratch_db: str
) -> None:
    from spark_sink.load.spark_session import jdbc_options

    options = jdbc_options(settings.downstream.url, scratch_db)
    frame = spark.createDataFrame([(i, f"row {i}") for i in range(100)], "id INT, name STRING")
    frame.write.format("jdbc").options(**options, dbtable="spark_rt").mode("overwrite").save()

    back = spark.read.format("jdbc").options(**options, dbtable="spark_rt").load()
    assert sorted(tuple(r) for r in back.collect()) == [(i, f"row {i}") for i in range(100)]
    with mariadb_connect(database=scratch_db) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*), SUM(id) FROM spark_rt")
        assert cur.fetchone() == (100, 4950)


def test_services_up_again_reuses_what_runs() -> None:
    from ticdc_sink.services import services_up

    before = {service.name: service.our_pid() for service in all_services()}
    after = services_up()
    assert all(state is not ServiceState.STOPPED for _, state in after)
    assert {service.name: service.our_pid() for service, _ in after} == before


def test_redis_is_ready_only_once_it_answers_pong() -> None:
    import socket
    import threading

    from ticdc_sink.services.base import Endpoint
    from ticdc_sink.services.redis import RedisService

    assert RedisService().ready()
    # A Redis reading its append-only file back after a restart answers every command so.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        received: list[bytes] = []

        def answer_loading() -> None:
            conn, _ = listener.accept()
            with conn:
                received.append(conn.recv(64))
                conn.sendall(b"-LOADING Redis is loading the dataset in memory\r\n")

        server = threading.Thread(target=answer_loading, daemon=True)
        server.start()
        loading = RedisService()
        loading.endpoint = Endpoint("127.0.0.1", listener.getsockname()[1])
        assert not loading.ready()
        server.join(timeout=5)
        assert received == [b"PING\r\n"]


def test_tidb_runs_sql_and_keeps_unsigned_bigint_and_microseconds(
    tidb_connect: Any, unique: str
) -> None:
    stamp = dt.datetime(2024, 2, 29, 23, 59, 59, 999999)
    with tidb_connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT VERSION(), @@session.time_zone")
        version, zone = cur.fetchone()
        assert "TiDB" in version and zone == "+00:00"
        cur.execute(f"CREATE DATABASE `{unique}`")
        try:
            cur.execute(
                f"CREATE TABLE `{unique}`.t (id BIGINT UNSIGNED PRIMARY KEY, at DATETIME(6))"
            )
            cur.execute(f"INSERT INTO `{unique}`.t VALUES (%s, %s)", (MAX_UNSIGNED_BIGINT, stamp))
            cur.execute(f"SELECT id, at FROM `{unique}`.t")
            assert cur.fetchone() == (MAX_UNSIGNED_BIGINT, stamp)
            cur.execute("SELECT tidb_version()")
            assert "Store: unistore" in cur.fetchone()[0]
        finally:
            cur.execute(f"DROP DATABASE `{unique}`")


def test_status_shows_tidb_started_or_not(capsys: pytest.CaptureFixture[str]) -> None:
    from ticdc_sink.cli import main

    assert main(["services", "status"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "127.0.0.1:4000" in lines["tidb"]
    state = lines["tidb"].split("127.0.0.1:4000", 1)[1].strip()
    started = {str(ServiceState.OURS), str(ServiceState.FOREIGN)}
    assert state in started or state == "not started (ticdc-sink services up --tidb starts it)"
