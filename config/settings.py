"""One typed settings object, read from an optional TOML file and ``TICDC_SINK_*`` variables.

The settings come in groups (``settings.kafka.bootstrap``, ``settings.sink.batch_rows``), and each
keeps the one name it always had: its variable is ``TICDC_SINK_`` + the name in capitals
(``kafka`` -> ``TICDC_SINK_KAFKA``), and a TOML file gives it by that name (``kafka = "..."``)
or inside its group's table (``[kafka]`` ``bootstrap = "..."``). Environment variables win over
the file; the file wins over the defaults. A bad value fails at start with a
:class:`~config.errors.ConfigError` that names the variable and what is allowed.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from config.choices import EventLoop as EventLoop
from config.choices import KafkaSecurity as KafkaSecurity
from config.choices import LogFormat as LogFormat
from config.choices import LogLevel as LogLevel
from config.choices import OnDDLError as OnDDLError
from config.choices import OnError as OnError
from config.choices import OnRowError as OnRowError
from config.choices import OnSchemaDrift as OnSchemaDrift
from config.choices import Protocol as Protocol
from config.choices import SaslMechanism as SaslMechanism
from config.choices import SslMode as SslMode
from config.downstream import DOWNSTREAM_PARAMETERS as DOWNSTREAM_PARAMETERS
from config.downstream import MASK as MASK
from config.downstream import Downstream as Downstream
from config.downstream import replace_url_password as replace_url_password
from config.errors import ConfigError
from config.routes import Route as Route
from config.routes import parse_routes as parse_routes
from config.routes import parse_table_patterns as parse_table_patterns

ENV_PREFIX = "TICDC_SINK_"

_IDENTIFIER = re.compile(r"^[A-Za-z0-9_$-]{1,64}$")
_HOST_PORT = re.compile(r"^[A-Za-z0-9_.:\[\]-]+:\d{1,5}$")
_HOST = re.compile(r"^[A-Za-z0-9_.:\[\]-]{1,253}$")
_SPARK_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|spark://.+|yarn|k8s://.+)$")


# --- Defaults: every setting's, in one place -------------------------------------------------

# Loopback defaults: a fresh machine with `ticdc-sink services up` needs no configuration.
DEFAULT_KAFKA = "127.0.0.1:9092"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_DOWNSTREAM = "mysql://root@127.0.0.1:3306/"
DEFAULT_SPARK_MASTER = "local[*]"
# One pipeline per machine needs no name of its own; a second one must be given another.
DEFAULT_GROUP = "ticdc-sink"
# No topics until the operator names them: a worker without any refuses to start.
DEFAULT_TOPICS: tuple[str, ...] = ()
# TiCDC's own default protocol for Kafka sinks.
DEFAULT_PROTOCOL = Protocol.OPEN
# Where Debian's libmariadb-java puts MariaDB Connector/J, which Spark's JDBC loads need.
DEFAULT_JDBC_JAR = "/usr/share/java/mariadb-java-client.jar"
# The checkpoint table's database downstream, apart from the replicated ones.
DEFAULT_META_DB = "ticdc_sink"
# A bad message must not stop the partition behind it: it is kept aside, readable.
DEFAULT_ON_ERROR = OnError.DEADLETTER
# Stop by default: skipping a row leaves the downstream short of it, an operator's choice.
DEFAULT_ON_ROW_ERROR = OnRowError.STOP
# Stop by default: a skipped DDL may leave the downstream's tables unlike the upstream's.
DEFAULT_ON_DDL_ERROR = OnDDLError.STOP
# Stop by default: dropping changes is the operator's choice, made knowing what is lost.
DEFAULT_ON_SCHEMA_DRIFT = OnSchemaDrift.STOP
# libuv's loop: Faust hands every message through futures and tasks, which it runs faster.
DEFAULT_EVENT_LOOP = EventLoop.UVLOOP
# Staging limits: past either one, workers pause their partitions until the sink catches up.
DEFAULT_MAX_STAGED_ROWS = 2_000_000
DEFAULT_MAX_STAGED_BYTES = 1 << 30
# Threads a worker decodes each batch on: the native decoders let go of the GIL, so a second
# thread decodes on a second core while the first does its half.
DEFAULT_DECODE_THREADS = 2
# Micro-batch bound for the sink: large enough to amortize Spark's per-batch cost (~0.2 s).
DEFAULT_BATCH_ROWS = 200_000
# Tables load their upserts straight into themselves (LOAD DATA, REPLACE by key) where that equals
# an upsert: one write per row instead of three through a staging table.
DEFAULT_LOAD_IN_PLACE = True
# A batch's table with fewer rows loads its staging table over the driver's connection: on a 2-core
# local master a Spark load's fixed cost is only paid back from ~50k rows (0: every staging table
# through Spark).
DEFAULT_SPARK_MIN_ROWS = 50_000
# A worker silent this long loses its partitions to the others (Kafka's minimum is 6 s).
DEFAULT_SESSION_TIMEOUT_S = 30.0
# Faust's own default web port; 0 turns the worker's status page off.
DEFAULT_WEB_PORT = 6066
# /metrics is off unless the operator gives it a port.
DEFAULT_METRICS_PORT = 0
# Reads of a claim-check object before its message is dead-lettered: the object is written
# before TiCDC sends the message, so only a failing store makes a read fail, and briefly.
DEFAULT_CLAIM_CHECK_ATTEMPTS = 3
# Where claim-check objects are read when unset: from each message's location as written.
DEFAULT_CLAIM_CHECK_STORAGE = ""
# Where /metrics and the worker's status page listen: loopback unless the operator opens them.
DEFAULT_METRICS_HOST = "127.0.0.1"
# Informational records: progress lines, outages, moved watermarks.
DEFAULT_LOG_LEVEL = LogLevel.INFO
# One line a record, for a person reading a terminal or a supervisor's log.
DEFAULT_LOG_FORMAT = LogFormat.TEXT
# How often a worker logs its progress line: a stall shows within a minute.
DEFAULT_PROGRESS_INTERVAL_S = 30.0
# Dead letters kept in Redis: a flood of bad messages must not fill Redis (oldest trimmed first).
DEFAULT_DEAD_LETTER_MAX_ENTRIES = 10_000
# Seconds a partition read to its end stays quiet before its watermark is moved to what it
# staged (for streams without watermarks: Debezium); 0: off, only TiCDC's resolved events count.
DEFAULT_RESOLVE_WHEN_IDLE_S = 0.0
# How long a starting worker or sink waits for Redis, Kafka and the downstream to answer: long
# enough for services started beside it (Kafka takes ~10 s), short enough to notice a wrong address.
DEFAULT_STARTUP_TIMEOUT_S = 60.0
# Plaintext, as the local development broker speaks; hosted Kafka mostly wants SASL_SSL.
DEFAULT_KAFKA_SECURITY = KafkaSecurity.PLAINTEXT
# Kafka's own default mechanism.
DEFAULT_SASL_MECHANISM = SaslMechanism.PLAIN
# A broker's certificate must name the host connected to, as every TLS client checks.
DEFAULT_KAFKA_SSL_CHECK_HOSTNAME = True
# No routes and no skipped tables: every table replicates under its own name.
DEFAULT_ROUTES: tuple[Route, ...] = ()
DEFAULT_SKIP_TABLES: tuple[str, ...] = ()

# A text or secret setting left empty is not set (a file path, a user name, a password).
UNSET = ""
NO_SECRET = SecretStr(UNSET)

_CLAIM_CHECK_SCHEMES = ("file", "s3")
# An S3 URI may carry its secret key as TiCDC's URIs do; it never prints.
_SECRET_KEY = re.compile(r"(secret-access-key=)[^&]*")
# What every secret prints as: in logs, --help, status, errors and metrics.
# Secret settings: each can also come from a file named by <VARIABLE>_FILE (container secrets).
SECRET_FIELDS = (
    "kafka_sasl_password",
    "kafka_ssl_key_password",
    "redis_password",
    "downstream_password",
)
FILE_SUFFIX = "_FILE"


# --- The groups ------------------------------------------------------------------------------


class SettingsGroup(BaseModel):
    """A group of settings. Each field's alias is the setting's own name: its variable is
    ``TICDC_SINK_<NAME>`` and a flat TOML file's key is ``<name>``; the field's name is its key
    in the group's TOML table."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True
    )


