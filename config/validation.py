"""Checks across settings, and a failed validation told in one line.

A check of one value sits with its field in config/settings.py; the checks here take several
settings of a group together (TLS files only with TLS, a login with SASL, a certificate with its
key), and :func:`explain` turns whatever failed into the line a start-up failure prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from pydantic import ValidationError

from config.choices import KafkaSecurity
from config.masking import shown_value
from config.names import FILE_SUFFIX, Names, env_name


class TlsFiles(NamedTuple):
    """A client's TLS files, each (its setting's name, its path); an empty path is not given."""

    ca: tuple[str, str]
    cert: tuple[str, str]
    key: tuple[str, str]

    def given(self) -> list[str]:
        """The variables of the files given."""
        return [env_name(name) for name, path in self if path]

    def check(self) -> None:
        """A certificate comes with its key, and each file given exists."""
        if bool(self.cert[1]) != bool(self.key[1]):
            raise ValueError(
                f"{env_name(self.cert[0])} and {env_name(self.key[0])} go together "
                "(a client certificate and its key)"
            )
        for name, path in self:
            if path and not Path(path).is_file():
                raise ValueError(f"{env_name(name)}={path}: no such file")


def check_kafka_security(
    protocol: KafkaSecurity, files: TlsFiles, username: str, has_password: bool
) -> None:
    """TLS files only with a TLS protocol, a SASL protocol with its login, and the files whole."""
    given = files.given()
    if given and not protocol.tls:
        raise ValueError(
            f"{', '.join(given)} need {env_name('kafka_security_protocol')}=SSL or SASL_SSL "
            f"(it is {protocol})"
        )
    if protocol.sasl and not (username and has_password):
        password = env_name("kafka_sasl_password")
        raise ValueError(
            f"{env_name('kafka_security_protocol')}={protocol} needs "
            f"{env_name('kafka_sasl_username')} and {password} (or {password}{FILE_SUFFIX})"
        )
    files.check()


def check_redis_tls(url: str, files: TlsFiles) -> None:
    """TLS files only with a ``rediss://`` address, and the files whole."""
    given = files.given()
    if given and urlsplit(url).scheme != "rediss":
        raise ValueError(f"{', '.join(given)} need a rediss:// {env_name('redis_url')}")
    files.check()


def check_redis_cluster_url(url: str) -> None:
    """A cluster is reached over TCP and has database 0 only."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        raise ValueError(f"{env_name('redis_cluster')} needs a redis:// or rediss:// address")
    if parts.path.strip("/") not in ("", "0"):
        raise ValueError(
            f"a Redis Cluster has database 0 only; {env_name('redis_url')} names "
            f"{parts.path.strip('/')}"
        )


def check_registry_tls(url: str, files: TlsFiles) -> None:
    """TLS files only with an ``https://`` registry, and the files whole."""
    given = files.given()
    if given and urlsplit(url).scheme != "https":
        raise ValueError(f"{', '.join(given)} need an https:// {env_name('schema_registry')}")
    files.check()


def explain(exc: ValidationError, values: Mapping[str, Any], names: Names) -> str:
    """The one line a failed validation of the raw ``values`` (by setting name) prints: each
    error with its variable and the value given, secrets masked."""
    lines = []
    for error in exc.errors():
        name = names.name_at(error["loc"]) if error["loc"] else None
        message = error["msg"].removeprefix("Value error, ")
        if name is None:
            # A check across settings: its message names them.
            lines.append(message)
            continue
        if error["type"] == "enum":
            message = f"must be one of {error.get('ctx', {}).get('expected', '')}"
        secret = name in names.secrets
        lines.append(
            f"{env_name(name)}={shown_value(name, values.get(name), secret=secret)}: {message}"
        )
    # One line: a start-up failure is read in a process supervisor's log, line by line.
    return "invalid settings: " + "; ".join(lines)
