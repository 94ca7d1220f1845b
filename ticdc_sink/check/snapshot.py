"""The two reads a check compares: the downstream in one consistent-snapshot read transaction,
and the upstream TiDB at exactly the checkpoint ts that transaction holds.

TiDB reads at a TSO with ``SET @@tidb_snapshot = '<ts>'``, to the exact logical ts (``AS OF
TIMESTAMP TIDB_PARSE_TSO(ts)`` keeps milliseconds only). A ts older than the GC safe point
(``mysql.tidb``'s ``tikv_gc_safe_point``, TiDB's pkg/util/gcutil ``ValidateSnapshot`` checks the
same) has lost the versions it needs: that is said in one line with the setting to raise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import pymysql

from config.errors import ConfigError, ServiceError, UnreachableError
from config.settings import Downstream, Settings
from core.tso import TSO_PHYSICAL_SHIFT, describe_tso, utc_millis_time
from spark_sink.db.checkpoint import CheckpointTable
from spark_sink.db.connection import connect
from spark_sink.db.dialect import Server, server_dialect
from spark_sink.db.split_position import SplitPositionTable
from ticdc_sink.failures import MYSQL_UNREACHABLE

T = TypeVar("T")
# MySQL errors that mean "no checkpoint recorded yet": no meta database, no checkpoint table.
NOT_YET_CREATED = frozenset({1049, 1146})
# A snapshot read past the GC safe point, as TiDB refuses it (pingcap/tidb pkg/errno/errcode.go:
# ErrSnapshotTooOld 8055 "snapshot is older than GC safe point", ErrGCTooEarly 9006).
GC_TOO_EARLY = frozenset({9006, 8055})
# How mysql.tidb writes the safe point (TiDB's gcutil / TiKV's GC worker: tikv format).
SAFE_POINT_FORMAT = "%Y%m%d-%H:%M:%S.%f %z"
# The downstream's settings that fold into its address: none of them is the upstream's.
DOWNSTREAM_ONLY = {
    "downstream_password": "",
    "downstream_ssl_mode": None,
    "downstream_ssl_ca": "",
    "downstream_ssl_cert": "",
    "downstream_ssl_key": "",
}
# Opening several snapshots that hold one checkpoint ts: tries before each keeps its own.
SAME_TS_ATTEMPTS = 5


class GcSafePointError(ServiceError):
    """The checkpoint ts is older than the upstream's GC safe point."""


@dataclass
class Session:
    """A downstream connection in its snapshot, and an upstream one reading at its ts."""

    downstream: Any
    upstream: Any
    ts: int

    def close(self) -> None:
        for conn in (self.downstream, self.upstream):
            with contextlib.suppress(pymysql.MySQLError):
                conn.close()


def upstream_settings(settings: Settings, address: str) -> Settings:
    """The settings with ``address`` as the server connected to (``--upstream``), its own
    password and TLS parameters only: the downstream's password and ssl-* settings are the
    downstream's."""
    try:
        parsed = Downstream.parse(address)
        parsed.check_tls()
    except ValueError as error:
        raise ConfigError(f"--upstream {address!r}: {error}") from None
    return settings.updated({"downstream": parsed, **DOWNSTREAM_ONLY})


def gc_problem(ts: int, safe_point: str | None) -> str | None:
    """The line for a ``ts`` past the GC safe point ``safe_point`` (mysql.tidb's text); None
    when it is readable."""
    if not safe_point:
        return None
    try:
        moment = datetime.strptime(safe_point, SAFE_POINT_FORMAT)
    except ValueError:
        return None
    safe_millis = int(moment.astimezone(UTC).timestamp() * 1000)
    if ts >> TSO_PHYSICAL_SHIFT >= safe_millis:
        return None
    return gc_line(ts, utc_millis_time(safe_millis))


def gc_line(ts: int, safe_point: str) -> str:
    return (
        f"the checkpoint ts {describe_tso(ts)} is older than the upstream's GC safe point "
        f"({safe_point}): TiDB no longer holds the versions to read it at; raise the "
        "upstream's tidb_gc_life_time above the pipeline's lag plus the check's time "
        "(SET GLOBAL tidb_gc_life_time = '24h'), and check again"
    )


