"""What an operator reads when a one-shot command cannot go on: one line, never a traceback.

A service that does not answer names its setting and address (exit 1); a service that answers
but refuses the configured TLS or login names the setting to fix (exit 2, a settings problem);
anything else is a bug, and says so with where its traceback went.

The long-running ``worker`` and ``apply`` do not come here for an outage: they wait for the
service (``TICDC_SINK_STARTUP_TIMEOUT`` at start, with backoff after).
"""

from __future__ import annotations

import socket
import sys
import tempfile
import traceback
from dataclasses import dataclass
from urllib.parse import urlsplit

from config.names import env_name
from config.settings import Settings
from core.kafka_client import kafka_addresses
from core.redis_client import redis_address
from core.startup import tcp_refusal
from ticdc_sink.exit_codes import EXIT_BAD_INPUT, EXIT_FAILURE

# A one-shot command's wait for a service's TCP port before it calls it unreachable.
REACH_TIMEOUT_S = 5.0
# MySQL client errors that mean the server was not reached or the connection was lost.
MYSQL_UNREACHABLE = frozenset({2002, 2003, 2005, 2006, 2013})
# Where an operator takes a bug.
REPORT_TO = "the ticdc-sink issue tracker"


@dataclass(frozen=True, slots=True)
class Failure:
    """What to print (without the ``ticdc-sink <command>:`` prefix) and the exit code."""

    text: str
    code: int


def unreachable(setting: str, service: str, addresses: list[tuple[str, int]], why: str) -> str:
    where = ", ".join(f"{host}:{port}" for host, port in addresses)
    return f"{env_name(setting)}: cannot reach {service} at {where} ({why})"


def _tcp_problem(addresses: list[tuple[str, int]]) -> str | None:
    """None when one of ``addresses`` takes a TCP connection, else why the last did not."""
    error = tcp_refusal(addresses, REACH_TIMEOUT_S)
    if error is None:
        return None
    if isinstance(error, TimeoutError | socket.timeout):
        return f"no answer in {REACH_TIMEOUT_S:g} s"
    return error.strerror or type(error).__name__


def check_reachable(
    settings: Settings, *, kafka: bool = False, redis: bool = False, downstream: bool = False
) -> None:
    """Raise :class:`~config.errors.UnreachableError` naming the setting and the address of
    the first service asked for that takes no TCP connection."""
    from config.errors import UnreachableError

    checks = []
    if redis and urlsplit(settings.redis.url).scheme != "unix":
        checks.append(("redis_url", "Redis", [redis_address(settings)]))
    if kafka:
        checks.append(("kafka", "Kafka", kafka_addresses(settings)))
    if downstream:
        url = settings.downstream.url
        checks.append(("downstream", "the downstream", [(url.host, url.port)]))
    for setting, service, addresses in checks:
        why = _tcp_problem(addresses)
        if why is not None:
            raise UnreachableError(unreachable(setting, service, addresses, why))


def service_failure(settings: Settings, error: BaseException) -> Failure | None:
    """The line for a client library's error that a service being down, or refusing the
    settings, explains (None: this error is not one)."""
    import pymysql
    import redis as redis_errors
    from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError

    from core.connectivity import confirmed_kafka_problem, confirmed_redis_problem

    if isinstance(error, redis_errors.ConnectionError | redis_errors.TimeoutError):
        # A port that refuses TCP is down, whatever the TLS settings say.
        found = _tcp_problem([redis_address(settings)]) is None and confirmed_redis_problem(
            settings, error
        )
        if found:
            return Failure(found, EXIT_BAD_INPUT)
        return Failure(
            unreachable("redis_url", "Redis", [redis_address(settings)], str(error)), EXIT_FAILURE
        )
    if isinstance(error, pymysql.OperationalError | pymysql.InterfaceError) and (
        not error.args or error.args[0] in MYSQL_UNREACHABLE
    ):
        url = settings.downstream.url
        why = str(error.args[1]) if len(error.args) > 1 else str(error)
        return Failure(
            unreachable("downstream", "the downstream", [(url.host, url.port)], why), EXIT_FAILURE
        )
    if isinstance(error, KafkaConnectionError | KafkaTimeoutError | NodeNotReadyError):
        addresses = kafka_addresses(settings)
        if _tcp_problem(addresses) is None:
            # The port answers: a listener that wants another protocol, or a refused login.
            found = confirmed_kafka_problem(settings, error)
            if found:
                return Failure(found, EXIT_BAD_INPUT)
        return Failure(unreachable("kafka", "Kafka", addresses, str(error)), EXIT_FAILURE)
    return None


def bug_report(error: BaseException) -> str:
    """The line for an error nothing explains: it names the error, keeps the traceback in a
    file and says where to take it."""
    with tempfile.NamedTemporaryFile(
        "w", prefix="ticdc-sink-error-", suffix=".txt", delete=False
    ) as file:
        traceback.print_exception(error, file=file)
        file.write(f"python {sys.version}\n")
    what = str(error).splitlines()[0] if str(error) else ""
    return (
        f"unexpected error, a bug: {type(error).__name__}{': ' if what else ''}{what} "
        f"(traceback in {file.name}; please report it to {REPORT_TO} with that file)"
    )