def _identifier(value: str) -> str:
    if not _IDENTIFIER.match(value):
        raise ValueError("must be 1-64 letters, digits, '_', '$' or '-'")
    return value


def _check_files(*named: tuple[str, str]) -> None:
    """Each (setting name, path) that is set names a file that exists."""
    for name, path in named:
        if path and not Path(path).is_file():
            raise ValueError(f"{env_name(name)}={path}: no such file")


def _pair(cert: str, key: str) -> str:
    return f"{env_name(cert)} and {env_name(key)} go together (a client certificate and its key)"


def _given(secret: SecretStr) -> bool:
    return bool(secret.get_secret_value())


class KafkaSettings(SettingsGroup):
    """Kafka: where the changes are read, and how they are encoded."""

    bootstrap: str = Field(
        default=DEFAULT_KAFKA,
        alias="kafka",
        description="Kafka bootstrap servers, comma list of host:port",
    )
    topics: tuple[str, ...] = Field(
        default=DEFAULT_TOPICS, alias="topics", description="topics to consume, comma list"
    )
    protocol: Protocol = Field(
        default=DEFAULT_PROTOCOL,
        alias="protocol",
        description="the topics' TiCDC protocol: `open`, `craft`, `simple`, `simple-avro`, "
        "`canal-json`, `debezium`",
    )
    session_timeout: float = Field(
        default=DEFAULT_SESSION_TIMEOUT_S,
        ge=6.0,
        le=300.0,
        alias="session_timeout",
        description="seconds before a silent worker's partitions move (6-300)",
    )
    security_protocol: KafkaSecurity = Field(
        default=DEFAULT_KAFKA_SECURITY,
        alias="kafka_security_protocol",
        description="`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`",
    )
    sasl_mechanism: SaslMechanism = Field(
        default=DEFAULT_SASL_MECHANISM,
        alias="kafka_sasl_mechanism",
        description="`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`",
    )
    sasl_username: str = Field(
        default=UNSET,
        alias="kafka_sasl_username",
        description="SASL login name (needed by the `SASL_*` protocols)",
    )
    sasl_password: SecretStr = Field(
        default=NO_SECRET,
        alias="kafka_sasl_password",
        description="SASL password (needed by the `SASL_*` protocols)",
    )
    ssl_ca: str = Field(
        default=UNSET,
        alias="kafka_ssl_ca",
        description="PEM file of the CA that signed the brokers' certificates "
        "(unset: the system's CAs)",
    )
    ssl_cert: str = Field(
        default=UNSET, alias="kafka_ssl_cert", description="client certificate file (PEM), for mTLS"
    )
    ssl_key: str = Field(
        default=UNSET, alias="kafka_ssl_key", description="the client certificate's key file (PEM)"
    )
    ssl_key_password: SecretStr = Field(
        default=NO_SECRET, alias="kafka_ssl_key_password", description="the client key's passphrase"
    )
    ssl_check_hostname: bool = Field(
        default=DEFAULT_KAFKA_SSL_CHECK_HOSTNAME,
        alias="kafka_ssl_check_hostname",
        description="check that the broker's certificate names the host connected to",
    )

    @field_validator("bootstrap")
    @classmethod
    def _check_bootstrap(cls, value: str) -> str:
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

    @model_validator(mode="after")
    def _check_security(self) -> KafkaSettings:
        """TLS files only with a TLS protocol, a login with SASL, a certificate with its key."""
        protocol = self.security_protocol
        tls_files = (
            ("kafka_ssl_ca", self.ssl_ca),
            ("kafka_ssl_cert", self.ssl_cert),
            ("kafka_ssl_key", self.ssl_key),
        )
        if not protocol.tls:
            given = [env_name(name) for name, path in tls_files if path]
            if given:
                raise ValueError(
                    f"{', '.join(given)} need {env_name('kafka_security_protocol')}=SSL or "
                    f"SASL_SSL (it is {protocol})"
                )
        if protocol.sasl and not (self.sasl_username and _given(self.sasl_password)):
            raise ValueError(
                f"{env_name('kafka_security_protocol')}={protocol} needs "
                f"{env_name('kafka_sasl_username')} and {env_name('kafka_sasl_password')} "
                f"(or {env_name('kafka_sasl_password')}{FILE_SUFFIX})"
            )
        if bool(self.ssl_cert) != bool(self.ssl_key):
            raise ValueError(_pair("kafka_ssl_cert", "kafka_ssl_key"))
        _check_files(*tls_files)
        return self


