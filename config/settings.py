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
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from config.errors import ConfigError

ENV_PREFIX = "TICDC_SINK_"

# Loopback defaults: a fresh machine with `ticdc-sink services up` needs no configuration.
DEFAULT_KAFKA = "127.0.0.1:9092"
DEFAULT_GROUP = "ticdc-sink"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_DOWNSTREAM = "mysql://root@127.0.0.1:3306/"
DEFAULT_SPARK_MASTER = "local[*]"
# Where Debian's libmariadb-java puts MariaDB Connector/J, which Spark's JDBC loads need.
DEFAULT_JDBC_JAR = "/usr/share/java/mariadb-java-client.jar"
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
# Seconds a partition read to its end stays quiet before its watermark is moved to what it
# staged (for streams without watermarks: Debezium); 0: off, only TiCDC's resolved events count.
DEFAULT_RESOLVE_WHEN_IDLE_S = 0.0

# What every secret prints as: in logs, --help, status, errors and metrics.
MASK = "***"
# Secret settings: each can also come from a file named by <VARIABLE>_FILE (container secrets).
SECRET_FIELDS = (
    "kafka_sasl_password",
    "kafka_ssl_key_password",
    "redis_password",
    "downstream_password",
)
FILE_SUFFIX = "_FILE"
# Query parameters of TICDC_SINK_DOWNSTREAM, spelled as TiCDC's sink-uri and MySQL's client do.
DOWNSTREAM_PARAMETERS = ("ssl-mode", "ssl-ca", "ssl-cert", "ssl-key")

# A text or secret setting left empty is not set (a file path, a user name, a password).
UNSET = ""
NO_SECRET = SecretStr(UNSET)
# How long a starting worker or sink waits for Redis, Kafka and the downstream to answer: long
# enough for services started beside it (Kafka takes ~10 s), short enough to notice a wrong address.
DEFAULT_STARTUP_TIMEOUT_S = 60.0

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
    DEBEZIUM = "debezium"


class OnError(StrEnum):
    """What a worker does with a message that does not decode."""

    DEADLETTER = "deadletter"
    HALT = "halt"


class OnDDLError(StrEnum):
    """What the sink does with a DDL the downstream refuses."""

    STOP = "stop"
    SKIP = "skip"


class OnSchemaDrift(StrEnum):
    """What the sink does with changes to a table or column the downstream does not have."""

    STOP = "stop"
    # Drop what the downstream has no place for, counted in a metric.
    IGNORE = "ignore"


class OnRowError(StrEnum):
    """What the sink does with a row the downstream refuses (a NaN FLOAT, an invalid date)."""

    STOP = "stop"
    DEADLETTER = "deadletter"


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


class KafkaSecurity(StrEnum):
    """Kafka's security.protocol: how clients reach the brokers."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in {KafkaSecurity.SSL, KafkaSecurity.SASL_SSL}

    @property
    def sasl(self) -> bool:
        return self in {KafkaSecurity.SASL_PLAINTEXT, KafkaSecurity.SASL_SSL}


class SaslMechanism(StrEnum):
    """The SASL mechanisms a Kafka client may log in with."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


class SslMode(StrEnum):
    """MySQL's ssl-mode: how far the downstream connection's TLS goes."""

    DISABLED = "disabled"
    # TLS when the server offers it, unverified; plaintext otherwise (MySQL's default).
    PREFERRED = "preferred"
    REQUIRED = "required"
    VERIFY_CA = "verify-ca"
    VERIFY_IDENTITY = "verify-identity"

    @property
    def verifies(self) -> bool:
        return self in {SslMode.VERIFY_CA, SslMode.VERIFY_IDENTITY}


# Plaintext, as the local development broker speaks; hosted Kafka mostly wants SASL_SSL.
DEFAULT_KAFKA_SECURITY = KafkaSecurity.PLAINTEXT
# Kafka's own default mechanism.
DEFAULT_SASL_MECHANISM = SaslMechanism.PLAIN