def start_snapshot(server: Server) -> str:
    """The statement that opens a consistent-snapshot read transaction on ``server`` (TiDB's
    parser takes no option list: its transactions read one snapshot, its start ts, anyway)."""
    if server is Server.TIDB:
        return "START TRANSACTION WITH CONSISTENT SNAPSHOT"
    return "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"


def open_downstream(settings: Settings) -> tuple[Any, int]:
    """A downstream connection inside a consistent-snapshot read transaction, and the
    pipeline's checkpoint ts in it."""
    conn = connect(settings)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute(start_snapshot(server_dialect(cursor).server))
            where = f"{settings.downstream.meta_db}.checkpoint of pipeline {settings.group!r}"
            meta, pipeline = settings.downstream.meta_db, settings.group
            found = _unless_missing(CheckpointTable(meta, pipeline).read, cursor)
            split = _unless_missing(SplitPositionTable(meta, pipeline).read, cursor)
        if found is None or not found.resolved_ts:
            raise ServiceError(f"no checkpoint downstream ({where}): nothing applied yet")
        if split is not None:
            raise ServiceError(
                f"a transaction is committed in chunks downstream ({split.describe()}): "
                "the downstream is not a snapshot of the upstream until its last chunk; "
                "check again once it is done"
            )
    except BaseException:
        conn.close()
        raise
    return conn, found.resolved_ts


def _unless_missing(read: Callable[[Any], T | None], cursor: Any) -> T | None:
    """What ``read`` finds; None when its table (or the meta database) is not there yet."""
    try:
        return read(cursor)
    except pymysql.MySQLError as error:
        if error.args and error.args[0] in NOT_YET_CREATED:
            return None
        raise


def open_upstream(settings: Settings, ts: int) -> Any:
    """An upstream TiDB connection reading at ``ts``."""
    url = settings.downstream.url
    try:
        conn = connect(settings, autocommit=True)
    except pymysql.MySQLError as error:
        why = error.args[1] if len(error.args) > 1 else error
        if error.args and error.args[0] in MYSQL_UNREACHABLE:
            raise UnreachableError(
                f"--upstream: cannot reach the upstream TiDB at {url.host}:{url.port} ({why})"
            ) from None
        raise ConfigError(
            f"--upstream {url}: the upstream TiDB refused the login ({why})"
        ) from None
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            version = str(cursor.fetchone()[0])
            if "tidb" not in version.lower():
                raise ConfigError(
                    f"--upstream {url}: not a TiDB (VERSION() is {version!r}); the upstream of "
                    "a TiCDC changefeed is TiDB"
                )
            problem = gc_problem(ts, _safe_point(cursor))
            if problem:
                raise GcSafePointError(problem)
            try:
                cursor.execute("SET @@tidb_snapshot = %s", (str(ts),))
            except pymysql.MySQLError as error:
                if error.args and error.args[0] in GC_TOO_EARLY:
                    raise GcSafePointError(gc_line(ts, str(error.args[1]))) from None
                raise
    except BaseException:
        conn.close()
        raise
    return conn


def _safe_point(cursor: Any) -> str | None:
    """mysql.tidb's GC safe point; None when none is recorded or the user may not read it."""
    try:
        cursor.execute(
            "SELECT VARIABLE_VALUE FROM mysql.tidb WHERE VARIABLE_NAME = 'tikv_gc_safe_point'"
        )
    except pymysql.MySQLError:
        return None
    row = cursor.fetchone()
    return str(row[0]) if row else None


def open_sessions(settings: Settings, upstream: Settings, count: int) -> list[Session]:
    """``count`` sessions, all at one checkpoint ts when the sink lets them (each snapshot is
    opened in turn: a batch committed between two moves the later one's ts)."""
    downstreams: list[tuple[Any, int]] = []
    sessions: list[Session] = []
    try:
        for _ in range(SAME_TS_ATTEMPTS):
            for conn, _ts in downstreams:
                conn.close()
            downstreams = [open_downstream(settings) for _ in range(count)]
            if len({ts for _, ts in downstreams}) == 1:
                break
        for conn, ts in downstreams:
            sessions.append(Session(conn, open_upstream(upstream, ts), ts))
    except BaseException:
        for conn, _ts in downstreams:
            with contextlib.suppress(pymysql.MySQLError):
                conn.close()
        for session in sessions:
            session.close()
        raise
    return sessions
