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
# Reads of a claim-check object before its message is dead-lettered: the object is written
# before TiCDC sends the message, so only a failing store makes a read fail, and briefly.
DEFAULT_CLAIM_CHECK_ATTEMPTS = 3
# Where claim-check objects are read when unset: from each message's location as written.
DEFAULT_CLAIM_CHECK_STORAGE = ""
_CLAIM_CHECK_SCHEMES = ("file", "s3")
# An S3 URI may carry its secret key as TiCDC's URIs do; it never prints.
_SECRET_KEY = re.compile(r"(secret-access-key=)[^&]*")
# Where /metrics and the worker's status page listen: loopback unless the operator opens them.
DEFAULT_METRICS_HOST = "127.0.0.1"
# How often a worker logs its progress line: a stall shows within a minute.
DEFAULT_PROGRESS_INTERVAL_S = 30.0
# Dead letters kept in Redis: a flood of bad messages must not fill Redis (oldest trimmed first).
DEFAULT_DEAD_LETTER_MAX_ENTRIES = 10_000

_IDENTIFIER = re.compile(r"^[A-Za-z0-9_$-]{1,64}$")
_HOST_PORT = re.compile(r"^[A-Za-z0-9_.:\[\]-]+:\d{1,5}$")
_HOST = re.compile(r"^[A-Za-z0-9_.:\[\]-]{1,253}$")
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


class EventLoop(StrEnum):
    """The asyncio event loop a worker runs Faust on."""

    # libuv's loop: Faust hands every message through futures and tasks, which it runs faster.
    UVLOOP = "uvloop"
    ASYNCIO = "asyncio"


class LogLevel(StrEnum):
    """The least severe log records a process writes."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class LogFormat(StrEnum):
    """How log records are written: one text line, or one JSON object a line."""

    TEXT = "text"
    JSON = "json"


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
    event_loop: EventLoop = EventLoop.UVLOOP
    max_staged_rows: int = Field(default=DEFAULT_MAX_STAGED_ROWS, gt=0)
    max_staged_bytes: int = Field(default=DEFAULT_MAX_STAGED_BYTES, gt=0)
    decode_threads: int = Field(default=DEFAULT_DECODE_THREADS, ge=1, le=64)
    batch_rows: int = Field(default=DEFAULT_BATCH_ROWS, gt=0)
    spark_min_rows: int = Field(default=DEFAULT_SPARK_MIN_ROWS, ge=0)
    web_port: int = Field(default=DEFAULT_WEB_PORT, ge=0, le=65535)
    session_timeout: float = Field(default=DEFAULT_SESSION_TIMEOUT_S, ge=6.0, le=300.0)
    metrics_port: int = Field(default=0, ge=0, le=65535)
    metrics_host: str = DEFAULT_METRICS_HOST
    log_level: LogLevel = LogLevel.INFO
    log_format: LogFormat = LogFormat.TEXT
    dead_letter_max_entries: int = Field(default=DEFAULT_DEAD_LETTER_MAX_ENTRIES, ge=1)
    progress_interval: float = Field(default=DEFAULT_PROGRESS_INTERVAL_S, ge=1.0, le=3600.0)
    routes: str = ""
    skip_tables: str = ""
    claim_check_storage: str = Field(
        default=DEFAULT_CLAIM_CHECK_STORAGE,
        repr=False,  # its URI may carry a secret key: describe() shows it masked
        description="the changefeed's claim-check-storage-uri (file:// or s3://); objects are "
        "read by file name there, as TiCDC's consumer does",
    )
    claim_check_attempts: int = Field(
        default=DEFAULT_CLAIM_CHECK_ATTEMPTS,
        ge=1,
        le=20,
        description="reads of an unreadable claim-check object before its message is dead-lettered",
    )
    upstream: Downstream | None = Field(
        default=None,
        description="mysql:// address of the upstream TiDB: handle-key-only rows are read "
        "there by a snapshot read; unset, they are dead-lettered",
    )

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

    @field_validator("metrics_host")
    @classmethod
    def _check_host(cls, value: str) -> str:
        if not _HOST.match(value):
            raise ValueError("must be a host name or an IP address (0.0.0.0: every interface)")
        return value

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

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

    @field_validator("upstream", mode="before")
    @classmethod
    def _parse_upstream(cls, value: Any) -> Any:
        if isinstance(value, str):
            return Downstream.parse(value) if value else None
        return value

    @field_validator("claim_check_storage")
    @classmethod
    def _check_claim_check_storage(cls, value: str) -> str:
        if value and urlsplit(value).scheme not in _CLAIM_CHECK_SCHEMES:
            raise ValueError("must be empty or start with file:// or s3://")
        return value

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
            elif value is None:
                value = ""
            shown[ENV_PREFIX + name.upper()] = str(mask_secrets(name, str(value)))
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
        shown = repr(mask_secrets(field, values.get(field)))
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "enum":
            allowed = error.get("ctx", {}).get("expected", "")
            message = f"must be one of {allowed}"
        lines.append(f"{env_name(field)}={shown}: {message}")
    # One line: a start-up failure is read in a process supervisor's log, line by line.
    return "invalid settings: " + "; ".join(lines)


def mask_secrets(field: str, value: Any) -> Any:
    """``value`` as an error may show it: the password of an address and an S3 URI's secret key
    masked."""
    if not isinstance(value, str):
        return value
    if field in _ADDRESSES:
        return _URL_PASSWORD.sub(r"\1***@", value)
    if field == "claim_check_storage":
        return _SECRET_KEY.sub(r"\1***", value)
    return value


# Settings that are addresses and may carry a password.
_ADDRESSES = ("downstream", "upstream", "redis_url")
# The password part of a URL (``scheme://user:password@``).
_URL_PASSWORD = re.compile(r"^([a-z]+://[^:/@]*:)[^@]*@")