class RedisSettings(SettingsGroup):
    """Redis: the staging store (rows, watermarks, schemas, the leader lease, dead letters)."""

    url: str = Field(
        default=DEFAULT_REDIS_URL,
        alias="redis_url",
        description="staging Redis: `redis://`, `rediss://` (TLS) or `unix://`, optionally "
        "`user:password@`",
    )
    password: SecretStr = Field(
        default=NO_SECRET,
        alias="redis_password",
        description="Redis (ACL) password; replaces one in `TICDC_SINK_REDIS_URL`",
    )
    ssl_ca: str = Field(
        default=UNSET,
        alias="redis_ssl_ca",
        description="with `rediss://`: CA file (unset: the system's CAs)",
    )
    ssl_cert: str = Field(
        default=UNSET,
        alias="redis_ssl_cert",
        description="with `rediss://`: client certificate file",
    )
    ssl_key: str = Field(
        default=UNSET,
        alias="redis_ssl_key",
        description="with `rediss://`: the client certificate's key",
    )
    dead_letter_max_entries: int = Field(
        default=DEFAULT_DEAD_LETTER_MAX_ENTRIES,
        ge=1,
        alias="dead_letter_max_entries",
        description="dead letters kept in Redis; the oldest are trimmed past it",
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if urlsplit(value).scheme not in {"redis", "rediss", "unix"}:
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value

    @model_validator(mode="after")
    def _check_tls(self) -> RedisSettings:
        tls_files = (
            ("redis_ssl_ca", self.ssl_ca),
            ("redis_ssl_cert", self.ssl_cert),
            ("redis_ssl_key", self.ssl_key),
        )
        given = [env_name(name) for name, path in tls_files if path]
        if given and urlsplit(self.url).scheme != "rediss":
            raise ValueError(f"{', '.join(given)} need a rediss:// {env_name('redis_url')}")
        if bool(self.ssl_cert) != bool(self.ssl_key):
            raise ValueError(_pair("redis_ssl_cert", "redis_ssl_key"))
        _check_files(*tls_files)
        return self

    def __repr_args__(self) -> Any:
        # repr() and str() show the URL with its password masked, like describe().
        for name, value in super().__repr_args__():
            yield name, masked("redis_url", value) if name == "url" else value


class DownstreamSettings(SettingsGroup):
    """The downstream: the MySQL-compatible database changes are applied to."""

    url: Downstream = Field(
        default_factory=lambda: Downstream.parse(DEFAULT_DOWNSTREAM),
        alias="downstream",
        description="`mysql://user:password@host:port/`, optionally "
        "`?ssl-mode=…&ssl-ca=…&ssl-cert=…&ssl-key=…`",
    )
    password: SecretStr = Field(
        default=NO_SECRET,
        alias="downstream_password",
        description="downstream password; replaces the one in `TICDC_SINK_DOWNSTREAM`",
    )
    ssl_mode: SslMode | None = Field(
        default=None,
        alias="downstream_ssl_mode",
        description="the URL's `ssl-mode` as a setting (`disabled`, `preferred`, `required`, "
        "`verify-ca`, `verify-identity`); replaces the parameter",
    )
    ssl_ca: str = Field(
        default=UNSET,
        alias="downstream_ssl_ca",
        description="the URL's `ssl-ca` (CA file) as a setting; replaces the parameter",
    )
    ssl_cert: str = Field(
        default=UNSET,
        alias="downstream_ssl_cert",
        description="the URL's `ssl-cert` (client certificate) as a setting; replaces the "
        "parameter",
    )
    ssl_key: str = Field(
        default=UNSET,
        alias="downstream_ssl_key",
        description="the URL's `ssl-key` (client key) as a setting; replaces the parameter",
    )
    meta_db: str = Field(
        default=DEFAULT_META_DB,
        alias="meta_db",
        description="downstream database for the checkpoint",
    )

    @field_validator("url", mode="before")
    @classmethod
    def _parse_url(cls, value: Any) -> Any:
        return Downstream.parse(value) if isinstance(value, str) else value

    @field_validator("ssl_mode", mode="before")
    @classmethod
    def _lower_ssl_mode(cls, value: Any) -> Any:
        return value.lower() or None if isinstance(value, str) else value

    @field_validator("meta_db")
    @classmethod
    def _check_meta_db(cls, value: str) -> str:
        return _identifier(value)

    @model_validator(mode="after")
    def _fold_into_url(self) -> DownstreamSettings:
        """Fold the password and ssl-* settings into the address, then check its TLS whole."""
        overrides = {
            "password": self.password if _given(self.password) else None,
            "ssl_mode": self.ssl_mode,
            "ssl_ca": self.ssl_ca,
            "ssl_cert": self.ssl_cert,
            "ssl_key": self.ssl_key,
        }
        update = {k: v for k, v in overrides.items() if v}
        if update:
            # Frozen model: the merged address replaces the parsed one once, while validating.
            object.__setattr__(self, "url", self.url.model_copy(update=update))
        try:
            self.url.check_tls()
        except ValueError as exc:
            raise ValueError(f"{env_name('downstream')}: {exc}") from None
        return self


class WorkerSettings(SettingsGroup):
    """The worker: decoding and staging, backpressure, its status page and progress lines."""

    on_error: OnError = Field(
        default=DEFAULT_ON_ERROR,
        alias="on_error",
        description="`deadletter` or `halt` for undecodable messages",
    )
    event_loop: EventLoop = Field(
        default=DEFAULT_EVENT_LOOP,
        alias="event_loop",
        description="the worker's event loop: `uvloop` (faster Faust delivery) or `asyncio`",
    )
    decode_threads: int = Field(
        default=DEFAULT_DECODE_THREADS,
        ge=1,
        le=64,
        alias="decode_threads",
        description="threads a worker decodes each batch on (native decoders run without the GIL)",
    )
    max_staged_rows: int = Field(
        default=DEFAULT_MAX_STAGED_ROWS,
        gt=0,
        alias="max_staged_rows",
        description="backpressure: staged rows past which workers wait for the sink",
    )
    max_staged_bytes: int = Field(
        default=DEFAULT_MAX_STAGED_BYTES,
        gt=0,
        alias="max_staged_bytes",
        description="backpressure: staged bytes past which workers wait for the sink",
    )
    web_port: int = Field(
        default=DEFAULT_WEB_PORT,
        ge=0,
        le=65535,
        alias="web_port",
        description="the worker's status page on `TICDC_SINK_METRICS_HOST` (0: off; one port "
        "per worker)",
    )
    progress_interval: float = Field(
        default=DEFAULT_PROGRESS_INTERVAL_S,
        ge=1.0,
        le=3600.0,
        alias="progress_interval",
        description="seconds between a worker's progress lines (1-3600)",
    )
    resolve_when_idle: float = Field(
        default=DEFAULT_RESOLVE_WHEN_IDLE_S,
        ge=0.0,
        le=3600.0,
        alias="resolve_when_idle",
        description="seconds a partition read to its end stays quiet before the worker moves "
        "its watermark to the highest commit ts it staged from it (0: off; 0-3600; for "
        "Debezium, see Streams without watermarks)",
    )


class LargeMessageSettings(SettingsGroup):
    """Large messages: how the worker makes TiCDC's cut-down messages whole."""

    claim_check_storage: str = Field(
        default=DEFAULT_CLAIM_CHECK_STORAGE,
        alias="claim_check_storage",
        repr=False,  # its URI may carry a secret key: describe() shows it masked
        description="the changefeed's `claim-check-storage-uri` (`file://`, "
        "`s3://...?endpoint=&region=`); claim-check objects are read there by file name "
        "(unset: each location as written)",
    )
    claim_check_attempts: int = Field(
        default=DEFAULT_CLAIM_CHECK_ATTEMPTS,
        ge=1,
        le=20,
        alias="claim_check_attempts",
        description="reads of an unreadable claim-check object before its message is "
        "dead-lettered (1-20)",
    )
    upstream: Downstream | None = Field(
        default=None,
        alias="upstream",
        description="`mysql://user:password@host:port/` of the upstream TiDB, where "
        "handle-key-only rows are read; unset, they are dead-lettered",
    )

    @field_validator("claim_check_storage")
    @classmethod
    def _check_claim_check_storage(cls, value: str) -> str:
        if value and urlsplit(value).scheme not in _CLAIM_CHECK_SCHEMES:
            raise ValueError("must be empty or start with file:// or s3://")
        return value

    @field_validator("upstream", mode="before")
    @classmethod
    def _parse_upstream(cls, value: Any) -> Any:
        if isinstance(value, str):
            return Downstream.parse(value) if value else None
        return value


class SinkSettings(SettingsGroup):
    """The sink: micro-batches, routes, and what it does with what the downstream refuses."""

    batch_rows: int = Field(
        default=DEFAULT_BATCH_ROWS,
        gt=0,
        alias="batch_rows",
        description="rows per micro-batch of the sink (cut between transactions only)",
    )
    load_in_place: bool = Field(
        default=DEFAULT_LOAD_IN_PLACE,
        alias="load_in_place",
        description="load a table's upserts straight into it (MariaDB, MySQL: LOAD DATA LOCAL, "
        "REPLACE by key) where that equals an upsert from a staging table; `false`: always "
        "through a staging table",
    )
    on_row_error: OnRowError = Field(
        default=DEFAULT_ON_ROW_ERROR,
        alias="on_row_error",
        description="a row the downstream refuses: `stop` the sink with one message, or "
        "`deadletter` it and go on",
    )
    on_ddl_error: OnDDLError = Field(
        default=DEFAULT_ON_DDL_ERROR,
        alias="on_ddl_error",
        description="`stop`, or `skip` a DDL the downstream refuses (logged, counted)",
    )
    on_schema_drift: OnSchemaDrift = Field(
        default=DEFAULT_ON_SCHEMA_DRIFT,
        alias="on_schema_drift",
        description="`stop`, or `ignore`: drop changes the downstream has no table or column "
        "for (counted)",
    )
    routes: tuple[Route, ...] = Field(
        default=DEFAULT_ROUTES,
        alias="routes",
        description="`db.table=db.table` routes, comma list; shell wildcards, `*` keeps that "
        "part of the name (`app.*=replica.*`); the first match wins",
    )
    skip_tables: tuple[str, ...] = Field(
        default=DEFAULT_SKIP_TABLES,
        alias="skip_tables",
        description="`db.table` patterns whose changes and DDL are dropped, comma list "
        "(`app.tmp_*`)",
    )

    @field_validator("routes", mode="before")
    @classmethod
    def _parse_routes(cls, value: Any) -> Any:
        return parse_routes(value)

    @field_validator("skip_tables", mode="before")
    @classmethod
    def _parse_skip_tables(cls, value: Any) -> Any:
        return parse_table_patterns(value)


class SparkSettings(SettingsGroup):
    """Spark: the cluster the sink loads large tables of a batch through."""

    master: str = Field(
        default=DEFAULT_SPARK_MASTER,
        alias="spark_master",
        description="`local[N]`, `spark://…`, `yarn`, `k8s://…` (see Spark clusters)",
    )
    jdbc_jar: str = Field(
        default=DEFAULT_JDBC_JAR,
        alias="jdbc_jar",
        description="MariaDB Connector/J on the sink's machine; Spark ships it to the executors",
    )
    min_rows: int = Field(
        default=DEFAULT_SPARK_MIN_ROWS,
        ge=0,
        alias="spark_min_rows",
        description="a batch's table with fewer rows loads into its staging table with LOAD "
        "DATA over the driver, not Spark (0: always Spark); a table that loads in place never "
        "goes through Spark",
    )

    @field_validator("master")
    @classmethod
    def _check_master(cls, value: str) -> str:
        if not _SPARK_MASTER.match(value):
            raise ValueError("must be local[*], local[N], spark://..., yarn or k8s://...")
        return value


class LoggingSettings(SettingsGroup):
    """Logs: what every process writes, and how."""

    level: LogLevel = Field(
        default=DEFAULT_LOG_LEVEL,
        alias="log_level",
        description="`debug`, `info`, `warning`, `error`",
    )
    format: LogFormat = Field(
        default=DEFAULT_LOG_FORMAT,
        alias="log_format",
        description="`text` (one line a record) or `json` (one object a line)",
    )

    @field_validator("level", "format", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class MetricsSettings(SettingsGroup):
    """Metrics: Prometheus' /metrics of the worker and the sink."""

    port: int = Field(
        default=DEFAULT_METRICS_PORT,
        ge=0,
        le=65535,
        alias="metrics_port",
        description="Prometheus `/metrics` for the worker and the sink (0: off)",
    )
    host: str = Field(
        default=DEFAULT_METRICS_HOST,
        alias="metrics_host",
        description="where `/metrics` and the worker's status page listen (`0.0.0.0`: every "
        "interface)",
    )

    @field_validator("host")
    @classmethod
    def _check_host(cls, value: str) -> str:
        if not _HOST.match(value):
            raise ValueError("must be a host name or an IP address (0.0.0.0: every interface)")
        return value


# --- The settings ----------------------------------------------------------------------------


class Settings(BaseModel):
    """Everything a ticdc-sink process reads at start, in groups."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    group: str = Field(default=DEFAULT_GROUP, description="consumer group and pipeline name")
    startup_timeout: float = Field(
        default=DEFAULT_STARTUP_TIMEOUT_S,
        ge=0.0,
        description="seconds a starting worker or sink waits for Redis, Kafka and the downstream",
    )
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    downstream: DownstreamSettings = Field(default_factory=DownstreamSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    large_messages: LargeMessageSettings = Field(default_factory=LargeMessageSettings)
    sink: SinkSettings = Field(default_factory=SinkSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)

    @field_validator("group")
    @classmethod
    def _check_group(cls, value: str) -> str:
        return _identifier(value)

    def value(self, name: str) -> Any:
        """The value of the setting ``name`` (``kafka_ssl_ca``: ``self.kafka.ssl_ca``)."""
        value: Any = self
        for part in setting(name).path:
            value = getattr(value, part)
        return value

    def updated(self, changes: Mapping[str, Any]) -> Settings:
        """A copy with the settings ``changes`` names (by setting name: ``meta_db``,
        ``spark_min_rows``) changed, validated as a file's values are."""
        values: dict[str, Any] = {}
        for name, field in self:
            values[name] = dict(field) if isinstance(field, SettingsGroup) else field
        for name, value in changes.items():
            _place(values, name, value)
        try:
            return Settings.model_validate(values)
        except ValidationError as exc:
            raise ConfigError(_explain(exc, changes)) from None

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Any:
        # A setting's name is no field of a grouped model: copying would add an attribute
        # that nothing reads. Settings change through updated(), which also validates.
        unknown = sorted(set(update or ()) - set(type(self).model_fields))
        if unknown:
            raise TypeError(f"Settings.model_copy cannot set {unknown}: use Settings.updated()")
        return super().model_copy(update=update, deep=deep)

    def describe(self) -> dict[str, str]:
        """Every setting's variable and its value as a log or ``--help`` may show it (secrets
        masked), in the order of the groups."""
        shown: dict[str, str] = {}
        for doc in SETTINGS:
            value = self.value(doc.name)
            if isinstance(value, tuple):
                value = ",".join(str(item) for item in value)
            shown[doc.variable] = "" if value is None else masked(doc.name, value)
        return shown


# --- Each setting's name, path and description -------------------------------------------------


@dataclass(frozen=True)
class SettingDoc:
    """One setting as the README's table and ``ticdc-sink config describe`` show it."""

    # Its own name: the variable without TICDC_SINK_, a flat TOML file's key.
    name: str
    # Its attribute path from Settings: ("kafka", "bootstrap"), or ("group",).
    path: tuple[str, ...]
    description: str

    @property
    def variable(self) -> str:
        return env_name(self.name)

    @property
    def group(self) -> str | None:
        return self.path[0] if len(self.path) > 1 else None


# The groups, by their attribute (and TOML table) name.
GROUPS: dict[str, type[SettingsGroup]] = {
    name: field.annotation
    for name, field in Settings.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, SettingsGroup)
}


def _setting_docs() -> Iterator[SettingDoc]:
    for name, field in Settings.model_fields.items():
        group = GROUPS.get(name)
        if group is None:
            yield SettingDoc(name, (name,), field.description or "")
            continue
        for key, inner in group.model_fields.items():
            yield SettingDoc(inner.alias or key, (name, key), inner.description or "")


# Every setting, in the order of the groups.
SETTINGS: tuple[SettingDoc, ...] = tuple(_setting_docs())
_BY_NAME = {doc.name: doc for doc in SETTINGS}


def setting(name: str) -> SettingDoc:
    """The setting called ``name``; a ConfigError lists the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ConfigError(
            f"invalid settings: unknown setting {name!r}; known: {', '.join(_BY_NAME)}"
        ) from None


def setting_paths() -> dict[str, str]:
    """Each setting's name and its attribute path (``kafka_ssl_ca``: ``kafka.ssl_ca``): what the
    settings codemod rewrites ``settings.<name>`` to."""
    return {doc.name: ".".join(doc.path) for doc in SETTINGS}


def _place(values: dict[str, Any], name: str, value: Any) -> None:
    """Put setting ``name``'s raw value where Settings.model_validate reads it."""
    path = setting(name).path
    if len(path) == 1:
        values[name] = value
    else:
        values.setdefault(path[0], {})[path[1]] = value


def env_name(field: str) -> str:
    """The environment variable that sets the setting ``field``."""
    return ENV_PREFIX + field.upper()


# --- Reading them ------------------------------------------------------------------------------


def _read_toml(path: Path) -> dict[str, Any]:
    """The file's settings by name: flat keys, and the keys of group tables (``[kafka]``)."""
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
    values: dict[str, Any] = {}
    for raw_key, value in section.items():
        key = str(raw_key).replace("-", "_")
        if key in GROUPS and isinstance(value, dict):
            for raw_inner, item in value.items():
                name = _name_in_group(key, str(raw_inner).replace("-", "_"))
                _put(values, name, item, path)
        else:
            _put(values, key, value, path)
    return values


def _name_in_group(group: str, key: str) -> str:
    """The setting name of ``key`` in group table ``[group]`` (its field name or its own
    name; ``<key>_file`` for a secret's file)."""
    fields = GROUPS[group].model_fields
    base, is_file = (key[: -len(FILE_SUFFIX)], True) if key.endswith("_file") else (key, False)
    for field_name, field in fields.items():
        name = field.alias or field_name
        if base in {field_name, name} and (not is_file or name in SECRET_FIELDS):
            return name + FILE_SUFFIX.lower() if is_file else name
    known = ", ".join(fields)
    raise ConfigError(f"invalid settings: unknown setting {key!r} in [{group}]; known: {known}")


def _put(values: dict[str, Any], name: str, value: Any, path: Path) -> None:
    if name in values:
        raise ConfigError(f"--config {path}: {name} is set twice (flat and in its group's table)")
    values[name] = value


def load_settings(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Read the settings: defaults, then the TOML file at ``path``, then the environment."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = _read_toml(Path(path)) if path else {}
    for doc in SETTINGS:
        if doc.variable in environ:
            values[doc.name] = environ[doc.variable]
    for name in SECRET_FIELDS:
        file_key = name + FILE_SUFFIX.lower()
        secret_file = environ.get(env_name(file_key), values.pop(file_key, None))
        if secret_file is not None:
            if env_name(name) in environ or name in values:
                raise ConfigError(
                    f"{env_name(name)} and {env_name(file_key)} are both set: keep one"
                )
            values[name] = read_secret_file(env_name(file_key), str(secret_file))
    nested: dict[str, Any] = {}
    for name, value in values.items():
        _place(nested, name, value)
    try:
        return Settings.model_validate(nested)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, values)) from None


