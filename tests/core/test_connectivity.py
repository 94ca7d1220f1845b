"""How a failed connection becomes one line naming the setting to fix."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator

import pytest
import redis
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

from config.errors import ConfigError
from config.settings import Settings, load_settings
from core.connectivity import (
    check_kafka,
    check_redis,
    confirmed_kafka_problem,
    confirmed_redis_problem,
    kafka_problem,
    redis_refusal,
    scheme_hint,
    tls_problem,
)


def _verify_error(message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, message)
    error.verify_message = message
    return error


def test_a_certificate_problem_names_the_ca_setting_even_when_wrapped() -> None:
    wrapped = ConnectionError("network")
    wrapped.__context__ = _verify_error("self-signed certificate in certificate chain")
    found = tls_problem(wrapped, "TICDC_SINK_REDIS_SSL_CA", "/ca.pem", "Redis at h:1")
    assert found == (
        "TICDC_SINK_REDIS_SSL_CA: the certificate of Redis at h:1 does not verify against it "
        "(self-signed certificate in certificate chain)"
    )
    unset = tls_problem(_verify_error("x"), "TICDC_SINK_KAFKA_SSL_CA", "", "b")
    assert unset is not None and "(not set: the system's CAs)" in unset
    mismatch = tls_problem(
        _verify_error("Hostname mismatch, certificate is not valid for 'x'."),
        "TICDC_SINK_KAFKA_SSL_CA",
        "/ca.pem",
        "the broker at x:9093",
    )
    assert mismatch is not None and "names another host" in mismatch
    assert tls_problem(ConnectionRefusedError(), "S", "/ca.pem", "w") is None


def test_kafka_login_and_protocol_problems_name_their_settings() -> None:
    sasl = load_settings(
        environ={
            "TICDC_SINK_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "TICDC_SINK_KAFKA_SASL_USERNAME": "app",
            "TICDC_SINK_KAFKA_SASL_PASSWORD": "hunter2",
        }
    )
    refused = kafka_problem(sasl, SaslAuthenticationFailed("invalid credentials"))
    assert refused is not None
    assert refused.startswith("TICDC_SINK_KAFKA_SASL_USERNAME / TICDC_SINK_KAFKA_SASL_PASSWORD")
    assert "hunter2" not in refused
    closed = kafka_problem(sasl, KafkaConnectionError("closed"))
    assert closed is not None and closed.startswith(
        "TICDC_SINK_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT"
    )
    assert kafka_problem(sasl, OSError("unreachable")) is None


def test_redis_login_and_plaintext_problems_name_their_settings() -> None:
    settings = load_settings(environ={"TICDC_SINK_REDIS_URL": "redis://app:hunter2@r:6380/0"})
    refused = redis_refusal(settings, redis.AuthenticationError("invalid password"))
    assert refused is not None and refused.startswith("TICDC_SINK_REDIS_PASSWORD")
    assert "hunter2" not in refused
    dropped = redis.ConnectionError("network")
    dropped.__context__ = ConnectionResetError(104, "reset")
    found = scheme_hint(settings, dropped)
    assert found is not None and found.startswith("TICDC_SINK_REDIS_URL:")
    assert "rediss://" in found
    refused_tcp = redis.ConnectionError("refused")
    assert redis_refusal(settings, refused_tcp) is None
    assert scheme_hint(settings, refused_tcp) is None


def test_a_dropped_connection_to_a_redis_that_answers_again_blames_no_setting(
    settings: Settings, redis_client: object
) -> None:
    # What a failover or a CLIENT KILL leaves: one dropped connection, and then PING answers.
    dropped = redis.ConnectionError("Connection closed by server.")
    assert scheme_hint(settings, dropped) is not None
    assert confirmed_redis_problem(settings, dropped) is None
    refused = redis.AuthenticationError("invalid password")
    assert confirmed_redis_problem(settings, refused) == redis_refusal(settings, refused)


@contextlib.asynccontextmanager
async def dropping_first(to: str, drops: int) -> AsyncIterator[str]:
    """A loopback relay to ``to`` that closes its first ``drops`` connections at once, as a
    broker stopping or starting does: the address to connect to."""
    host, port = to.rsplit(":", 1)
    accepted = 0

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        if accepted <= drops:
            writer.close()
            return
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    async with server:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_a_broker_that_drops_one_login_is_not_blamed_on_the_protocol(
    settings: Settings, kafka_admin: object
) -> None:
    async with dropping_first(settings.kafka.bootstrap.split(",")[0], drops=1) as address:
        await check_kafka(settings.updated({"kafka": address}))
    async with dropping_first(settings.kafka.bootstrap.split(",")[0], drops=10) as address:
        with pytest.raises(ConfigError, match="TICDC_SINK_KAFKA_SECURITY_PROTOCOL=PLAINTEXT"):
            await check_kafka(settings.updated({"kafka": address}))


async def test_a_call_that_lost_its_broker_blames_the_protocol_only_when_logins_drop_too(
    settings: Settings, kafka_admin: object
) -> None:
    # As a one-shot command's last line does: the call's error, then logins to tell.
    lost = KafkaConnectionError("Connection at 127.0.0.1 closed")
    async with dropping_first(settings.kafka.bootstrap.split(",")[0], drops=1) as address:
        through = settings.updated({"kafka": address})
        assert await asyncio.to_thread(confirmed_kafka_problem, through, lost) is None
    async with dropping_first(settings.kafka.bootstrap.split(",")[0], drops=10) as address:
        through = settings.updated({"kafka": address})
        found = await asyncio.to_thread(confirmed_kafka_problem, through, lost)
        assert found is not None and "TICDC_SINK_KAFKA_SECURITY_PROTOCOL=PLAINTEXT" in found
    # Refused logins need no more logins to tell.
    refused = SaslAuthenticationFailed("bad password")
    assert confirmed_kafka_problem(settings, refused) == kafka_problem(settings, refused)


async def test_a_redis_that_drops_connections_at_start_is_waited_for_not_blamed(
    settings: Settings, redis_client: object
) -> None:
    # As a CLIENT KILL or a restart during the worker's start check: every connection dropped.
    server = settings.redis.url.removeprefix("redis://").split("/")[0]
    async with dropping_first(server, drops=100) as address:
        through = settings.updated({"redis_url": f"redis://{address}/0"})
        await asyncio.to_thread(check_redis, through)


def test_a_closed_tls_handshake_is_no_verdict_on_the_ca() -> None:
    closed = redis.ConnectionError("network")
    closed.__context__ = ssl.SSLEOFError(8, "EOF occurred in violation of protocol")
    assert tls_problem(closed, "TICDC_SINK_REDIS_SSL_CA", "/ca.pem", "Redis at h:1") is None


def test_tls_against_a_plaintext_port_names_the_setting() -> None:
    ssl_kafka = load_settings(environ={"TICDC_SINK_KAFKA_SECURITY_PROTOCOL": "SSL"})
    closed = kafka_problem(ssl_kafka, KafkaConnectionError("Unable to bootstrap"))
    assert closed is not None and closed.startswith("TICDC_SINK_KAFKA_SECURITY_PROTOCOL=SSL:")
    assert "PLAINTEXT" in closed
    tls_redis = load_settings(environ={"TICDC_SINK_REDIS_URL": "rediss://r:6379/0"})
    found = scheme_hint(tls_redis, redis.TimeoutError("Timeout connecting to server"))
    assert found is not None and found.startswith("TICDC_SINK_REDIS_URL:")
    assert "redis://" in found


def test_a_cluster_setting_that_does_not_match_the_server_names_the_setting(
    settings: Settings, redis_cluster_settings: Settings
) -> None:
    one_server_as_cluster = settings.updated({"redis_cluster": True})
    with pytest.raises(ConfigError, match="TICDC_SINK_REDIS_CLUSTER=true, but redis://"):
        check_redis(one_server_as_cluster)
    node_as_one_server = redis_cluster_settings.updated({"redis_cluster": False})
    with pytest.raises(ConfigError, match="names a node of a Redis Cluster: set TICDC_SINK_REDIS_"):
        check_redis(node_as_one_server)
    check_redis(redis_cluster_settings)


def test_a_cluster_url_is_tcp_and_database_0() -> None:
    for url, problem in (
        ("unix:///tmp/r.sock", "needs a redis://"),
        ("redis://h:7000/2", "database 0"),
    ):
        with pytest.raises(ConfigError, match=problem):
            load_settings(environ={"TICDC_SINK_REDIS_URL": url, "TICDC_SINK_REDIS_CLUSTER": "true"})
