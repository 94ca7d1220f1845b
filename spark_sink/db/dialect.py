"""What differs between the servers the sink writes into (MariaDB, MySQL, TiDB): the one place
that writes the sink's SQL and classifies the servers' errors, picked once from ``VERSION()``.

Statements come back as text with identifiers quoted and ``%s`` marks where values are bound;
a statement with marks has every ``%`` of its identifiers doubled (PyMySQL formats the whole text).
One module past the usual size on purpose: each server's differences read side by side.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pymysql

from config.errors import TransientApplyError

# Re-exported: the one identifier quoting every downstream statement uses.
from core.sql import quote as quote


class Server(StrEnum):
    """The MySQL-compatible servers the sink knows apart."""

    MARIADB = "mariadb"
    MYSQL = "mysql"
    TIDB = "tidb"


# Spark's JDBC writer sets READ_UNCOMMITTED on its connections unless told otherwise; TiDB refuses
# that level (error 8048, "The isolation level 'READ-UNCOMMITTED' is not supported").
SPARK_DEFAULT_ISOLATION = "READ_UNCOMMITTED"
# What a staging load into TiDB runs at instead: nothing else writes a staging table while it loads.
TIDB_ISOLATION = "READ_COMMITTED"
# MySQL deprecates VALUES(col) in ON DUPLICATE KEY UPDATE from this release on (row alias instead).
MYSQL_ROW_ALIAS_SINCE = (8, 0, 20)
# The row alias of an upsert's new row (MySQL 8.0.20+), and the staging table's alias.
NEW_ROW = "new"
STAGED = "s"
# Connector/J batching: MariaDB's bulk command (several times the rate of rewritten batches on
# MariaDB: docs/benchmarks.md); the multi-row INSERTs it rewrites a batch into, for every other
# server.
JDBC_BULK_STATEMENTS = "useBulkStmts=true&rewriteBatchedStatements=false"
JDBC_REWRITTEN_BATCHES = "useBulkStmts=false&rewriteBatchedStatements=true"
# Staged rows from which emptying a staging table by TRUNCATE (a DDL, slow to start) beats DELETE.
TRUNCATE_MIN_ROWS = 20_000

# Errors every MySQL-protocol server shares that mean the server or the way to it is away for
# now: refused or lost connections, too many connections, a server shutting down (1053).
CONNECTION_ERRORS = frozenset({1040, 1053, 2002, 2003, 2006, 2013, 2055})
# Errors after which a retry may succeed: deadlocks and lock wait timeouts.
RETRYABLE_ERRORS = frozenset({1205, 1213})
# MariaDB: a connection killed by the server (KILL, shutdown).
MARIADB_CONNECTION_ERRORS = frozenset({1927})
# MySQL 8.0.24+: the server closed an idle connection (ER_CLIENT_INTERACTION_TIMEOUT).
MYSQL_CONNECTION_ERRORS = frozenset({4031})
# TiDB (docs.pingcap.com error-codes): PD / TiKV timeouts, TiKV busy, region unavailable (9001,
# 9002, 9003, 9005), write conflicts (8005, 9007), "safe to retry" KV errors (8022), a schema
# changed under the statement (8028).
TIDB_RETRYABLE_ERRORS = frozenset({8005, 8022, 8028, 9001, 9002, 9003, 9005, 9007})
# TiDB: a transaction over txn-total-size-limit ("Transaction is too large", 8004), or a session
# over its memory quota (8175, tidb_mem_quota_query), which a big transaction's buffer counts
# against. A single row over txn-entry-size-limit (8025) is no such error: smaller batches would
# not help; it is a refused row.
TIDB_TOO_LARGE_ERRORS = frozenset({8004, 8175})
# MariaDB and MySQL with a binary log: a transaction over max_binlog_cache_size (1197,
# ER_TRANS_CACHE_FULL).
TOO_LARGE_ERRORS = frozenset({1197})
# DDL errors that mean "already applied", ignored on replay as TiCDC does: database or table
# exists / does not exist, duplicate column or key name, can't drop a missing column or key.
ALREADY_APPLIED = frozenset({1007, 1008, 1050, 1051, 1060, 1061, 1091, 1146})
# "Unknown database": a DDL's database is not there downstream.
UNKNOWN_DATABASE = 1049
# LOAD DATA LOCAL turned off on the server (1148, 3948) or refused by the client (2068).
LOCAL_INFILE_REFUSED = frozenset({1148, 2068, 3948})

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def bindable(sql: str) -> str:
    """SQL text made safe for a statement with bound values: PyMySQL formats the whole text with
    ``%``, so a ``%`` inside an identifier (a table named ``100%``) must be doubled."""
    return sql.replace("%", "%%")


def error_code(error: BaseException) -> int | None:
    """The server's (or the client library's) number of ``error``, if it has one."""
    if isinstance(error, pymysql.MySQLError) and error.args and isinstance(error.args[0], int):
        return error.args[0]
    return None


def parse_version(version: str) -> tuple[int, int, int]:
    """The first ``major.minor.patch`` of a ``VERSION()`` (TiDB's is its MySQL-compatible one,
    ``8.0.11-TiDB-v8.5.0``); (0, 0, 0) when there is none."""
    found = _VERSION.search(version)
    if found is None:
        return (0, 0, 0)
    major, minor, patch = (int(part) for part in found.groups())
    return (major, minor, patch)


@dataclass(frozen=True)
class StagingCleanup:
    """The statement that empties a staging table after a batch, and when it runs."""

    statement: str
    # Inside the batch's own transaction (before its commit), else after the commit.
    in_batch: bool


@dataclass(frozen=True)
class Dialect:
    """One server's SQL and error codes, as the sink needs them. This base speaks the SQL MariaDB,
    TiDB and MySQL before 8.0.20 share; the subclasses change what differs."""

    server: Server
    version: str

    # --- errors --------------------------------------------------------------------------------

    def connection_errors(self) -> frozenset[int]:
        """Error numbers meaning the server, or the way to it, is away for now."""
        return CONNECTION_ERRORS

    def retryable_errors(self) -> frozenset[int]:
        """Error numbers, other than lost connections, after which a retry may succeed."""
        return RETRYABLE_ERRORS

    def is_connection_error(self, error: BaseException) -> bool:
        """Whether ``error`` means the downstream (or the way to it) is away for now."""
        if isinstance(error, TransientApplyError | pymysql.err.InterfaceError):
            return True
        return isinstance(error, pymysql.err.OperationalError) and (
            error_code(error) in self.connection_errors()
        )

    def is_transient(self, error: BaseException) -> bool:
        """Whether a retry of what failed with ``error`` may succeed."""
        if self.is_connection_error(error):
            return True
        return isinstance(error, pymysql.err.OperationalError | pymysql.err.InternalError) and (
            error_code(error) in self.retryable_errors()
        )

    def already_applied(self, error: BaseException) -> bool:
        """Whether a DDL failing with ``error`` had been applied before (a replay)."""
        return error_code(error) in ALREADY_APPLIED

    def unknown_database(self, error: BaseException) -> bool:
        return error_code(error) == UNKNOWN_DATABASE

    def refuses_local_infile(self, error: BaseException) -> bool:
        """Whether ``error`` says LOAD DATA LOCAL is turned off (server or client)."""
        return error_code(error) in LOCAL_INFILE_REFUSED

    def transaction_too_large(self, error: BaseException) -> bool:
        """Whether ``error`` says a transaction outgrew the server's size limits."""
        return error_code(error) in TOO_LARGE_ERRORS

    def transaction_limit(self) -> str:
        """What to raise on the server for a larger transaction."""
        return "the server's max_binlog_cache_size (SET GLOBAL max_binlog_cache_size = ...)"

    # --- upserts -------------------------------------------------------------------------------

    def inserted(self, column: str) -> str:
        """The value an upsert's ON DUPLICATE KEY UPDATE sees for ``column`` of the new row."""
        return f"VALUES({quote(column)})"

    def row_alias(self) -> str:
        """What follows an upsert's VALUES list to name the new row (nothing: VALUES())."""
        return ""

    def upsert_values(self, table: str, columns: Sequence[str], updates: str) -> str:
        """``INSERT`` of one row of bound ``columns`` into ``table`` that runs the assignments
        ``updates`` (written with :meth:`inserted`) on a duplicate key."""
        names = ", ".join(quote(c) for c in columns)
        marks = ", ".join(["%s"] * len(columns))
        return (
            f"{bindable(f'INSERT INTO {table} ({names})')} VALUES ({marks}){self.row_alias()} "
            f"ON DUPLICATE KEY UPDATE {bindable(updates)}"
        )

    def upsert_staged(self, target: str, stage: str, columns: Sequence[str], flag: str) -> str:
        """``INSERT ... SELECT`` of the staged rows to upsert (``flag`` = 0) into ``target``,
        every column set from the staged row on a duplicate key."""
        names = ", ".join(quote(c) for c in columns)
        updates = ", ".join(f"{quote(c)} = VALUES({quote(c)})" for c in columns)
        return (
            f"INSERT INTO {target} ({names}) SELECT {names} FROM {stage} "
            f"WHERE {quote(flag)} = 0 ON DUPLICATE KEY UPDATE {updates}"
        )

    # --- deletes -------------------------------------------------------------------------------

    def delete_by_key(self, target: str, keys: Sequence[str], count: int) -> str:
        """``DELETE`` of ``count`` rows of ``target`` by their bound key values (never NULL)."""
        if len(keys) == 1:
            match, one = quote(keys[0]), "%s"
        else:
            match = "(" + ", ".join(quote(k) for k in keys) + ")"
            one = "(" + ", ".join(["%s"] * len(keys)) + ")"
        marks = ", ".join([one] * count)
        return f"DELETE FROM {bindable(target)} WHERE {bindable(match)} IN ({marks})"

    def _staged_join(self, keys: Sequence[str]) -> str:
        # A table keyed by all its columns may hold NULLs: null-safe equality.
        return " AND ".join(f"t.{quote(k)} <=> {STAGED}.{quote(k)}" for k in keys)

    def delete_staged(
        self, target: str, stage: str, keys: Sequence[str], flag: str, where: str
    ) -> str:
        """``DELETE`` of every row of ``target`` that equals (on ``keys``) a staged image whose
        ``flag`` column meets ``where`` (e.g. ``> 0``, ``IN (1, 2)``)."""
        return (
            f"DELETE t FROM {target} AS t JOIN {stage} AS {STAGED} ON {self._staged_join(keys)} "
            f"WHERE {STAGED}.{quote(flag)} {where}"
        )

    def count_staged_copies(self, target: str, stage: str, keys: Sequence[str], flag: str) -> str:
        """Per staged delete image (``flag`` > 0): how many rows of ``target`` equal it."""
        column = f"{STAGED}.{quote(flag)}"
        return (
            f"SELECT {column}, COUNT(*) FROM {target} AS t JOIN {stage} AS {STAGED} "
            f"ON {self._staged_join(keys)} WHERE {column} > 0 GROUP BY {column}"
        )

    def delete_copies(
        self, target: str, stage: str, keys: Sequence[str], flag: str, image: int, count: int
    ) -> str:
        """``DELETE`` of ``count`` of the rows of a key-less ``target`` equal to staged image
        ``image`` (its other copies stay)."""
        match = " AND ".join(f"{target}.{quote(k)} <=> {STAGED}.{quote(k)}" for k in keys)
        return (
            f"DELETE FROM {target} WHERE EXISTS (SELECT 1 FROM {stage} AS {STAGED} "
            f"WHERE {STAGED}.{quote(flag)} = {image} AND {match}) LIMIT {count}"
        )

    # --- staging tables ------------------------------------------------------------------------

    def create_staging(
        self, stage: str, definitions: Sequence[str], flag: str, index: Sequence[str] = ()
    ) -> str:
        """``CREATE TABLE IF NOT EXISTS`` of a staging table: ``definitions`` (quoted column
        definitions), the flag column, and an index on ``index`` parts when given."""
        keyed = f", KEY tcs_probe ({', '.join(index)})" if index else ""
        return (
            f"CREATE TABLE IF NOT EXISTS {stage} ({', '.join(definitions)}, "
            f"{quote(flag)} INT UNSIGNED NOT NULL{keyed}) ENGINE=InnoDB"
        )

    def clear_staging(self, stage: str) -> str:
        """Empty ``stage`` of what a failed batch left (inside a transaction: no DDL)."""
        return f"DELETE FROM {stage}"

    def clear_staged_deletes(self, stage: str, flag: str) -> str:
        """Take ``stage``'s delete images (``flag`` > 0) out, leaving its images to upsert."""
        return f"DELETE FROM {stage} WHERE {quote(flag)} > 0"

    def empty_staging(self, stage: str, rows: int, committed: bool) -> StagingCleanup:
        """How ``stage`` is emptied after a batch staged ``rows`` rows in it, ``committed``
        by their loader's own connections (Spark) or else inside the batch's transaction."""
        # TRUNCATE is a DDL (an implicit commit, and slow to start); only worth it for big loads.
        if rows >= TRUNCATE_MIN_ROWS:
            return StagingCleanup(f"TRUNCATE TABLE {stage}", in_batch=False)
        return StagingCleanup(self.clear_staging(stage), in_batch=False)

    def load_data_local(
        self,
        path: str,
        table: str,
        targets: Sequence[str],
        assignments: Sequence[str],
        replace: bool = False,
    ) -> str:
        """``LOAD DATA LOCAL`` of the CSV file ``path`` (quoted, NULL unquoted, no escapes) into
        ``table``: fields go to ``targets`` (columns or @variables), then ``assignments``. With
        ``replace``, a row whose key (or other unique key) is taken replaces the row holding it."""
        literal = path.replace("\\", "\\\\").replace("'", "\\'")
        assign = f" SET {', '.join(assignments)}" if assignments else ""
        mode = "REPLACE " if replace else ""
        return (
            f"LOAD DATA LOCAL INFILE '{literal}' {mode}INTO TABLE {table} CHARACTER SET utf8mb4 "
            "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '' "
            f"LINES TERMINATED BY '\\n' ({', '.join(targets)}){assign}"
        )

    def loads_in_place(self) -> bool:
        """Whether a keyed table's upserts may load straight into it with ``LOAD DATA LOCAL ...
        REPLACE`` inside the batch's transaction: one write per row instead of three (the
        staging table's insert, the upsert, the staging table's delete)."""
        return True

    def locks_gaps(self) -> bool:
        """Whether a write may lock the gap next to a row as well as the row (InnoDB: REPLACE
        and a duplicate key's check take next-key locks, even in READ COMMITTED), so that two
        batches writing disjoint keys can still wait for each other: batches applied beside
        each other then write their tables one after another (:mod:`spark_sink.in_order`)."""
        return True

    # --- sessions ------------------------------------------------------------------------------

    def use_database(self, database: str) -> str:
        """Make ``database`` the session's current one."""
        return f"USE {quote(database)}"

    def savepoint(self, name: str) -> str:
        return f"SAVEPOINT {name}"

    def rollback_to(self, name: str) -> str:
        return f"ROLLBACK TO SAVEPOINT {name}"

    def strict_session(self) -> list[str]:
        """Statements that make the session refuse what a lax ``sql_mode`` would only warn
        about and clip, keeping the mode for :meth:`restore_session`."""
        return [
            "SET @tcs_mode = @@SESSION.sql_mode",
            "SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',STRICT_ALL_TABLES')",
        ]

    def restore_session(self) -> str:
        """The statement that gives the session back the mode :meth:`strict_session` kept."""
        return "SET SESSION sql_mode = @tcs_mode"

    def script(self, statements: Sequence[str]) -> list[str]:
        """``statements`` as they go in one round trip, run in order until the first fails:
        here each a statement of its own (the server sends a result a statement)."""
        return list(statements)

    def local_infile_query(self) -> str:
        """A query whose one value says whether the server takes LOAD DATA LOCAL."""
        return "SELECT @@GLOBAL.local_infile"

    def table_cache_query(self) -> str | None:
        """A query of how many tables the server keeps open and how many tables' definitions
        it caches (None: the server has no such limits)."""
        return "SELECT @@GLOBAL.table_open_cache, @@GLOBAL.table_definition_cache"

    # --- DDL and Spark -------------------------------------------------------------------------

    def runs_tidb_ddl(self) -> bool:
        """Whether TiDB-only DDL syntax (AUTO_RANDOM, placement, ...) runs here as it is."""
        return False

    def spark_write_options(self) -> dict[str, str]:
        """Options for Spark's JDBC writer on top of the common ones."""
        return {"isolationLevel": SPARK_DEFAULT_ISOLATION}

    def jdbc_batching(self) -> str:
        """Connector/J URL parameters for how a batch of rows is sent."""
        # Bulk statements are MariaDB's own command: another server gets multi-row INSERTs.
        return JDBC_REWRITTEN_BATCHES


