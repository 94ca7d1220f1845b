"""LOAD DATA LOCAL that serves one thing only: the rows the sink wrote for the statement it runs.

The server names the file a LOCAL load sends, and PyMySQL sends whatever it names: a hostile or
compromised downstream could ask for ``/etc/passwd`` in reply to any statement. Connections made
here never read a file for the server: they send the bytes :func:`serving` holds, and only when
the server asks for the name given with them; any other request gets no data, and the statement
fails with :class:`~config.errors.ApplyError`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from pymysql.connections import Connection, MySQLResult
from pymysql.constants.CR import CR_COMMANDS_OUT_OF_SYNC
from pymysql.err import OperationalError
from pymysql.protocol import LoadLocalPacketWrapper

from config.errors import ApplyError

log = logging.getLogger("ticdc_sink.sink")


# Bytes per packet of a local load (a packet holds at most 16 MiB - 1). PyMySQL sends 16 KiB ones:
# each hands the GIL over, and while the read-ahead thread runs each costs up to a switch interval.
LOAD_PACKET_BYTES = 1 << 20


class _GuardedResult(MySQLResult):  # type: ignore[misc]
    def _read_load_local_packet(self, first_packet: Any) -> None:
        conn: GuardedConnection = self.connection
        requested = LoadLocalPacketWrapper(first_packet).filename.decode(errors="replace")
        if conn.local_name is not None and requested == conn.local_name:
            self._send(conn, conn.local_data)
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
            "load: refused (only the rows the sink wrote for its own load are ever sent)"
        )

    def _send(self, conn: GuardedConnection, data: bytes | memoryview) -> None:
        # PyMySQL's own ending of a local load (an empty packet, then the server's OK), after
        # the rows in big packets.
        view = memoryview(data)
        size = min(conn.max_allowed_packet, LOAD_PACKET_BYTES)
        for start in range(0, len(view), size):
            conn.write_packet(view[start : start + size])
        conn.write_packet(b"")
        ok_packet = conn._read_packet()
        if not ok_packet.is_ok_packet():
            raise OperationalError(CR_COMMANDS_OUT_OF_SYNC, "Commands Out of Sync")
        self._read_ok_packet(ok_packet)


class GuardedConnection(Connection):  # type: ignore[misc]
    """A PyMySQL connection whose LOAD DATA LOCAL sends only :attr:`local_data`, and only when
    asked for :attr:`local_name`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Set before connecting: the handshake already reads results.
        self.local_name: str | None = None
        self.local_data: bytes | memoryview = b""
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
def serving(conn: Any, name: str, data: bytes | memoryview) -> Iterator[None]:
    """Let ``conn`` send ``data`` as the local file ``name`` (and nothing else) while the block
    runs."""
    if not isinstance(conn, GuardedConnection):
        raise ApplyError("LOAD DATA LOCAL needs a guarded connection (spark_sink.db.local_infile)")
    conn.local_name, conn.local_data = name, data
    try:
        yield
    finally:
        conn.local_name, conn.local_data = None, b""
