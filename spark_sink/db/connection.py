"""Connections to the downstream: made with TLS as the settings say and LOAD DATA LOCAL guarded,
what a failed one says about the settings, and the sink's own connection, made again after it
dropped, with what it reads of the server on connecting (its dialect, its local_infile)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pymysql
from pymysql.constants import CLIENT

from config.errors import ConfigError
from config.settings import Settings, SslMode, env_name
from core.connectivity import tls_problem
from spark_sink.db.dialect import ANY_SERVER, Dialect, server_dialect
from spark_sink.db.local_infile import GuardedConnection
from spark_sink.db.tls import pymysql_tls

# MySQL errors that point at the settings rather than at a passing outage.
ACCESS_DENIED = 1045
INSECURE_TRANSPORT = 3159
SSL_CONNECTION_ERROR = 2026


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


class SinkConnection:
    """The sink's one connection to the downstream, made when there is none (again after it
    dropped). On connecting it reads the server's dialect and whether the server takes LOAD DATA
    LOCAL, runs ``prepare`` and makes the meta database the current one."""

    def __init__(self, settings: Settings, prepare: Callable[[Any, Dialect], None]) -> None:
        self.settings = settings
        self._prepare = prepare
        self._conn: Any = None
        # The server's dialect, read on connecting (ANY_SERVER until then).
        self.dialect: Dialect = ANY_SERVER
        # The server's local_infile, read on connecting.
        self.local_infile = True

    def open(self) -> Any:
        """The open connection, made (and the server read) when there is none."""
        if self._conn is None or not self._conn.open:
            # Many statements to a round trip: small tables' upserts go so (loaders.run_statements).
            self._conn = connect(
                self.settings, local_infile=True, client_flag=CLIENT.MULTI_STATEMENTS
            )
            with self._conn.cursor() as cursor:
                self.dialect = server_dialect(cursor)
                self.local_infile = _local_infile_on(cursor, self.dialect)
                self._prepare(cursor, self.dialect)
                # Multi-table DELETE resolves its alias list in the current database.
                cursor.execute(self.dialect.use_database(self.settings.downstream.meta_db))
            self._conn.commit()
        return self._conn

    def drop(self) -> None:
        if self._conn is not None:
            # The connection is already broken or mid-transaction: nothing to save.
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None


def _local_infile_on(cursor: Any, dialect: Dialect) -> bool:
    """Whether the server takes LOAD DATA LOCAL (its local_infile; MySQL 8 turns it off by
    default; a server without the variable takes it)."""
    try:
        cursor.execute(dialect.local_infile_query())
    except pymysql.MySQLError:
        return True
    row = cursor.fetchone()
    return row is None or str(row[0]).upper() not in {"0", "OFF"}