@dataclass(frozen=True)
class MariaDBDialect(Dialect):
    """MariaDB: VALUES() upserts; its own code for a killed connection; bulk statements."""

    def connection_errors(self) -> frozenset[int]:
        return CONNECTION_ERRORS | MARIADB_CONNECTION_ERRORS

    def jdbc_batching(self) -> str:
        return JDBC_BULK_STATEMENTS

    def script(self, statements: Sequence[str]) -> list[str]:
        # One compound statement: one result for them all, where thousands of a few rows each
        # would cost the client a result apiece (and the server a packet apiece).
        return [f"BEGIN NOT ATOMIC {'; '.join(statements)}; END"]


@dataclass(frozen=True)
class MySQLDialect(Dialect):
    """MySQL: from 8.0.20 the row alias (``VALUES (...) AS new``) and the staged row's own alias
    replace the deprecated VALUES() in ON DUPLICATE KEY UPDATE."""

    @property
    def row_alias_upserts(self) -> bool:
        return parse_version(self.version) >= MYSQL_ROW_ALIAS_SINCE

    def connection_errors(self) -> frozenset[int]:
        return CONNECTION_ERRORS | MYSQL_CONNECTION_ERRORS

    def inserted(self, column: str) -> str:
        if not self.row_alias_upserts:
            return super().inserted(column)
        return f"{NEW_ROW}.{quote(column)}"

    def row_alias(self) -> str:
        return f" AS {NEW_ROW}" if self.row_alias_upserts else ""

    def upsert_staged(self, target: str, stage: str, columns: Sequence[str], flag: str) -> str:
        if not self.row_alias_upserts:
            return super().upsert_staged(target, stage, columns, flag)
        return upsert_from_staged_alias(target, stage, columns, flag)


