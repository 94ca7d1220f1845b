"""The Redis client of every process, from the settings: URL, ACL password, TLS files."""

from __future__ import annotations

from urllib.parse import urlsplit

import redis

from config.settings import Settings, replace_url_password

# What a Redis restart, a LOADING reply or a cut connection raises: waited out, never fatal.
REDIS_TRANSIENT = (redis.ConnectionError, redis.TimeoutError)


def redis_client(settings: Settings, **extra: object) -> redis.Redis:
    """A client of the staging Redis: ``rediss://`` verifies the server against
    TICDC_SINK_REDIS_SSL_CA (the system's CAs when empty) and presents the client certificate;
    ``extra`` are more of redis-py's options (a connect timeout, say)."""
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
    return redis.Redis.from_url(url, **options)
