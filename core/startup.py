"""At start, wait for the services a process needs, bounded by ``TICDC_SINK_STARTUP_TIMEOUT``.

Services started beside a worker or a sink (a deployment coming up, a restart) may answer a few
seconds later than the process; a wrong address never answers. Each service is probed until it
answers or the timeout runs out; then one error names the service, its address (password masked)
and the setting.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable

from config.errors import UnreachableError
from config.settings import Settings, env_name, masked
from core.kafka_client import kafka_addresses
from core.outage import RETRY_FIRST_S, Outage, next_delay
from core.redis_client import redis_client

log = logging.getLogger("ticdc_sink.startup")

# How long one probe of a TCP address may take.
PROBE_TIMEOUT_S = 3.0


def wait_for(name: str, address: str, probe: Callable[[], object], timeout: float) -> None:
    """Call ``probe`` until it returns, for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = RETRY_FIRST_S
    outage = Outage(f"{name} at {address}", log)
    while True:
        try:
            probe()
        except Exception as error:
            if time.monotonic() + delay > deadline:
                raise UnreachableError(
                    f"{name} at {address} did not answer within {env_name('startup_timeout')}="
                    f"{timeout:g} s ({type(error).__name__}: {error})"
                ) from None
            outage.failed(error, "starting")
            time.sleep(delay)
            delay = next_delay(delay)
            continue
        outage.answered()
        return


def wait_for_redis(settings: Settings) -> None:
    """Redis answers PING (a Redis still loading its append-only file does not)."""

    def probe() -> None:
        # The process's own client: TLS files and ACL password as every later call uses them.
        # Made in the probe: a cluster client asks a node for the slots as it is made.
        client = redis_client(settings, socket_connect_timeout=PROBE_TIMEOUT_S)
        try:
            client.ping()
        finally:
            client.close()

    wait_for("Redis", masked("redis_url", settings.redis.url), probe, settings.startup_timeout)


def wait_for_kafka(settings: Settings) -> None:
    """One of the Kafka bootstrap servers accepts a connection (Faust does the rest)."""

    def probe() -> None:
        error = tcp_refusal(kafka_addresses(settings), PROBE_TIMEOUT_S)
        if error is not None:
            raise error

    wait_for("Kafka", settings.kafka.bootstrap, probe, settings.startup_timeout)


def tcp_refusal(addresses: list[tuple[str, int]], timeout: float) -> OSError | None:
    """None when one of ``addresses`` takes a TCP connection within ``timeout`` seconds, else
    the error of the last one tried."""
    refusal: OSError = ConnectionRefusedError("no address to connect to")
    for address in addresses:
        try:
            socket.create_connection(address, timeout).close()
        except OSError as error:
            refusal = error
        else:
            return None
    return refusal
