"""Kafka client settings in one place: bootstrap servers, TLS and SASL, for every client the
project makes (the worker's Faust app, status, recover, produce, tests and benchmarks)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiokafka.errors import KafkaError

from config.settings import Settings, env_name
from config.tls import client_context
from core.outage import RETRY_FIRST_S, Outage, next_delay

T = TypeVar("T")


def kafka_addresses(settings: Settings) -> list[tuple[str, int]]:
    """The bootstrap servers as (host, port), an IPv6 host without its brackets."""
    found = []
    for server in settings.kafka.bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        found.append((host.strip("[]"), int(port)))
    return found


def kafka_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of SSL and SASL_SSL (None for plaintext protocols)."""
    if not settings.kafka.security_protocol.tls:
        return None
    return client_context(
        ca=settings.kafka.ssl_ca,
        cert=settings.kafka.ssl_cert,
        key=settings.kafka.ssl_key,
        key_password=settings.kafka.ssl_key_password.get_secret_value(),
        check_hostname=settings.kafka.ssl_check_hostname,
        setting=env_name("kafka_ssl_cert") if settings.kafka.ssl_cert else env_name("kafka_ssl_ca"),
    )


def kafka_options(settings: Settings, **extra: Any) -> dict[str, Any]:
    """Keyword arguments of an aiokafka client (producer, consumer or admin) for ``settings``."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.kafka.bootstrap,
        "security_protocol": settings.kafka.security_protocol.value,
    }
    context = kafka_ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    if settings.kafka.security_protocol.sasl:
        options["sasl_mechanism"] = settings.kafka.sasl_mechanism.value
        options["sasl_plain_username"] = settings.kafka.sasl_username
        options["sasl_plain_password"] = settings.kafka.sasl_password.get_secret_value()
    return options | extra


async def riding_out(call: Callable[[], Awaitable[T]], doing: str, outage: Outage) -> T:
    """``call``'s result, called again while Kafka answers with an error its client calls
    retriable (a broker away, a leader moving). An admin client sends each request to one node it
    picks, which may be the broker that is down, until its metadata says otherwise."""
    delay = RETRY_FIRST_S
    while True:
        try:
            result = await call()
        except KafkaError as error:
            if not error.retriable:
                raise
            outage.failed(error, doing)
            await asyncio.sleep(delay)
            delay = next_delay(delay)
            continue
        outage.answered()
        return result


def faust_broker(settings: Settings) -> dict[str, Any]:
    """The Faust app's ``broker`` and ``broker_credentials`` for ``settings``."""
    import faust

    servers = [f"kafka://{server}" for server in settings.kafka.bootstrap.split(",")]
    credentials: Any = None
    context = kafka_ssl_context(settings)
    if settings.kafka.security_protocol.sasl:
        credentials = faust.SASLCredentials(
            username=settings.kafka.sasl_username,
            password=settings.kafka.sasl_password.get_secret_value(),
            ssl_context=context,
            mechanism=settings.kafka.sasl_mechanism.value,
        )
    elif context is not None:
        credentials = faust.SSLCredentials(context)
    return {"broker": servers, "broker_credentials": credentials}