def read_secret_file(variable: str, path: str) -> str:
    """A secret from a file (a container secret), without its trailing newline."""
    try:
        return Path(path).read_text().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"{variable}={path}: cannot read it ({exc.strerror})") from None


def masked(field: str, value: Any) -> str:
    """Setting ``field``'s value as text with what is secret in it masked, as logs, ``--help``,
    errors and ``repr()`` show it: a secret setting is ``***`` (empty when a parsed one is not set),
    an address shows its password as ``***``, an S3 URI its secret key as ``***``."""
    if isinstance(value, SecretStr):
        return MASK if value.get_secret_value() else ""
    if field in SECRET_FIELDS:
        return MASK
    text = str(value)
    if field in _ADDRESSES:
        return replace_url_password(text, MASK)
    if field == "claim_check_storage":
        return _SECRET_KEY.sub(r"\1" + MASK, text)
    return text


def shown_value(field: str, value: Any) -> str:
    """A raw setting's value as an error quotes it (:func:`masked`): text quoted, a secret not."""
    if field in SECRET_FIELDS:
        return masked(field, value)
    return repr(masked(field, value)) if isinstance(value, str) else repr(value)


# Settings that are addresses and may carry a password.
_ADDRESSES = ("downstream", "upstream", "redis_url")


def _setting_at(loc: tuple[int | str, ...]) -> str | None:
    """The setting a validation error's location names; None for a check across a group."""
    if len(loc) == 1 and str(loc[0]) in GROUPS:
        return None
    if str(loc[0]) not in GROUPS:
        return str(loc[0])
    fields = GROUPS[str(loc[0])].model_fields
    for field_name, field in fields.items():
        if str(loc[1]) in {field_name, field.alias}:
            return field.alias or field_name
    return f"{loc[0]}.{loc[1]}"


def _explain(exc: ValidationError, values: Mapping[str, Any]) -> str:
    lines = []
    for error in exc.errors():
        name = _setting_at(error["loc"]) if error["loc"] else None
        message = error["msg"].removeprefix("Value error, ")
        if name is None:
            # A check across settings: its message names them.
            lines.append(message)
            continue
        if name not in _BY_NAME:
            lines.append(f"unknown setting {name!r}; known: {', '.join(_BY_NAME)}")
            continue
        if error["type"] == "enum":
            allowed = error.get("ctx", {}).get("expected", "")
            message = f"must be one of {allowed}"
        lines.append(f"{env_name(name)}={shown_value(name, values.get(name))}: {message}")
    # One line: a start-up failure is read in a process supervisor's log, line by line.
    return "invalid settings: " + "; ".join(lines)
