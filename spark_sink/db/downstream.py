"""The downstream database: connections, identifiers, table layouts, DDL and the checkpoint."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
import pymysql

from config.errors import ConfigError, DDLError, LostLeadershipError
from config.settings import Settings, SslMode, env_name
from core.connectivity import tls_problem
from core.outage import Outage
from spark_sink.db.dialect import ANY_SERVER, Dialect, quote
from spark_sink.db.local_infile import GuardedConnection
from spark_sink.db.tls import pymysql_tls

log = logging.getLogger("ticdc_sink.sink")
T = TypeVar("T")
# One per process, as a process has one downstream: each outage is logged once, whoever meets it.
DOWNSTREAM_OUTAGE = Outage("the downstream", log)

RETRY_ATTEMPTS = 6
RETRY_FIRST_DELAY_S = 0.5
# Characters of a long string column that a staging index covers (utf8mb4 keys max 3072 bytes).
INDEX_PREFIX = 191
# Staging columns for BIT, ENUM and SET hold the number: MySQL casts a number into them by value,
# but a string by its bytes or its name.
_NUMERIC_STAGING = ("bit", "enum", "set")


def table_name(schema: str, table: str) -> str:
    return f"{quote(schema)}.{quote(table)}"


def connect(settings: Settings, **kwargs: Any) -> pymysql.connections.Connection:
    """A connection to the downstream in UTC, with autocommit off unless asked, TLS as the
    ssl-mode says; LOAD DATA LOCAL sends only the file :func:`~spark_sink.db.local_infile.serving`
    names."""
    downstream = settings.downstream.url
    return GuardedConnection(
        host=downstream.host,
        port=downstream.port,
        user=downstream.user,
        password=downstream.password.get_secret_value(),
        charset="utf8mb4",
        init_command="SET time_zone = '+00:00'",
        autocommit=kwargs.pop("autocommit", False),
        max_allowed_packet=256 << 20,
        **pymysql_tls(downstream),
        **kwargs,
    )


# MySQL errors that point at the settings rather than at a passing outage.
ACCESS_DENIED = 1045
INSECURE_TRANSPORT = 3159
SSL_CONNECTION_ERROR = 2026


def downstream_problem(settings: Settings, error: BaseException) -> str | None:
    """What a failed connection says about the downstream settings (None: nothing to say)."""
    downstream = settings.downstream.url
    where = f"the downstream at {downstream.host}:{downstream.port}"
    setting = env_name("downstream")
    code = error.args[0] if isinstance(error, pymysql.MySQLError) and error.args else None
    if code == ACCESS_DENIED and downstream.effective_ssl_mode is SslMode.DISABLED:
        # MariaDB answers a plaintext login to a TLS-only server with "access denied" too.
        return (
            f"{setting} ssl-mode=disabled (or {env_name('downstream_password')}): {where} denied "
            f"access to {downstream.user!r}; a server that takes TLS only denies every plaintext "
            "login: set ssl-mode=required, verify-ca or verify-identity"
        )
    if code == ACCESS_DENIED:
        return (
            f"{env_name('downstream_password')} (or the password in {setting}): {where} denied "
            f"access to {downstream.user!r} (or the user needs a client certificate: ssl-cert)"
        )
    if code == INSECURE_TRANSPORT:
        return (
            f"{setting} ssl-mode={downstream.effective_ssl_mode}: {where} takes TLS connections "
            "only; set ssl-mode=required, verify-ca or verify-identity"
        )
    found = tls_problem(error, f"{setting} ssl-ca", downstream.ssl_ca, where)
    if found:
        return found
    if code == SSL_CONNECTION_ERROR:
        return f"{setting} ssl-mode={downstream.effective_ssl_mode}: {where} offers no TLS"
    return None


def check_downstream(settings: Settings) -> None:
    """Connect to the downstream once; a settings problem raises ConfigError."""
    try:
        connect(settings, autocommit=True).close()
    except pymysql.MySQLError as error:
        found = downstream_problem(settings, error)
        if found:
            raise ConfigError(found) from None


def is_transient(error: BaseException, dialect: Dialect = ANY_SERVER) -> bool:
    """Whether a retry may succeed, as ``dialect`` (the server's, once known) says."""
    return dialect.is_transient(error)


def with_retries(action: Callable[[], T], what: str, dialect: Dialect = ANY_SERVER) -> T:
    """Run ``action``, retrying the errors ``dialect`` calls transient with exponential backoff;
    a downstream that stays away longer raises to the caller (the sink's loop waits on)."""
    delay = RETRY_FIRST_DELAY_S
    for attempt in range(1, RETRY_ATTEMPTS + 1):
        try:
            result = action()
        except Exception as error:
            if not dialect.is_transient(error) or attempt == RETRY_ATTEMPTS:
                raise
            if dialect.is_connection_error(error):
                DOWNSTREAM_OUTAGE.failed(error, what)
            else:
                log.warning("%s failed (%s); retry %d in %.1f s", what, error, attempt, delay)
            time.sleep(delay)
            delay *= 2
            continue
        DOWNSTREAM_OUTAGE.answered()
        return result
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Column:
    name: str
    column_type: str  # information_schema COLUMN_TYPE, e.g. "bigint(20) unsigned"
    data_type: str
    generated: bool

    @property
    def binary(self) -> bool:
        return self.data_type in {
            "binary",
            "varbinary",
            "tinyblob",
            "blob",
            "mediumblob",
            "longblob",
        }

    def index_part(self) -> str:
        """The column as an index part: long strings and blobs need a prefix length."""
        if self.data_type in {"tinytext", "text", "mediumtext", "longtext", "json"} or (
            self.data_type.endswith("blob")
        ):
            return f"{quote(self.name)}({INDEX_PREFIX})"
        if self.data_type in {"char", "varchar", "binary", "varbinary"}:
            declared = int(self.column_type.split("(", 1)[1].split(")", 1)[0])
            if declared > INDEX_PREFIX:
                return f"{quote(self.name)}({INDEX_PREFIX})"
        return quote(self.name)

    @property
    def by_number(self) -> bool:
        """BIT, ENUM and SET: set from a number, by value (text would be bytes or a name)."""
        return self.data_type in _NUMERIC_STAGING

    @property
    def staging_type(self) -> str:
        if self.by_number:
            return "bigint unsigned"
        if self.data_type in {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}:
            return f"{self.column_type} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        return self.column_type


def table_columns(cursor: Any, schema: str, table: str) -> list[Column]:
    """The downstream table's columns in order; empty when the table does not exist."""
    cursor.execute(
        "SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, EXTRA FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (schema, table),
    )
    rows = cursor.fetchall()
    return [
        Column(name, column_type, data_type.lower(), "GENERATED" in (extra or "").upper())
        for name, column_type, data_type, extra in rows
    ]


@dataclass(frozen=True)
class TableFacts:
    """What decides whether rows may replace a downstream table's rows in place."""

    # The column sets of the primary key and every unique key.
    unique_keys: frozenset[frozenset[str]]
    # Another table's foreign key references this one (a replace would fire its ON DELETE).
    referenced: bool
    # The table has triggers (a replace fires DELETE and INSERT ones, not UPDATE ones).
    triggers: bool


def table_facts(cursor: Any, schema: str, table: str) -> TableFacts:
    """The downstream table's unique keys, and whether foreign keys or triggers involve it."""
    cursor.execute(
        "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0",
        (schema, table),
    )
    keys: dict[str, set[str]] = {}
    for index, column in cursor.fetchall():
        keys.setdefault(index, set()).add(column)
    cursor.execute(
        "SELECT (SELECT COUNT(*) FROM information_schema.KEY_COLUMN_USAGE "
        "WHERE REFERENCED_TABLE_SCHEMA = %s AND REFERENCED_TABLE_NAME = %s), "
        "(SELECT COUNT(*) FROM information_schema.TRIGGERS "
        "WHERE EVENT_OBJECT_SCHEMA = %s AND EVENT_OBJECT_TABLE = %s)",
        (schema, table, schema, table),
    )
    referencing, triggers = cursor.fetchone()
    return TableFacts(
        frozenset(frozenset(columns) for columns in keys.values()),
        int(referencing) > 0,
        int(triggers) > 0,
    )


def execute_ddl(
    cursor: Any, schema: str | None, query: str, home: str, dialect: Dialect = ANY_SERVER
) -> bool:
    """Run a DDL in its database ``schema`` (None: a statement about a whole database, which
    names it itself), then go back to the database ``home``; False when it was already
    applied (ignored as TiCDC does). A database that is not there is an error, never a
    reason to run the DDL elsewhere; ``DDLError`` carries the server's refusal."""
    try:
        if schema is not None:
            cursor.execute(dialect.use_database(schema))
        cursor.execute(query)
    except pymysql.MySQLError as error:
        if dialect.is_transient(error):
            raise
        if dialect.already_applied(error):
            log.info("DDL already applied (%s): %s", error.args[1], query)
            return False
        if dialect.unknown_database(error):
            raise DDLError(f"database {schema!r} does not exist downstream ({error})") from None
        raise DDLError(f"the downstream refused it: {error}") from None
    finally:
        with contextlib.suppress(pymysql.MySQLError):
            cursor.execute(dialect.use_database(home))
    return True


CHECKPOINT_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
  pipeline VARCHAR(64) NOT NULL PRIMARY KEY,
  resolved_ts BIGINT UNSIGNED NOT NULL,
  ddl_ts BIGINT UNSIGNED NOT NULL DEFAULT 0,
  epoch BIGINT UNSIGNED NOT NULL DEFAULT 0,
  offsets JSON NULL,
  skip_ddl_ts BIGINT UNSIGNED NOT NULL DEFAULT 0,
  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
)
"""


@dataclass(frozen=True)
class Checkpoint:
    resolved_ts: int
    ddl_ts: int
    epoch: int
    offsets: dict[str, int]
    # The commit ts of a DDL the operator told the sink to skip (`ticdc-sink skip-ddl`).
    skip_ddl_ts: int = 0


class CheckpointTable:
    """``<meta_db>.checkpoint``: per pipeline, how far the downstream is (monotonic)."""

    def __init__(self, meta_db: str, pipeline: str, dialect: Dialect = ANY_SERVER) -> None:
        self.table = table_name(meta_db, "checkpoint")
        self.meta_db = meta_db
        self.pipeline = pipeline
        # Writes the upserts below (VALUES() or MySQL 8's row alias).
        self.dialect = dialect

    def create(self, cursor: Any) -> None:
        cursor.execute(f"CREATE DATABASE IF NOT EXISTS {quote(self.meta_db)}")
        cursor.execute(CHECKPOINT_DDL.format(table=self.table))
        # Checkpoint tables made before `skip-ddl` existed lack its column.
        cursor.execute(
            "SELECT 1 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = 'checkpoint' AND COLUMN_NAME = 'skip_ddl_ts'",
            (self.meta_db,),
        )
        if cursor.fetchone() is None:
            cursor.execute(
                f"ALTER TABLE {self.table} ADD COLUMN skip_ddl_ts BIGINT UNSIGNED NOT NULL "
                "DEFAULT 0 AFTER offsets"
            )

    def read(self, cursor: Any) -> Checkpoint | None:
        cursor.execute(
            f"SELECT resolved_ts, ddl_ts, epoch, offsets, skip_ddl_ts FROM {self.table} "
            "WHERE pipeline = %s",
            (self.pipeline,),
        )
        row = cursor.fetchone()
        if row is None:
            return None
        return Checkpoint(
            int(row[0]), int(row[1]), int(row[2]), orjson.loads(row[3] or "{}"), int(row[4])
        )

    def request_skip(self, cursor: Any, ddl_ts: int) -> None:
        """Tell the sink to skip the DDL at ``ddl_ts`` instead of running it (inside the
        caller's transaction)."""
        new = self.dialect.inserted
        cursor.execute(
            self.dialect.upsert_values(
                self.table,
                ["pipeline", "resolved_ts", "skip_ddl_ts"],
                f"skip_ddl_ts = {new('skip_ddl_ts')}",
            ),
            (self.pipeline, 0, ddl_ts),
        )

    def advance(
        self,
        cursor: Any,
        resolved_ts: int,
        epoch: int,
        offsets: dict[str, int],
        ddl_ts: int | None = None,
    ) -> None:
        """Record progress inside the caller's transaction; a stale leader is refused."""
        cursor.execute(
            f"SELECT epoch FROM {self.table} WHERE pipeline = %s FOR UPDATE", (self.pipeline,)
        )
        row = cursor.fetchone()
        if row is not None and int(row[0]) > epoch:
            raise LostLeadershipError(f"pipeline {self.pipeline} is led by epoch {row[0]} now")
        new = self.dialect.inserted
        updates = (
            f"offsets = IF({new('resolved_ts')} >= resolved_ts, {new('offsets')}, offsets), "
            f"resolved_ts = GREATEST(resolved_ts, {new('resolved_ts')}), "
            f"ddl_ts = GREATEST(ddl_ts, {new('ddl_ts')}), epoch = {new('epoch')}"
        )
        cursor.execute(
            self.dialect.upsert_values(
                self.table, ["pipeline", "resolved_ts", "ddl_ts", "epoch", "offsets"], updates
            ),
            (self.pipeline, resolved_ts, ddl_ts or 0, epoch, orjson.dumps(offsets).decode()),
        )


class CheckpointWatch:
    """Reads a pipeline's applied resolved ts again and again over one connection.

    For pollers (progress lines, benchmarks): PyMySQL builds a TLS context for every new
    connection, ~20 ms of CPU, which a poller connecting each time steals from the pipeline.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.table = CheckpointTable(settings.downstream.meta_db, settings.group)
        self._conn: pymysql.connections.Connection | None = None

    def applied_resolved_ts(self) -> int:
        """The applied resolved ts now; 0 before the sink has recorded any."""
        try:
            if self._conn is None:
                self._conn = connect(self.settings, autocommit=True)
            with self._conn.cursor() as cursor:
                found = self.table.read(cursor)
        except pymysql.MySQLError:  # no checkpoint table yet, or the connection dropped
            self.close()
            return 0
        return found.resolved_ts if found else 0

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(pymysql.MySQLError):
                self._conn.close()
            self._conn = None

    def __enter__(self) -> CheckpointWatch:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
