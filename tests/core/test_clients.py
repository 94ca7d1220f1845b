"""How the settings become Kafka and Redis client arguments."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import pytest

import core.kafka_client
from config.errors import ConfigError
from config.settings import load_settings, replace_url_password
from core.kafka_client import faust_broker, kafka_options, riding_out
from core.outage import Outage
from core.redis_client import redis_client
from ticdc_sink.services.certificates import make_authority


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return make_authority(tmp_path_factory.mktemp("ca"))


def test_plaintext_kafka_takes_bootstrap_servers_only() -> None:
    options = kafka_options(load_settings(environ={"TICDC_SINK_KAFKA": "a:1,b:2"}), linger_ms=5)
    assert options == {
        "bootstrap_servers": "a:1,b:2",
        "security_protocol": "PLAINTEXT",
        "linger_ms": 5,
    }
    assert faust_broker(load_settings(environ={})) == {
        "broker": ["kafka://127.0.0.1:9092"],
        "broker_credentials": None,
    }


def test_sasl_ssl_kafka_verifies_the_broker_and_logs_in(authority, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    secret = tmp_path / "pw"
    secret.write_text("pw\n")
    settings = load_settings(
        environ={
            "TICDC_SINK_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "TICDC_SINK_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
            "TICDC_SINK_KAFKA_SASL_USERNAME": "app",
            "TICDC_SINK_KAFKA_SASL_PASSWORD_FILE": str(secret),
            "TICDC_SINK_KAFKA_SSL_CA": str(authority.ca),
            "TICDC_SINK_KAFKA_SSL_CERT": str(authority.client_cert),
            "TICDC_SINK_KAFKA_SSL_KEY": str(authority.client_key),
        }
    )
    options = kafka_options(settings)
    context = options.pop("ssl_context")
    assert options == {
        "bootstrap_servers": "127.0.0.1:9092",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "app",
        "sasl_plain_password": "pw",
    }
    # Hostname verification is on unless turned off.
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    credentials = faust_broker(settings)["broker_credentials"]
    assert (credentials.username, credentials.password) == ("app", "pw")
    assert credentials.mechanism.value == "SCRAM-SHA-256"
    assert credentials.protocol.value == "SASL_SSL"
    assert "pw" not in repr(credentials)
    unchecked = settings.updated({"kafka_ssl_check_hostname": False})
    assert not kafka_options(unchecked)["ssl_context"].check_hostname


def test_a_certificate_with_the_wrong_key_is_named_without_the_key(authority) -> None:  # type: ignore[no-untyped-def]
    settings = load_settings(
        environ={
            "TICDC_SINK_KAFKA_SECURITY_PROTOCOL": "SSL",
            "TICDC_SINK_KAFKA_SSL_CERT": str(authority.client_cert),
            "TICDC_SINK_KAFKA_SSL_KEY": str(authority.server_key),
        }
    )
    with pytest.raises(ConfigError, match="TICDC_SINK_KAFKA_SSL_CERT") as caught:
        kafka_options(settings)
    key_body = authority.server_key.read_text().splitlines()[1]
    assert key_body not in str(caught.value)


def test_the_redis_password_setting_replaces_the_urls(authority) -> None:  # type: ignore[no-untyped-def]
    assert replace_url_password("rediss://u:p@h:1/0", None) == "rediss://u@h:1/0"
    assert replace_url_password("redis://:p@h:1/0", None) == "redis://h:1/0"
    assert replace_url_password("redis://h:1/0", None) == "redis://h:1/0"
    settings = load_settings(
        environ={
            "TICDC_SINK_REDIS_URL": "rediss://u:old@h:6380/0",
            "TICDC_SINK_REDIS_PASSWORD": "new",
            "TICDC_SINK_REDIS_SSL_CA": str(authority.ca),
            "TICDC_SINK_REDIS_SSL_CERT": str(authority.client_cert),
            "TICDC_SINK_REDIS_SSL_KEY": str(authority.client_key),
        }
    )
    kwargs = redis_client(settings).connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"]) == ("u", "new")
    assert kwargs["ssl_ca_certs"] == str(authority.ca)
    assert kwargs["ssl_certfile"] == str(authority.client_cert)
    assert kwargs["ssl_cert_reqs"] == "required"


async def test_a_retriable_kafka_error_is_ridden_out_with_one_line_each_way(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from aiokafka.errors import NodeNotReadyError

    monkeypatch.setattr(core.kafka_client, "RETRY_FIRST_S", 0.001)
    answers: list[BaseException | str] = [NodeNotReadyError(1), NodeNotReadyError(1), "metadata"]

    async def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    outage = Outage("Kafka", logging.getLogger("test"))
    assert await riding_out(call, "describing topic t", outage) == "metadata"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "Kafka unavailable since" in lines[0] and "describing topic t" in lines[0]
    assert lines[1].startswith("Kafka back after") and "(2 retries)" in lines[1]


async def test_a_kafka_error_that_is_not_retriable_is_raised_at_once() -> None:
    from aiokafka.errors import TopicAuthorizationFailedError

    calls = 0

    async def call() -> None:
        nonlocal calls
        calls += 1
        raise TopicAuthorizationFailedError()

    with pytest.raises(TopicAuthorizationFailedError):
        await riding_out(call, "creating topic t", Outage("Kafka", logging.getLogger("test")))
    assert calls == 1
