"""One typed settings object, read from an optional TOML file and ``TICDC_SINK_*`` variables.

Environment variables win over the file; the file wins over the defaults. A bad value fails at
start with a :class:`~config.errors.ConfigError` that names the variable and what is allowed.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)

from config.errors import ConfigError

ENV_PREFIX = "TICDC_SINK_"

# Loopback defaults: a fresh machine with `ticdc-sink services up` needs no configuration.
DEFAULT_KAFKA = "127.0.0.1:9092"
DEFAULT_GROUP = "ticdc-sink"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_DOWNSTREAM = "mysql://root@127.0.0.1:3306/"
DEFAULT_SPARK_MASTER = "local[*]"
DEFAULT_META_DB = "ticdc_sink"
# Staging limits: past either one, workers pause their partitions until the sink catches up.
DEFAULT_MAX_STAGED_ROWS = 2_000_000
DEFAULT_MAX_STAGED_BYTES = 1 << 30
# Threads a worker decodes each batch on: the native decoders let go of the GIL, so a second
# thread decodes on a second core while the first does its half.
DEFAULT_DECODE_THREADS = 2
# Micro-batch bound for the sink: large enough to amortize Spark's per-batch cost (~0.2 s).
DEFAULT_BATCH_ROWS = 200_000
# A batch's table with fewer rows loads over the driver's connection: on a 2-core local master a
# Spark load's fixed cost is only paid back from ~50k rows (0: every table through Spark).
DEFAULT_SPARK_MIN_ROWS = 50_000
# A worker silent this long loses its partitions to the others (Kafka's minimum is 6 s).
DEFAULT_SESSION_TIMEOUT_S = 30.0
# Faust's own default web port; 0 turns the worker's status page off.
DEFAULT_WEB_PORT = 6066

_IDENTIFIER = re.compile(r"^[A-Za-z0-9_$-]{1,64}$")
_HOST_PORT = re.compile(r"^[A-Za-z0-9_.:\[\]-]+:\d{1,5}$")
_SPARK_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|spark://.+|yarn|k8s://.+)$")


class Protocol(StrEnum):
    """The TiCDC protocols a topic can carry."""

    OPEN = "open"
    CRAFT = "craft"
    SIMPLE = "simple"
    SIMPLE_AVRO = "simple-avro"
    CANAL_JSON = "canal-json"


class OnError(StrEnum):
    """What a worker does with a message that does not decode."""

    DEADLETTER = "deadletter"
    HALT = "halt"


class OnRowError(StrEnum):
    """What the sink does with a row the downstream refuses (a NaN FLOAT, an invalid date)."""

    STOP = "stop"
    DEADLETTER = "deadletter"


class EventLoop(StrEnum):
    """The asyncio event loop a worker runs Faust on."""

    # libuv's loop: Faust hands every message through futures and tasks, which it runs faster.
    UVLOOP = "uvloop"
    ASYNCIO = "asyncio"


class Downstream(BaseModel):
    """A parsed ``mysql://user:password@host:port/`` address; the password never prints."""

    model_config = ConfigDict(frozen=True)

    user: str
    password: SecretStr
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> Downstream:
        parts = urlsplit(url)
        if parts.scheme != "mysql":
            raise ValueError("must start with mysql://")
        if not parts.hostname:
            raise ValueError("has no host")
        try:
            port = parts.port or 3306
        except ValueError as exc:
            raise ValueError("has an invalid port") from exc
        return cls(
            user=unquote(parts.username or "root"),
            password=SecretStr(unquote(parts.password or "")),
            host=parts.hostname,
            port=port,
        )

    def __str__(self) -> str:
        secret = ":***" if self.password.get_secret_value() else ""
        return f"mysql://{self.user}{secret}@{self.host}:{self.port}/"

    def jdbc_url(self) -> str:
        """The JDBC address; `mysql:`, since the `mariadb:` scheme makes Spark quote with `"`."""
        return f"jdbc:mysql://{self.host}:{self.port}/"