def replace_url_password(url: str, password: str | None) -> str:
    """``url`` with its password, if it has one, replaced by ``password`` (None: removed)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    login = (parts.username or "") + ("" if password is None else f":{password}")
    return urlunsplit(parts._replace(netloc=f"{login}@{host}" if login else host))


class Downstream(BaseModel):
    """A parsed ``mysql://user:password@host:port/?ssl-mode=...`` address; the password never
    prints. ``ssl_mode`` None means MySQL's default: verify-ca with a CA file, else preferred."""

    model_config = ConfigDict(frozen=True)

    user: str
    password: SecretStr
    host: str
    port: int
    ssl_mode: SslMode | None = None
    ssl_ca: str = ""
    ssl_cert: str = ""
    ssl_key: str = ""

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
            **_downstream_parameters(parts.query),
        )

    @property
    def effective_ssl_mode(self) -> SslMode:
        if self.ssl_mode is not None:
            return self.ssl_mode
        return SslMode.VERIFY_CA if self.ssl_ca else SslMode.PREFERRED

    def __str__(self) -> str:
        secret = ":" + MASK if self.password.get_secret_value() else ""
        query = "&".join(
            f"{name}={quote(str(value), safe='/')}"
            for name, value in zip(
                DOWNSTREAM_PARAMETERS,
                (self.ssl_mode or "", self.ssl_ca, self.ssl_cert, self.ssl_key),
                strict=True,
            )
            if value
        )
        return f"mysql://{self.user}{secret}@{self.host}:{self.port}/" + (
            f"?{query}" if query else ""
        )

    def check_tls(self) -> None:
        """Refuse TLS files a mode would not use, and a key without its certificate."""
        mode = self.effective_ssl_mode
        if mode in {SslMode.DISABLED, SslMode.PREFERRED}:
            given = [n for n, v in (("ssl-ca", self.ssl_ca), ("ssl-cert", self.ssl_cert)) if v]
            if given:
                raise ValueError(
                    f"{', '.join(given)} need ssl-mode=required, verify-ca or verify-identity "
                    f"(ssl-mode={mode} would not use them)"
                )
        if bool(self.ssl_cert) != bool(self.ssl_key):
            raise ValueError("ssl-cert and ssl-key go together (a client certificate and its key)")
        for name, path in (("ssl-ca", self.ssl_ca), ("ssl-cert", self.ssl_cert)):
            if path and not Path(path).is_file():
                raise ValueError(f"{name}={path}: no such file")
        if self.ssl_key and not Path(self.ssl_key).is_file():
            raise ValueError(f"ssl-key={self.ssl_key}: no such file")

    def jdbc_url(self, database: str = "") -> str:
        """The JDBC address; `mysql:`, since the `mariadb:` scheme makes Spark quote with `"`."""
        return f"jdbc:mysql://{self.host}:{self.port}/{database}"


def _downstream_parameters(query: str) -> dict[str, Any]:
    """The TLS fields of a downstream URL's query; any other parameter is an error."""
    fields: dict[str, Any] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name not in DOWNSTREAM_PARAMETERS:
            raise ValueError(
                f"unknown parameter {name!r} (known: {', '.join(DOWNSTREAM_PARAMETERS)})"
            )
        field = name.replace("-", "_")
        if field in fields:
            raise ValueError(f"parameter {name!r} is given twice")
        if name == "ssl-mode":
            try:
                fields[field] = SslMode(value.lower())
            except ValueError:
                raise ValueError(
                    f"ssl-mode={value!r} must be one of {', '.join(m.value for m in SslMode)}"
                ) from None
        else:
            fields[field] = value
    return fields


