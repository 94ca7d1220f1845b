"""The Redis client of every process, from the settings: URL, ACL password, TLS files, and
whether the URL names one server or a node of a Redis Cluster."""

from __future__ import annotations

from urllib.parse import urlsplit

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ClusterDownError, ClusterError, SlotNotCoveredError, TryAgainError

from config.settings import Settings, replace_url_password

# A client of one Redis server or of a Redis Cluster: the commands staging sends are the same.
RedisClient = redis.Redis | RedisCluster

# What a Redis restart, a LOADING reply or a cut connection raises: waited out, never fatal. On a
# cluster also a master failing over (CLUSTERDOWN, a slot no node serves for a moment) and a
# slot's keys half moved for longer than a batch retries them (TRYAGAIN).
REDIS_TRANSIENT = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterDownError,
    ClusterError,
    SlotNotCoveredError,
    TryAgainError,
)


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
        return RedisCluster.from_url(url, **options)
    return redis.Redis.from_url(url, **options)