class Settings(BaseModel):
    """Everything a ticdc-sink process reads at start."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kafka: str = DEFAULT_KAFKA
    topics: tuple[str, ...] = ()
    protocol: Protocol = Protocol.OPEN
    group: str = DEFAULT_GROUP
    redis_url: str = DEFAULT_REDIS_URL
    downstream: Downstream = Field(default_factory=lambda: Downstream.parse(DEFAULT_DOWNSTREAM))
    spark_master: str = DEFAULT_SPARK_MASTER
    meta_db: str = DEFAULT_META_DB
    on_error: OnError = OnError.DEADLETTER
    # Stop by default: skipping a row leaves the downstream short of it, an operator's choice.
    on_row_error: OnRowError = OnRowError.STOP
    event_loop: EventLoop = EventLoop.UVLOOP
    max_staged_rows: int = Field(default=DEFAULT_MAX_STAGED_ROWS, gt=0)
    max_staged_bytes: int = Field(default=DEFAULT_MAX_STAGED_BYTES, gt=0)
    decode_threads: int = Field(default=DEFAULT_DECODE_THREADS, ge=1, le=64)
    batch_rows: int = Field(default=DEFAULT_BATCH_ROWS, gt=0)
    spark_min_rows: int = Field(default=DEFAULT_SPARK_MIN_ROWS, ge=0)
    web_port: int = Field(default=DEFAULT_WEB_PORT, ge=0, le=65535)
    session_timeout: float = Field(default=DEFAULT_SESSION_TIMEOUT_S, ge=6.0, le=300.0)
    metrics_port: int = Field(default=0, ge=0, le=65535)
    routes: str = ""
    skip_tables: str = ""

    @field_validator("kafka")
    @classmethod
    def _check_kafka(cls, value: str) -> str:
        servers = [s.strip() for s in value.split(",") if s.strip()]
        if not servers or not all(_HOST_PORT.match(s) for s in servers):
            raise ValueError("must be a comma list of host:port")
        return ",".join(servers)

    @field_validator("topics", mode="before")
    @classmethod
    def _split_topics(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(t.strip() for t in value.split(",") if t.strip())
        return value

    @field_validator("topics")
    @classmethod
    def _check_topics(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [t for t in value if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", t)]
        if bad:
            raise ValueError(f"topic names may hold only letters, digits, '.', '_', '-': {bad}")
        return value

    @field_validator("group", "meta_db")
    @classmethod
    def _check_identifier(cls, value: str) -> str:
        if not _IDENTIFIER.match(value):
            raise ValueError("must be 1-64 letters, digits, '_', '$' or '-'")
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_redis(cls, value: str) -> str:
        if urlsplit(value).scheme not in {"redis", "rediss", "unix"}:
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value

    @field_validator("downstream", mode="before")
    @classmethod
    def _parse_downstream(cls, value: Any) -> Any:
        return Downstream.parse(value) if isinstance(value, str) else value

    @field_validator("spark_master")
    @classmethod
    def _check_master(cls, value: str) -> str:
        if not _SPARK_MASTER.match(value):
            raise ValueError("must be local[*], local[N], spark://..., yarn or k8s://...")
        return value

    def describe(self) -> dict[str, str]:
        """Every setting as the text a log or ``--help`` may show (secrets masked)."""
        shown: dict[str, str] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = ",".join(value)
            shown[ENV_PREFIX + name.upper()] = str(value)
        return shown


def env_name(field: str) -> str:
    """The environment variable that sets ``field``."""
    return ENV_PREFIX + field.upper()


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError as exc:
        raise ConfigError(f"--config {path}: no such file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML: {exc}") from exc
    # Accept both a flat file and one with a [ticdc-sink] table.
    section = data.get("ticdc-sink", data)
    if not isinstance(section, dict):
        raise ConfigError(f"--config {path}: [ticdc-sink] must be a table")
    return {str(k).replace("-", "_"): v for k, v in section.items()}


def load_settings(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Read the settings: defaults, then the TOML file at ``path``, then the environment."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = _read_toml(Path(path)) if path else {}
    for name in Settings.model_fields:
        if env_name(name) in environ:
            values[name] = environ[env_name(name)]
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, values)) from None


def _explain(exc: ValidationError, values: Mapping[str, Any]) -> str:
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "?"
        if field not in Settings.model_fields:
            lines.append(f"unknown setting {field!r}; known: {', '.join(Settings.model_fields)}")
            continue
        shown = "***" if field == "downstream" else repr(values.get(field))
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "enum":
            allowed = error.get("ctx", {}).get("expected", "")
            message = f"must be one of {allowed}"
        lines.append(f"{env_name(field)}={shown}: {message}")
    return "invalid settings:\n  " + "\n  ".join(lines)