class Settings(BaseModel):
    """Everything a ticdc-sink process reads at start."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kafka: str = DEFAULT_KAFKA
    kafka_security_protocol: KafkaSecurity = Field(
        default=DEFAULT_KAFKA_SECURITY, description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    )
    kafka_sasl_mechanism: SaslMechanism = Field(
        default=DEFAULT_SASL_MECHANISM, description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
    )
    kafka_sasl_username: str = Field(default=UNSET, description="SASL login name")
    kafka_sasl_password: SecretStr = Field(default=NO_SECRET, description="SASL password")
    kafka_ssl_ca: str = Field(default=UNSET, description="CA file (PEM); unset: the system's CAs")
    kafka_ssl_cert: str = Field(default=UNSET, description="client certificate file (PEM)")
    kafka_ssl_key: str = Field(default=UNSET, description="the client certificate's key (PEM)")
    kafka_ssl_key_password: SecretStr = Field(default=NO_SECRET, description="the key's passphrase")
    kafka_ssl_check_hostname: bool = Field(
        default=True, description="check that the broker's certificate names its host"
    )
    topics: tuple[str, ...] = ()
    protocol: Protocol = Protocol.OPEN
    group: str = DEFAULT_GROUP
    redis_url: str = DEFAULT_REDIS_URL
    redis_password: SecretStr = Field(
        default=NO_SECRET, description="Redis (ACL) password; replaces the URL's"
    )
    redis_ssl_ca: str = Field(default=UNSET, description="rediss:// CA file; unset: system CAs")
    redis_ssl_cert: str = Field(default=UNSET, description="rediss:// client certificate file")
    redis_ssl_key: str = Field(default=UNSET, description="rediss:// client key file")
    downstream: Downstream = Field(default_factory=lambda: Downstream.parse(DEFAULT_DOWNSTREAM))
    downstream_password: SecretStr = Field(
        default=NO_SECRET, description="downstream password; replaces the URL's"
    )
    downstream_ssl_mode: SslMode | None = Field(
        default=None, description="the URL's ssl-mode, as a setting (wins over the URL)"
    )
    downstream_ssl_ca: str = Field(default=UNSET, description="the URL's ssl-ca, as a setting")
    downstream_ssl_cert: str = Field(default=UNSET, description="the URL's ssl-cert, as a setting")
    downstream_ssl_key: str = Field(default=UNSET, description="the URL's ssl-key, as a setting")
    spark_master: str = DEFAULT_SPARK_MASTER
    jdbc_jar: str = DEFAULT_JDBC_JAR
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
    metrics_host: str = DEFAULT_METRICS_HOST
    log_level: LogLevel = LogLevel.INFO
    log_format: LogFormat = LogFormat.TEXT
    dead_letter_max_entries: int = Field(default=DEFAULT_DEAD_LETTER_MAX_ENTRIES, ge=1)
    progress_interval: float = Field(default=DEFAULT_PROGRESS_INTERVAL_S, ge=1.0, le=3600.0)
    resolve_when_idle: float = Field(
        default=DEFAULT_RESOLVE_WHEN_IDLE_S,
        ge=0.0,
        le=3600.0,
        description="seconds a partition read to its end must stay quiet before its watermark "
        "moves to the highest commit ts staged from it (0: off)",
    )
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
    startup_timeout: float = Field(
        default=DEFAULT_STARTUP_TIMEOUT_S,
        ge=0.0,
        description="seconds a starting worker or sink waits for Redis, Kafka and the downstream",
    )
    on_ddl_error: OnDDLError = Field(
        default=OnDDLError.STOP, description="stop, or skip a DDL the downstream refuses"
    )
    on_schema_drift: OnSchemaDrift = Field(
        default=OnSchemaDrift.STOP,
        description="stop, or ignore (count and drop) changes the downstream has no table "
        "or column for",
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

    @field_validator("downstream_ssl_mode", mode="before")
    @classmethod
    def _lower_ssl_mode(cls, value: Any) -> Any:
        return value.lower() or None if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_security(self) -> Settings:
        """Fold the downstream_* settings into the address, then check each TLS family whole."""
        overrides = {
            "password": self.downstream_password if _given(self.downstream_password) else None,
            "ssl_mode": self.downstream_ssl_mode,
            "ssl_ca": self.downstream_ssl_ca,
            "ssl_cert": self.downstream_ssl_cert,
            "ssl_key": self.downstream_ssl_key,
        }
        update = {k: v for k, v in overrides.items() if v}
        if update:
            # Frozen model: the merged address replaces the parsed one once, while validating.
            object.__setattr__(self, "downstream", self.downstream.model_copy(update=update))
        try:
            self.downstream.check_tls()
        except ValueError as exc:
            raise ValueError(f"{env_name('downstream')}: {exc}") from None
        _check_kafka_security(self)
        _check_redis_tls(self)
        return self

    def __repr_args__(self) -> Any:
        # repr() and str() show the Redis URL with its password masked, like describe().
        for name, value in super().__repr_args__():
            yield name, masked(name, value) if name == "redis_url" else value

    def describe(self) -> dict[str, str]:
        """Every setting as the text a log or ``--help`` may show (secrets masked)."""
        shown: dict[str, str] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = ",".join(value)
            shown[ENV_PREFIX + name.upper()] = "" if value is None else masked(name, value)
        return shown


def _given(secret: SecretStr) -> bool:
    return bool(secret.get_secret_value())


def _pair(cert: str, key: str) -> str:
    return f"{env_name(cert)} and {env_name(key)} go together (a client certificate and its key)"


def _check_files(settings: Settings, *fields: str) -> None:
    for field in fields:
        path = getattr(settings, field)
        if path and not Path(path).is_file():
            raise ValueError(f"{env_name(field)}={path}: no such file")


def _check_kafka_security(settings: Settings) -> None:
    protocol = settings.kafka_security_protocol
    tls_fields = ("kafka_ssl_ca", "kafka_ssl_cert", "kafka_ssl_key")
    if not protocol.tls:
        given = [env_name(f) for f in tls_fields if getattr(settings, f)]
        if given:
            raise ValueError(
                f"{', '.join(given)} need {env_name('kafka_security_protocol')}=SSL or SASL_SSL "
                f"(it is {protocol})"
            )
    if protocol.sasl and not (
        settings.kafka_sasl_username and _given(settings.kafka_sasl_password)
    ):
        raise ValueError(
            f"{env_name('kafka_security_protocol')}={protocol} needs "
            f"{env_name('kafka_sasl_username')} and {env_name('kafka_sasl_password')} "
            f"(or {env_name('kafka_sasl_password')}{FILE_SUFFIX})"
        )
    if bool(settings.kafka_ssl_cert) != bool(settings.kafka_ssl_key):
        raise ValueError(_pair("kafka_ssl_cert", "kafka_ssl_key"))
    _check_files(settings, *tls_fields)


def _check_redis_tls(settings: Settings) -> None:
    tls_fields = ("redis_ssl_ca", "redis_ssl_cert", "redis_ssl_key")
    given = [env_name(f) for f in tls_fields if getattr(settings, f)]
    if given and urlsplit(settings.redis_url).scheme != "rediss":
        raise ValueError(f"{', '.join(given)} need a rediss:// {env_name('redis_url')}")
    if bool(settings.redis_ssl_cert) != bool(settings.redis_ssl_key):
        raise ValueError(_pair("redis_ssl_cert", "redis_ssl_key"))
    _check_files(settings, *tls_fields)


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
    for name in SECRET_FIELDS:
        file_key = name + FILE_SUFFIX.lower()
        secret_file = environ.get(env_name(file_key), values.pop(file_key, None))
        if secret_file is not None:
            if env_name(name) in environ or name in values:
                raise ConfigError(
                    f"{env_name(name)} and {env_name(file_key)} are both set: keep one"
                )
            values[name] = read_secret_file(env_name(file_key), str(secret_file))
    try:
        return Settings.model_validate(values)
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


def _explain(exc: ValidationError, values: Mapping[str, Any]) -> str:
    lines = []
    for error in exc.errors():
        if not error["loc"]:
            # A check across settings: its message names them.
            lines.append(error["msg"].removeprefix("Value error, "))
            continue
        field = str(error["loc"][0])
        if field not in Settings.model_fields:
            lines.append(f"unknown setting {field!r}; known: {', '.join(Settings.model_fields)}")
            continue
        shown = shown_value(field, values.get(field))
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "enum":
            allowed = error.get("ctx", {}).get("expected", "")
            message = f"must be one of {allowed}"
        lines.append(f"{env_name(field)}={shown}: {message}")
    # One line: a start-up failure is read in a process supervisor's log, line by line.
    return "invalid settings: " + "; ".join(lines)
