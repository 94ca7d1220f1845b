"""Checks at start that Kafka and Redis take the configured TLS and credentials.

A wrong CA, a refused login or plaintext against a TLS-only port would otherwise surface as a
retry loop or a client library's traceback; here each becomes one
:class:`~config.errors.ConfigError` naming the setting to fix. A service that is merely down is
not judged here: the processes wait for it as they always have.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import redis

from config.errors import ConfigError
from config.settings import Settings, env_name
from core.kafka_client import kafka_options
from core.redis_client import RedisClient, redis_address, redis_client

# A probe's wait for a broker that accepts TCP but never answers (a TLS port asked in plaintext).
PROBE_TIMEOUT_MS = 10_000
# How many logins in a row a broker must drop before its listener's protocol is blamed, and the
# pause between them.
KAFKA_PROBES = 3
KAFKA_PROBE_PAUSE_S = 1.0


def tls_problem(error: BaseException | None, ca_setting: str, ca: str, where: str) -> str | None:
    """The message for a TLS failure in ``error`` (or the errors it came from), if it is one;
    ``ca`` is the CA file the setting names (empty: the system's CAs)."""
    if not ca:
        ca_setting += " (not set: the system's CAs)"
    while error is not None:
        if isinstance(error, ssl.SSLEOFError | ssl.SSLZeroReturnError):
            # Closed mid-handshake, as by a server restarting or killing clients: no verdict.
            return None
        if isinstance(error, ssl.SSLCertVerificationError):
            if "mismatch" in (error.verify_message or ""):
                return (
                    f"{ca_setting}: the certificate of {where} verifies but names another host "
                    f"({error.verify_message}); connect by a name the certificate holds"
                )
            return (
                f"{ca_setting}: the certificate of {where} does not verify against it "
                f"({error.verify_message})"
            )
        if isinstance(error, ssl.SSLError):
            reason = error.reason or error.strerror
            return f"{ca_setting} and the client certificate: TLS with {where} failed ({reason})"
        error = error.__cause__ or error.__context__
    return None


def kafka_problem(settings: Settings, error: BaseException) -> str | None:
    """What a failed connection to the first broker says about the settings (None: nothing)."""
    from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

    where = f"the broker at {settings.kafka.bootstrap.split(',')[0]}"
    protocol = settings.kafka.security_protocol
    found = tls_problem(error, env_name("kafka_ssl_ca"), settings.kafka.ssl_ca, where)
    if found:
        return found
    if isinstance(error, SaslAuthenticationFailed):
        return (
            f"{env_name('kafka_sasl_username')} / {env_name('kafka_sasl_password')}: {where} "
            f"refused the {settings.kafka.sasl_mechanism} login of {settings.kafka.sasl_username!r}"
        )
    if isinstance(error, KafkaConnectionError | TimeoutError | ConnectionResetError):
        other = "PLAINTEXT or SASL_PLAINTEXT" if protocol.tls else "SSL or SASL_SSL"
        return (
            f"{env_name('kafka_security_protocol')}={protocol}: {where} closed the connection "
            f"or never answered; does its listener take {other}?"
        )
    return None


async def check_kafka(settings: Settings) -> None:
    """Log in to the first bootstrap server; a settings problem raises ConfigError. A connection
    closed is only blamed on the security protocol when :data:`KAFKA_PROBES` attempts in a row
    meet it: a broker stopping or starting can close one, a listener of another protocol closes
    every one."""
    found = None
    for attempt in range(KAFKA_PROBES):
        if attempt:
            await asyncio.sleep(KAFKA_PROBE_PAUSE_S)
        error = await _kafka_login_error(settings)
        found = None if error is None else kafka_problem(settings, error)
        if found is None or not _dropped(error):
            break
    if found:
        raise ConfigError(found)


def confirmed_kafka_problem(settings: Settings, error: BaseException) -> str | None:
    """:func:`kafka_problem` for a call that failed with ``error``, a dropped connection blamed
    on the security protocol only as :func:`check_kafka` blames it: when that many logins in a
    row are dropped too (a broker stopping or starting drops a few). The logins run in an event
    loop on a thread of their own, and the caller waits for them (seconds: they pause between
    tries); a login that fails another way says nothing of the settings."""
    found = kafka_problem(settings, error)
    if found is None or not _dropped(error):
        return found
    with ThreadPoolExecutor(1) as pool:
        try:
            pool.submit(asyncio.run, check_kafka(settings)).result()
        except ConfigError as refused:
            return str(refused)
        except Exception:
            return None
    return None


async def _kafka_login_error(settings: Settings) -> BaseException | None:
    """What a connection to the first bootstrap server failed with (None: it logged in, or the
    broker refused TCP, which is waited for elsewhere)."""
    from aiokafka.conn import create_conn

    options = kafka_options(settings)
    host, port = settings.kafka.bootstrap.split(",")[0].rsplit(":", 1)
    security: dict[str, Any] = {
        k: v for k, v in options.items() if k not in {"bootstrap_servers"} and v is not None
    }
    try:
        conn = await create_conn(host, int(port), request_timeout_ms=PROBE_TIMEOUT_MS, **security)
    except ConnectionRefusedError:
        return None
    except Exception as error:
        return error
    conn.close()
    return None


def _dropped(error: BaseException | None) -> bool:
    from aiokafka.errors import KafkaConnectionError

    # A TLS client hello to a plaintext listener is answered with a reset.
    return isinstance(error, KafkaConnectionError | ConnectionResetError)


def redis_refusal(settings: Settings, error: BaseException) -> str | None:
    """The message for a server that answered and refused the login or the certificates."""
    parts = urlsplit(settings.redis.url)
    where = _where(settings)
    if isinstance(error, redis.AuthenticationError):
        return (
            f"{env_name('redis_password')} (or the password in {env_name('redis_url')}): "
            f"{where} refused the login of {parts.username or 'default'!r}"
        )
    found = tls_problem(error, env_name("redis_ssl_ca"), settings.redis.ssl_ca, where)
    if found:
        return found
    if isinstance(error, redis.ResponseError) and "NOAUTH" in str(error):
        return f"{env_name('redis_password')}: {where} needs a password"
    return None


def scheme_hint(settings: Settings, error: BaseException) -> str | None:
    """The message for a connection dropped or left hanging in the way a server speaking the
    other of plaintext and TLS does. A restart or a ``CLIENT KILL`` can look the same, so
    :func:`confirmed_redis_problem` asks the port which one it speaks before believing it."""
    scheme = urlsplit(settings.redis.url).scheme
    where = _where(settings)
    cause = error.__cause__ or error.__context__
    cut = isinstance(cause, ConnectionResetError | TimeoutError)
    dropped = isinstance(error, redis.ConnectionError) and (cut or "closed" in str(error))
    if scheme == "redis" and dropped:
        return (
            f"{env_name('redis_url')}: {where} dropped a plaintext connection; "
            "does it take TLS only (rediss://)?"
        )
    hung = isinstance(error, redis.ConnectionError | redis.TimeoutError) and (
        cut or "Timeout" in str(error)
    )
    if scheme == "rediss" and hung:
        return (
            f"{env_name('redis_url')}: {where} never finished a TLS handshake; "
            "does it take plaintext only (redis://)?"
        )
    return None


def confirmed_redis_problem(settings: Settings, error: BaseException) -> str | None:
    """What a failed PING says about the Redis settings (None: nothing to say): a refused login
    or certificate, or a scheme hint (:func:`scheme_hint`) kept only when the port does speak the
    other scheme: a TLS handshake completes against a ``redis://`` URL, or a plaintext PING is
    answered against a ``rediss://`` one."""
    found = redis_refusal(settings, error)
    if found:
        return found
    hint = scheme_hint(settings, error)
    if hint is None:
        return None
    address = redis_address(settings)
    scheme = urlsplit(settings.redis.url).scheme
    speaks_other = speaks_tls(address) if scheme == "redis" else answers_plaintext(address)
    return hint if speaks_other else None


def _where(settings: Settings) -> str:
    host, port = redis_address(settings)
    return f"Redis at {host}:{port}"


def speaks_tls(address: tuple[str, int]) -> bool:
    """Whether a TLS handshake with ``address`` gets as far as the server's answer; nothing is
    verified, as only the protocol is in question."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection(address, timeout=PROBE_TIMEOUT_MS / 1000) as raw,
            context.wrap_socket(raw, server_hostname=address[0]),
        ):
            return True
    except ssl.SSLError as error:
        # A server that wants a client certificate refuses with an alert: TLS all the same.
        return "ALERT" in (error.reason or "")
    except OSError:
        return False


def answers_plaintext(address: tuple[str, int]) -> bool:
    """Whether ``address`` answers a plaintext inline PING as Redis does (``+PONG``, or an
    error such as ``-NOAUTH``)."""
    try:
        with socket.create_connection(address, timeout=PROBE_TIMEOUT_MS / 1000) as raw:
            raw.sendall(b"PING\r\n")
            reply = raw.recv(64)
    except OSError:
        return False
    return reply[:1] in (b"+", b"-")


def check_redis(settings: Settings) -> None:
    """PING the staging Redis once; a settings problem raises ConfigError, a server down or
    dropping connections for a while nothing (the worker and the sink wait for it)."""
    try:
        client = redis_client(settings)
    except redis.RedisError as error:
        found = confirmed_redis_problem(settings, error)
        if found:
            raise ConfigError(found) from None
        return
    try:
        client.ping()
        if not settings.redis.cluster and _cluster_enabled(client):
            raise ConfigError(
                f"{env_name('redis_url')} names a node of a Redis Cluster: set "
                f"{env_name('redis_cluster')}=true"
            )
    except redis.RedisError as error:
        found = confirmed_redis_problem(settings, error)
        if found:
            raise ConfigError(found) from None
    finally:
        client.close()


def _cluster_enabled(client: RedisClient) -> bool:
    """Whether the server is a node of a Redis Cluster (INFO cluster; a managed Redis that
    refuses INFO is taken as one server)."""
    try:
        info = client.info("cluster")
    except redis.ResponseError:
        return False
    return bool(info.get("cluster_enabled"))
