"""Every setting, declared once: its name, its default and why, and what it means, together.

The settings come in groups (``settings.kafka.bootstrap``, ``settings.sink.batch_rows``). Each is
one field of its group: ``alias`` is its name (its variable is ``TICDC_SINK_`` + the name in
capitals, a flat TOML file's key the name, its key in the group's TOML table the field's name),
``default`` its default with the reason for it in the comment above, ``description`` what it
means (the README's table says the same). A check of its value sits beside it; checks across a
group are in config/validation.py. Environment variables win over the TOML file, the file over
the defaults (config/reading.py); a bad value fails at start with one line naming the variable
and what is allowed.

Longer than the other modules on purpose: every setting is here, so that one file answers what
can be set, to what, and why.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
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

# Re-exported, as the rest of the code imports them from here (choices, addresses, routes,
# variable names, masking): new code imports each from its own module.
from config.choices import EventLoop as EventLoop
from config.choices import KafkaSecurity, LogFormat, LogLevel
from config.choices import OnDDLError as OnDDLError
from config.choices import OnError as OnError
from config.choices import OnRowError as OnRowError
from config.choices import OnSchemaDrift as OnSchemaDrift
from config.choices import Protocol as Protocol
from config.choices import SaslMechanism as SaslMechanism
from config.choices import SslMode as SslMode
from config.downstream import Downstream as Downstream
from config.errors import ConfigError
from config.masking import masked as masked
from config.masking import replace_url_password as replace_url_password
from config.names import ENV_PREFIX as ENV_PREFIX
from config.names import Names, SettingDoc
from config.names import env_name as env_name
from config.reading import read_values
from config.routes import Route as Route
from config.routes import parse_routes as parse_routes
from config.routes import parse_table_patterns as parse_table_patterns
from config.validation import (
    TlsFiles,
    check_kafka_security,
    check_redis_cluster_url,
    check_redis_tls,
    check_registry_tls,
    explain,
)

# A text or secret setting left empty is not set (a file path, a user name, a password).
UNSET = ""
NO_SECRET = SecretStr(UNSET)

_IDENTIFIER = re.compile(r"^[A-Za-z0-9_$-]{1,64}$")
_HOST_PORT = re.compile(r"^[A-Za-z0-9_.:\[\]-]+:\d{1,5}$")
_HOST = re.compile(r"^[A-Za-z0-9_.:\[\]-]{1,253}$")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_SPARK_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|spark://.+|yarn|k8s://.+)$")
_CLAIM_CHECK_SCHEMES = ("file", "s3")


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


def _given(secret: SecretStr) -> bool:
    return bool(secret.get_secret_value())


class KafkaSettings(SettingsGroup):
    """Kafka: where the changes are read, and how they are encoded."""

    # Loopback: a fresh machine with `ticdc-sink services up` needs no configuration.
    bootstrap: str = Field(
        default="127.0.0.1:9092",
        alias="kafka",
        description="Kafka bootstrap servers, comma list of host:port",
    )
    # None until the operator names them: a worker without any refuses to start.
    topics: tuple[str, ...] = Field(
        default=(), alias="topics", description="topics to consume, comma list"
    )
    # None: the topics are named by TICDC_SINK_TOPICS. A changefeed with a topic per table
    # (TiCDC's topic dispatcher) creates topics while it runs, which no list can name ahead.
    topics_pattern: str = Field(
        default=UNSET,
        alias="topics_pattern",
        description="a regular expression the whole topic name matches: consume every such "
        "topic, those created later too (instead of TICDC_SINK_TOPICS)",
    )
    # None: the pattern alone names the topics. TiCDC sends a changefeed's schema-level DDL
    # (CREATE DATABASE) and every checkpoint to its default topic (the sink URI's), whatever
    # its topic dispatcher: a pattern for the tables' topics alone misses it.
    default_topic: str = Field(
        default=UNSET,
        alias="default_topic",
        description="the changefeed's default topic (the sink URI's topic): consumed beside "
        "the topics TICDC_SINK_TOPICS_PATTERN matches, whether it matches or not",
    )
    # TiCDC's own default protocol for Kafka sinks.
    protocol: Protocol = Field(
        default=Protocol.OPEN,
        alias="protocol",
        description="the topics' TiCDC protocol: `open`, `craft`, `simple`, `simple-avro`, "
        "`canal-json`, `debezium`, `avro`",
    )
    # A worker silent this long loses its partitions to the others (Kafka's minimum is 6 s).
    session_timeout: float = Field(
        default=30.0,
        ge=6.0,
        le=300.0,
        alias="session_timeout",
        description="seconds before a silent worker's partitions move (6-300)",
    )
    # Plaintext, as the local development broker speaks; hosted Kafka mostly wants SASL_SSL.
    security_protocol: KafkaSecurity = Field(
        default=KafkaSecurity.PLAINTEXT,
        alias="kafka_security_protocol",
        description="`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`",
    )
    # Kafka's own default mechanism.
    sasl_mechanism: SaslMechanism = Field(
        default=SaslMechanism.PLAIN,
        alias="kafka_sasl_mechanism",
        description="`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`",
    )
    # No login: the plaintext default asks for none; the `SASL_*` protocols refuse to start
    # without one.
    sasl_username: str = Field(
        default=UNSET,
        alias="kafka_sasl_username",
        description="SASL login name (needed by the `SASL_*` protocols)",
    )
    # No login, as for the user name.
    sasl_password: SecretStr = Field(
        default=NO_SECRET,
        alias="kafka_sasl_password",
        description="SASL password (needed by the `SASL_*` protocols)",
    )
    # The system's CAs, which sign a hosted broker's certificate.
    ssl_ca: str = Field(
        default=UNSET,
        alias="kafka_ssl_ca",
        description="PEM file of the CA that signed the brokers' certificates "
        "(unset: the system's CAs)",
    )
    # No client certificate: a broker asks for one only with mutual TLS.
    ssl_cert: str = Field(
        default=UNSET, alias="kafka_ssl_cert", description="client certificate file (PEM), for mTLS"
    )
    # No certificate, no key.
    ssl_key: str = Field(
        default=UNSET, alias="kafka_ssl_key", description="the client certificate's key file (PEM)"
    )
    # A key file without a passphrase needs none.
    ssl_key_password: SecretStr = Field(
        default=NO_SECRET, alias="kafka_ssl_key_password", description="the client key's passphrase"
    )
    # A broker's certificate must name the host connected to, as every TLS client checks.
    ssl_check_hostname: bool = Field(
        default=True,
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
        bad = [t for t in value if not _TOPIC.fullmatch(t)]
        if bad:
            raise ValueError(f"topic names may hold only letters, digits, '.', '_', '-': {bad}")
        return value

    @field_validator("default_topic")
    @classmethod
    def _check_default_topic(cls, value: str) -> str:
        if value and not _TOPIC.fullmatch(value):
            raise ValueError("a topic name may hold only letters, digits, '.', '_', '-'")
        return value

    @field_validator("topics_pattern")
    @classmethod
    def _check_topics_pattern(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"not a regular expression: {error}") from None
        return value

    @model_validator(mode="after")
    def _check_topics_or_pattern(self) -> KafkaSettings:
        if self.topics and self.topics_pattern:
            raise ValueError(
                f"{env_name('topics')} and {env_name('topics_pattern')} are both set: "
                "name the topics, or match them by a pattern, not both"
            )
        if self.default_topic and not self.topics_pattern:
            raise ValueError(
                f"{env_name('default_topic')} is set without {env_name('topics_pattern')}: "
                f"it goes with the pattern; with {env_name('topics')}, list it there"
            )
        return self

    @model_validator(mode="after")
    def _check_security(self) -> KafkaSettings:
        files = TlsFiles(
            ("kafka_ssl_ca", self.ssl_ca),
            ("kafka_ssl_cert", self.ssl_cert),
            ("kafka_ssl_key", self.ssl_key),
        )
        check_kafka_security(
            self.security_protocol, files, self.sasl_username, _given(self.sasl_password)
        )
        return self


class RedisSettings(SettingsGroup):
    """Redis: the staging store (rows, watermarks, schemas, the leader lease, dead letters)."""

    # Loopback: a fresh machine with `ticdc-sink services up` needs no configuration.
    url: str = Field(
        default="redis://127.0.0.1:6379/0",
        alias="redis_url",
        description="staging Redis: `redis://`, `rediss://` (TLS) or `unix://`, optionally "
        "`user:password@`",
    )
    # One server is what `services up` starts; a cluster is asked for, as redis-py's
    # RedisCluster is a client of its own.
    cluster: bool = Field(
        default=False,
        alias="redis_cluster",
        description="`true`: the URL names a node of a Redis Cluster (a managed cluster's "
        "configuration endpoint); the client finds the others and follows MOVED/ASK",
    )
    # Redis replicates asynchronously: with 0 a master that dies may take the last batches with
    # it after the worker committed their Kafka offsets. 1 closes that hole for one failure, at
    # a round trip to a replica per batch.
    min_replicas: int = Field(
        default=0,
        ge=0,
        alias="redis_min_replicas",
        description="replicas that must hold a staged batch (Redis WAIT) before the worker "
        "commits its Kafka offsets, and a new leader epoch before the sink leads; 0: do not wait",
    )
    # Unset: the URL's own password, if it has one.
    password: SecretStr = Field(
        default=NO_SECRET,
        alias="redis_password",
        description="Redis (ACL) password; replaces one in `TICDC_SINK_REDIS_URL`",
    )
    # The system's CAs, which sign a hosted Redis's certificate.
    ssl_ca: str = Field(
        default=UNSET,
        alias="redis_ssl_ca",
        description="with `rediss://`: CA file (unset: the system's CAs)",
    )
    # No client certificate: a server asks for one only with mutual TLS.
    ssl_cert: str = Field(
        default=UNSET,
        alias="redis_ssl_cert",
        description="with `rediss://`: client certificate file",
    )
    # No certificate, no key.
    ssl_key: str = Field(
        default=UNSET,
        alias="redis_ssl_key",
        description="with `rediss://`: the client certificate's key",
    )
    # A flood of bad messages must not fill Redis: the oldest are trimmed first.
    dead_letter_max_entries: int = Field(
        default=10_000,
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
        files = TlsFiles(
            ("redis_ssl_ca", self.ssl_ca),
            ("redis_ssl_cert", self.ssl_cert),
            ("redis_ssl_key", self.ssl_key),
        )
        check_redis_tls(self.url, files)
        if self.cluster:
            check_redis_cluster_url(self.url)
        return self

    def __repr_args__(self) -> Any:
        # repr() and str() show the URL with its password masked, like describe().
        for name, value in super().__repr_args__():
            yield name, masked("redis_url", value) if name == "url" else value


class DownstreamSettings(SettingsGroup):
    """The downstream: the MySQL-compatible database changes are applied to."""

    # Loopback, the MariaDB `ticdc-sink services up` starts: no configuration on a fresh machine.
    url: Downstream = Field(
        default="mysql://root@127.0.0.1:3306/",
        validate_default=True,
        alias="downstream",
        description="`mysql://user:password@host:port/`, optionally "
        "`?ssl-mode=…&ssl-ca=…&ssl-cert=…&ssl-key=…`",
    )
    # Unset: the address's own password, if it has one.
    password: SecretStr = Field(
        default=NO_SECRET,
        alias="downstream_password",
        description="downstream password; replaces the one in `TICDC_SINK_DOWNSTREAM`",
    )
    # Unset: the address's parameter, else MySQL's own default (verify-ca with a CA file,
    # preferred without).
    ssl_mode: SslMode | None = Field(
        default=None,
        alias="downstream_ssl_mode",
        description="the URL's `ssl-mode` as a setting (`disabled`, `preferred`, `required`, "
        "`verify-ca`, `verify-identity`); replaces the parameter",
    )
    # Unset: the address's `ssl-ca`, if it has one.
    ssl_ca: str = Field(
        default=UNSET,
        alias="downstream_ssl_ca",
        description="the URL's `ssl-ca` (CA file) as a setting; replaces the parameter",
    )
    # Unset: the address's `ssl-cert`, if it has one.
    ssl_cert: str = Field(
        default=UNSET,
        alias="downstream_ssl_cert",
        description="the URL's `ssl-cert` (client certificate) as a setting; replaces the "
        "parameter",
    )
    # Unset: the address's `ssl-key`, if it has one.
    ssl_key: str = Field(
        default=UNSET,
        alias="downstream_ssl_key",
        description="the URL's `ssl-key` (client key) as a setting; replaces the parameter",
    )
    # The checkpoint table's own database, apart from the replicated ones.
    meta_db: str = Field(
        default="ticdc_sink",
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

    # A bad message must not stop the partition behind it: it is kept aside, readable.
    on_error: OnError = Field(
        default=OnError.DEADLETTER,
        alias="on_error",
        description="`deadletter` or `halt` for undecodable messages",
    )
    # TiCDC sends each table's schema again at least every `send-bootstrap-in-msg-count`
    # (10,000) messages of it: a Simple message still without its schema this many messages of
    # its partition later will never get one (its schema message was lost, or it is garbage),
    # and holding it would cap its partition's progress for good.
    held_max_messages: int = Field(
        default=100_000,
        ge=1,
        alias="held_max_messages",
        description="messages of its partition after which a Simple message still waiting for "
        "its table schema goes to the dead letters",
    )
    # libuv's loop: Faust hands every message through futures and tasks, which it runs faster.
    event_loop: EventLoop = Field(
        default=EventLoop.UVLOOP,
        alias="event_loop",
        description="the worker's event loop: `uvloop` (faster Faust delivery) or `asyncio`",
    )
    # The native decoders let go of the GIL, so a second thread decodes on a second core while
    # the first does its half.
    decode_threads: int = Field(
        default=2,
        ge=1,
        le=64,
        alias="decode_threads",
        description="threads a worker decodes each batch on (native decoders run without the GIL)",
    )
    # Redis holds every staged row in memory until the sink applies it: this limit and the next
    # bound that, and past either the backlog waits in Kafka instead.
    max_staged_rows: int = Field(
        default=2_000_000,
        gt=0,
        alias="max_staged_rows",
        description="backpressure: staged rows past which workers wait for the sink",
    )
    # The other bound of Redis's memory, for rows larger than most.
    max_staged_bytes: int = Field(
        default=1 << 30,
        gt=0,
        alias="max_staged_bytes",
        description="backpressure: staged bytes past which workers wait for the sink",
    )
    # Faust's own default web port; a second worker on the machine needs another.
    web_port: int = Field(
        default=6066,
        ge=0,
        le=65535,
        alias="web_port",
        description="the worker's status page on `TICDC_SINK_METRICS_HOST` (0: off; one port "
        "per worker)",
    )
    # Often enough that a stall shows within a minute.
    progress_interval: float = Field(
        default=30.0,
        ge=1.0,
        le=3600.0,
        alias="progress_interval",
        description="seconds between a worker's progress lines (1-3600)",
    )
    # Off: TiCDC's resolved events move the watermarks; only a stream without them (Debezium)
    # needs this.
    resolve_when_idle: float = Field(
        default=0.0,
        ge=0.0,
        le=3600.0,
        alias="resolve_when_idle",
        description="seconds a partition read to its end stays quiet before the worker moves "
        "its watermark to the highest commit ts it staged from it (0: off; 0-3600; for "
        "Debezium, see Streams without watermarks)",
    )


class LargeMessageSettings(SettingsGroup):
    """Large messages: how the worker makes TiCDC's cut-down messages whole."""

    # Unset: each claim-check object is read from its location as the message names it.
    claim_check_storage: str = Field(
        default=UNSET,
        alias="claim_check_storage",
        repr=False,  # its URI may carry a secret key: describe() shows it masked
        description="the changefeed's `claim-check-storage-uri` (`file://`, "
        "`s3://...?endpoint=&region=`); claim-check objects are read there by file name "
        "(unset: each location as written)",
    )
    # The object is written before TiCDC sends its message, so only a failing store makes a
    # read fail, and briefly: a few reads ride it out.
    claim_check_attempts: int = Field(
        default=3,
        ge=1,
        le=20,
        alias="claim_check_attempts",
        description="reads of an unreadable claim-check object before its message is "
        "dead-lettered (1-20)",
    )
    # Unset: the upstream is read only where the operator gives it (and the access to it).
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