def upsert_from_staged_alias(target: str, stage: str, columns: Sequence[str], flag: str) -> str:
    """``INSERT ... SELECT`` of the staged rows to upsert that names the new row by the SELECT's
    own table alias, never by ``VALUES()``."""
    names = ", ".join(quote(c) for c in columns)
    picked = ", ".join(f"{STAGED}.{quote(c)}" for c in columns)
    updates = ", ".join(f"{quote(c)} = {STAGED}.{quote(c)}" for c in columns)
    return (
        f"INSERT INTO {target} ({names}) SELECT {picked} FROM {stage} AS {STAGED} "
        f"WHERE {STAGED}.{quote(flag)} = 0 ON DUPLICATE KEY UPDATE {updates}"
    )


@dataclass(frozen=True)
class TiDBDialect(Dialect):
    """TiDB: TRUNCATE and CREATE are DDL jobs (hundreds of ms), so staging tables are made once
    and emptied by DELETE inside the batch's transaction (big batches: TRUNCATE after it); its
    own retryable and too-large errors; TiDB-only DDL runs as it is."""

    def retryable_errors(self) -> frozenset[int]:
        return RETRYABLE_ERRORS | TIDB_RETRYABLE_ERRORS

    def transaction_too_large(self, error: BaseException) -> bool:
        return error_code(error) in TIDB_TOO_LARGE_ERRORS

    def transaction_limit(self) -> str:
        return "TiDB's txn-total-size-limit (its config file; and tidb_mem_quota_query)"

    def empty_staging(self, stage: str, rows: int, committed: bool) -> StagingCleanup:
        if rows >= TRUNCATE_MIN_ROWS:
            # Deleted rows stay in TiKV as MVCC versions until GC (tidb_gc_life_time, 10 min),
            # even rows a transaction both inserted and deleted, and every later scan of the
            # table wades through them: small batches slow down for minutes after a big one
            # (docs/architecture.md, TiDB). TRUNCATE gives the table a fresh key range; its DDL
            # job is small next to a batch of this size.
            return StagingCleanup(f"TRUNCATE TABLE {stage}", in_batch=False)
        # A small batch's rows: a DELETE in the batch's own transaction, no DDL, no commit more.
        return StagingCleanup(self.clear_staging(stage), in_batch=True)

    def runs_tidb_ddl(self) -> bool:
        return True

    def table_cache_query(self) -> str | None:
        # TiDB's schema cache holds every table's definition; it opens no table handles.
        return None

    def locks_gaps(self) -> bool:
        # TiDB locks the keys a pessimistic transaction writes, never a gap between them.
        return False

    def loads_in_place(self) -> bool:
        # TiDB's LOAD DATA does not join the session's transaction the way InnoDB's does (it has
        # committed in its own chunks of rows): into the target it could break the batch's
        # atomicity with the checkpoint. Into a scratch staging table that does no harm.
        return False

    def upsert_staged(self, target: str, stage: str, columns: Sequence[str], flag: str) -> str:
        # TiDB's VALUES() of a BIT column reverses its bytes (pingcap/tidb#40653, open): the
        # staged row's alias gives every column as it was staged.
        return upsert_from_staged_alias(target, stage, columns, flag)

    def spark_write_options(self) -> dict[str, str]:
        return {"isolationLevel": TIDB_ISOLATION}


def dialect_for(version: str) -> Dialect:
    """The dialect of a server whose ``VERSION()`` is ``version``: TiDB says
    ``8.0.11-TiDB-v8.5.0``, MariaDB ``10.11.14-MariaDB-0+deb12u2``, MySQL ``8.0.36``."""
    lowered = version.lower()
    if "-tidb-" in lowered:
        return TiDBDialect(Server.TIDB, version)
    if "mariadb" in lowered:
        return MariaDBDialect(Server.MARIADB, version)
    return MySQLDialect(Server.MYSQL, version)


# Before a connection has told the server apart: what every MySQL-protocol server shares.
ANY_SERVER = Dialect(Server.MYSQL, "")


def server_dialect(cursor: Any) -> Dialect:
    """The dialect of the server ``cursor`` is connected to."""
    cursor.execute("SELECT VERSION()")
    return dialect_for(str(cursor.fetchone()[0]))
