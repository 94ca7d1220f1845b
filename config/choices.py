"""What a setting can be: the named choices of the settings that take one."""

from __future__ import annotations

from enum import StrEnum


class Protocol(StrEnum):
    """The TiCDC protocols a topic can carry."""

    OPEN = "open"
    CRAFT = "craft"
    SIMPLE = "simple"
    SIMPLE_AVRO = "simple-avro"
    CANAL_JSON = "canal-json"
    DEBEZIUM = "debezium"
    AVRO = "avro"


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