class SchemaRegistrySettings(SettingsGroup):
    """Schema registry: where the Avro protocol's schemas are fetched by id (and registered by
    `produce`)."""

    # Loopback, the registry `ticdc-sink services up --registry` starts (Apicurio's Confluent
    # API): no configuration on a fresh machine.
    url: str = Field(
        default="http://127.0.0.1:8081/apis/ccompat/v7",
        alias="schema_registry",
        description="Confluent-API schema registry: `http://` or `https://` base URL (the "
        "changefeed's `schema-registry`), optionally URL-encoded `user:password@` (basic auth)",
    )
    # Unset: the URL's own password, if it has one.
    password: SecretStr = Field(
        default=NO_SECRET,
        alias="schema_registry_password",
        description="the registry's basic-auth password; replaces one in "
        "`TICDC_SINK_SCHEMA_REGISTRY`",
    )
    # The system's CAs, which sign a hosted registry's certificate.
    ssl_ca: str = Field(
        default=UNSET,
        alias="schema_registry_ssl_ca",
        description="with `https://`: CA file (unset: the system's CAs)",
    )
    # No client certificate: a registry asks for one only with mutual TLS.
    ssl_cert: str = Field(
        default=UNSET,
        alias="schema_registry_ssl_cert",
        description="with `https://`: client certificate file",
    )
    # No certificate, no key.
    ssl_key: str = Field(
        default=UNSET,
        alias="schema_registry_ssl_key",
        description="with `https://`: the client certificate's key",
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        return value

    @model_validator(mode="after")
    def _check_tls(self) -> SchemaRegistrySettings:
        files = TlsFiles(
            ("schema_registry_ssl_ca", self.ssl_ca),
            ("schema_registry_ssl_cert", self.ssl_cert),
            ("schema_registry_ssl_key", self.ssl_key),
        )
        check_registry_tls(self.url, files)
        return self

    def __repr_args__(self) -> Any:
        # repr() and str() show the URL with its password masked, like describe().
        for name, value in super().__repr_args__():
            yield name, masked("schema_registry", value) if name == "url" else value


class SinkSettings(SettingsGroup):
    """The sink: micro-batches, routes, and what it does with what the downstream refuses."""

    # Large enough to amortize Spark's per-batch cost (about 0.2 s).
    batch_rows: int = Field(
        default=200_000,
        gt=0,
        alias="batch_rows",
        description="rows per micro-batch of the sink (cut between transactions only)",
    )
    # A downstream transaction costs MariaDB/InnoDB more per table the more tables it holds
    # (each one's locks and open handle stay to the commit): thousands of small tables in one
    # batch apply several times slower than in batches of hundreds, while a batch's fixed cost
    # (a commit, the checkpoint) stays small per table at this size. The same on N connections:
    # smaller batches gained little there and cost memory (docs/scaling.md, "Connections").
    batch_tables: int = Field(
        default=500,
        gt=0,
        alias="batch_tables",
        description="tables per micro-batch of the sink: a batch also ends once its changes "
        "reach this many tables (cut between transactions only; one transaction touching more "
        "stays whole)",
    )
    # One: the sink's single session is already most of what a downstream on a few cores
    # takes, and each connection more holds a batch in memory; more pays off where the
    # downstream has the cores (docs/scaling.md, "Connections").
    apply_connections: int = Field(
        default=1,
        ge=1,
        le=64,
        alias="apply_connections",
        description="downstream connections the sink applies a round's batches over at once; "
        "batches whose keys meet wait for each other, and every batch commits after the one "
        "before it, with its checkpoint (1: one batch at a time)",
    )
    # What bounds the sink's memory on one huge upstream transaction (a bulk load, a mass
    # DELETE): ~2 KiB a 10-column change held, and up to four parts in flight (applied, queued,
    # planned, being read), well under 1 GiB; large enough that a part's fixed cost (a LOAD
    # DATA, a DELETE round) stays small per row.
    chunk_rows: int = Field(
        default=50_000,
        gt=0,
        alias="chunk_rows",
        description="changes of one upstream transaction the sink holds at once: a larger "
        "transaction is read, planned and loaded in parts of this many, all in one downstream "
        "transaction that commits with the last part",
    )
    # Off: the sink's promise is the upstream's transactions, whole; giving that up for a
    # transaction the downstream cannot take whole is the operator's choice (TiCDC's own MySQL
    # sink splits such transactions by default).
    split_large_txn: bool = Field(
        default=False,
        alias="split_large_txn",
        description="a transaction the downstream refuses as too large (MariaDB/MySQL 1197, "
        "TiDB 8004/8175) is committed in chunks of `TICDC_SINK_CHUNK_ROWS` changes, all its "
        "removals first, then its new rows, each chunk with its position, so a crash resumes "
        "at the next chunk: gives up that transaction's atomicity (others read it half-applied "
        "meanwhile); `false`: the sink names the limit to raise and waits, nothing applied",
    )
    # Rows of 1 MB make a part of TICDC_SINK_CHUNK_ROWS changes 50 GB: the bytes bound a part
    # of wide rows where the count cannot; 64 MiB keeps a part's fixed cost small per byte.
    chunk_bytes: int = Field(
        default=64 << 20,
        gt=0,
        alias="chunk_bytes",
        description="a part of one upstream transaction larger than a chunk also ends once its "
        "changes' values pass this many bytes (estimated from every 16th change; rows of 1 MB: "
        "parts of 64 rows)",
    )
    # Where it equals an upsert, one write per row instead of three through a staging table.
    load_in_place: bool = Field(
        default=True,
        alias="load_in_place",
        description="load a table's upserts straight into it (MariaDB, MySQL: LOAD DATA LOCAL, "
        "REPLACE by key) where that equals an upsert from a staging table; `false`: always "
        "through a staging table",
    )
    # Stop: skipping a row leaves the downstream short of it, an operator's choice.
    on_row_error: OnRowError = Field(
        default=OnRowError.STOP,
        alias="on_row_error",
        description="a row the downstream refuses: `stop` the sink with one message, or "
        "`deadletter` it and go on",
    )
    # Stop: a skipped DDL may leave the downstream's tables unlike the upstream's.
    on_ddl_error: OnDDLError = Field(
        default=OnDDLError.STOP,
        alias="on_ddl_error",
        description="`stop`, or `skip` a DDL the downstream refuses (logged, counted)",
    )
    # Stop: dropping changes is the operator's choice, made knowing what is lost.
    on_schema_drift: OnSchemaDrift = Field(
        default=OnSchemaDrift.STOP,
        alias="on_schema_drift",
        description="`stop`, or `ignore`: drop changes the downstream has no table or column "
        "for (counted)",
    )
    # No routes: every table replicates under its own name.
    routes: tuple[Route, ...] = Field(
        default=(),
        alias="routes",
        description="`db.table=db.table` routes, comma list; shell wildcards, `*` keeps that "
        "part of the name (`app.*=replica.*`); the first match wins",
    )
    # No skipped tables: every table replicates.
    skip_tables: tuple[str, ...] = Field(
        default=(),
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

    # Every core of the sink's own machine: no cluster to set up first.
    master: str = Field(
        default="local[*]",
        alias="spark_master",
        description="`local[N]`, `spark://…`, `yarn`, `k8s://…` (see Spark clusters)",
    )
    # Where Debian's libmariadb-java puts MariaDB Connector/J, which Spark's JDBC loads need.
    jdbc_jar: str = Field(
        default="/usr/share/java/mariadb-java-client.jar",
        alias="jdbc_jar",
        description="MariaDB Connector/J on the sink's machine; Spark ships it to the executors",
    )
    # On a 2-core local master a Spark load's fixed cost is only paid back from about 50k rows.
    min_rows: int = Field(
        default=50_000,
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

    # Progress lines, outages and moved watermarks, without each message's detail.
    level: LogLevel = Field(
        default=LogLevel.INFO,
        alias="log_level",
        description="`debug`, `info`, `warning`, `error`",
    )
    # One line a record, for a person reading a terminal or a supervisor's log.
    format: LogFormat = Field(
        default=LogFormat.TEXT,
        alias="log_format",
        description="`text` (one line a record) or `json` (one object a line)",
    )

    @field_validator("level", "format", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class MetricsSettings(SettingsGroup):
    """Metrics: Prometheus' /metrics of the worker and the sink."""

    # Off: nothing listens unless the operator gives it a port.
    port: int = Field(
        default=0,
        ge=0,
        le=65535,
        alias="metrics_port",
        description="Prometheus `/metrics` for the worker and the sink (0: off)",
    )
    # Loopback: /metrics and the status page reach other machines only if the operator opens them.
    host: str = Field(
        default="127.0.0.1",
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


class Settings(BaseModel):
    """Everything a ticdc-sink process reads at start, in groups."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # One pipeline per machine needs no name of its own; a second one must be given another.
    group: str = Field(default="ticdc-sink", description="consumer group and pipeline name")
    # Long enough for services started beside it (Kafka takes about 10 s), short enough to
    # notice a wrong address.
    startup_timeout: float = Field(
        default=60.0,
        ge=0.0,
        description="seconds a starting worker or sink waits for Redis, Kafka and the downstream",
    )
    # Past Docker's 10 s and Kubernetes' 30 s grace: a supervisor's SIGKILL comes first there;
    # without one, a stop stuck on a service that went away still ends. Ending then is as safe
    # as a SIGKILL: what was not committed is read again.
    stop_timeout: float = Field(
        default=45.0,
        ge=0.0,
        description="seconds a worker or sink may take to stop after SIGTERM or SIGINT before "
        "it ends itself (exit 3, its threads' stacks on stderr); 0 waits for ever",
    )
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    downstream: DownstreamSettings = Field(default_factory=DownstreamSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    large_messages: LargeMessageSettings = Field(default_factory=LargeMessageSettings)
    schema_registry: SchemaRegistrySettings = Field(default_factory=SchemaRegistrySettings)
    sink: SinkSettings = Field(default_factory=SinkSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)

    @field_validator("group")
    @classmethod
    def _check_group(cls, value: str) -> str:
        return _identifier(value)

    def updated(self, changes: Mapping[str, Any]) -> Settings:
        """A copy with the settings ``changes`` names (by setting name: ``meta_db``,
        ``spark_min_rows``) changed, validated as a file's values are."""
        nested: dict[str, Any] = {}
        for name, field in self:
            nested[name] = dict(field) if isinstance(field, SettingsGroup) else field
        for name, value in changes.items():
            NAMES.place(nested, name, value)
        return _validated(nested, changes)

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
            value = NAMES.value_of(self, doc.name)
            if isinstance(value, tuple):
                value = ",".join(str(item) for item in value)
            shown[doc.variable] = "" if value is None else masked(doc.name, value)
        return shown


# The registry of every setting's name, variable, path and group.
NAMES = Names(Settings)
SETTINGS: tuple[SettingDoc, ...] = NAMES.settings
GROUPS: dict[str, type[BaseModel]] = NAMES.groups


def default_of(name: str) -> Any:
    """The default of the setting ``name`` (``jdbc_jar``), as its field declares it."""
    return NAMES.default_of(name)


def load_settings(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Read the settings: defaults, then the TOML file at ``path``, then the environment."""
    values = read_values(path, os.environ if environ is None else environ, NAMES)
    return _validated(NAMES.nested(values), values)


def _validated(nested: dict[str, Any], values: Mapping[str, Any]) -> Settings:
    """The settings from ``nested`` (by group), a failure told with the raw ``values``."""
    try:
        return Settings.model_validate(nested)
    except ValidationError as exc:
        raise ConfigError(explain(exc, values, NAMES)) from None
