"""The Redis client of every process, from the settings: URL, ACL password, TLS files, and
whether the URL names one server or a node of a Redis Cluster."""

from __future__ import annotations

from urllib.parse import urlsplit

import redis
from redis.cluster import RedisCluster
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    MasterDownError,
    ReadOnlyError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)

from config.errors import ConfigError
from config.settings import Settings, env_name, masked, replace_url_password

# A client of one Redis server or of a Redis Cluster: the commands staging sends are the same.
RedisClient = redis.Redis | RedisCluster

# What a Redis restart, a LOADING reply or a cut connection raises: waited out, never fatal. On a
# cluster also a master failing over (CLUSTERDOWN, a slot no node serves for a moment), a slot's
# keys half moved for longer than a batch retries them (TRYAGAIN), and a node asked during a
# failover before it knows its new role (READONLY: a former master back as a replica; MASTERDOWN:
# a replica cut from its master). A URL naming a replica for good is waited out too, saying so.
REDIS_TRANSIENT = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterDownError,
    ClusterError,
    SlotNotCoveredError,
    TryAgainError,
    ReadOnlyError,
    MasterDownError,
)


def redis_address(settings: Settings) -> tuple[str, int]:
    """The host and port the Redis URL names (TCP), as the client connects to them."""
    parts = urlsplit(settings.redis.url)
    return parts.hostname or "127.0.0.1", parts.port or 6379


def redis_client(settings: Settings, **extra: object) -> RedisClient:
    """A client of the staging Redis, or of the Redis Cluster (TICDC_SINK_REDIS_CLUSTER) whose
    node the URL names: ``rediss://`` verifies the server against TICDC_SINK_REDIS_SSL_CA (the
    system's CAs when empty) and presents the client certificate; ``extra`` are more of
    redis-py's options (a connect timeout, say)."""
    url = settings.redis.url
    options: dict[str, object] = dict(extra)
    password = settings.redis.password.get_secret_value()
    if password:
        # redis-py lets a password in the URL win over the keyword: the setting must win.
        url = replace_url_password(url, None)
        options["password"] = password
    if urlsplit(url).scheme == "rediss":
        options["ssl_cert_reqs"] = "required"
        if settings.redis.ssl_ca:
            options["ssl_ca_certs"] = settings.redis.ssl_ca
        if settings.redis.ssl_cert:
            options["ssl_certfile"] = settings.redis.ssl_cert
            options["ssl_keyfile"] = settings.redis.ssl_key
    if settings.redis.cluster:
        return _cluster_client(url, options)
    return redis.Redis.from_url(url, **options)


def _cluster_client(url: str, options: dict[str, object]) -> RedisCluster:
    """redis-py's cluster client, which asks a node for the cluster's slots as it is made: a
    node that does not answer is a ConnectionError (waited out like a Redis down), a server not
    in cluster mode a ConfigError naming the setting."""
    try:
        return RedisCluster.from_url(url, **options)
    except RedisClusterException as error:
        if "cluster mode is not enabled" in str(error).lower():
            raise ConfigError(
                f"{env_name('redis_cluster')}=true, but {masked('redis_url', url)} is a Redis "
                "without cluster mode (unset the setting for one server)"
            ) from None
        # What the node said (a refused login, a TLS failure), as one server's client says it.
        cause = error.__cause__ or error.__context__
        while cause is not None and not isinstance(cause, redis.RedisError):
            cause = cause.__cause__ or cause.__context__
        if cause is not None:
            raise cause from None
        raise redis.ConnectionError(str(error)) from None
