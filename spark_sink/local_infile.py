"""LOAD DATA LOCAL that serves one file only: the one the sink wrote for the statement it runs.

The server names the file a LOCAL load sends, and PyMySQL sends whatever it names: a hostile or
compromised downstream could ask for ``/etc/passwd`` in reply to any statement. Connections made
here send a file only while :func:`serving` names it, and only that path; any other request gets
no data, and the statement fails with :class:`~config.errors.ApplyError`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from pymysql.connections import Connection, MySQLResult
from pymysql.protocol import LoadLocalPacketWrapper

from config.errors import ApplyError

log = logging.getLogger("ticdc_sink.sink")


class _GuardedResult(MySQLResult):  # type: ignore[misc]
    def _read_load_local_packet(self, first_packet: Any) -> None:
        conn: GuardedConnection = self.connection
        requested = LoadLocalPacketWrapper(first_packet).filename.decode(errors="replace")
        if conn.local_file is not None and requested == conn.local_file:
            super()._read_load_local_packet(first_packet)
            return
        # An empty packet ends the transfer with no data; then the server's reply keeps the
        # connection in step before the refusal is raised.
        conn.write_packet(b"")
        with contextlib.suppress(Exception):
            conn._read_packet()
        log.error(
            "the downstream asked for local file %r, which this statement does not load: refused",
            requested,
        )
        raise ApplyError(
            f"the downstream asked for local file {requested!r}, which this statement does not "
            "load: refused (only the sink's own staging file is ever sent)"
        )


class GuardedConnection(Connection):  # type: ignore[misc]
    """A PyMySQL connection whose LOAD DATA LOCAL sends only :attr:`local_file`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Set before connecting: the handshake already reads results.
        self.local_file: str | None = None
        super().__init__(*args, **kwargs)

    @property
    def info(self) -> str:
        """The server's summary of the last statement (after a LOAD DATA: ``Records: 3
        Deleted: 0  Skipped: 0  Warnings: 0``); empty when it sent none."""
        message = getattr(self._result, "message", None) or b""
        return bytes(message).decode("utf-8", "replace")

    def _read_query_result(self, unbuffered: bool = False) -> Any:
        # PyMySQL's own body, with the guarded result class.
        self._result = None
        result = _GuardedResult(self)
        if unbuffered:
            result.init_unbuffered_query()
        else:
            result.read()
        self._result = result
        if result.server_status is not None:
            self.server_status = result.server_status
        return result.affected_rows


@contextlib.contextmanager
def serving(conn: Any, path: str) -> Iterator[None]:
    """Let ``conn`` send the file at ``path`` (and nothing else) while the block runs."""
    if not isinstance(conn, GuardedConnection):
        raise ApplyError("LOAD DATA LOCAL needs a guarded connection (spark_sink.local_infile)")
    conn.local_file = path
    try:
        yield
    finally:
        conn.local_file = None
