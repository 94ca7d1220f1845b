"""LOAD DATA LOCAL sends only the sink's own file: a fake MySQL server (a socket speaking just
enough of the protocol; faking the server IS the point) asks for /etc/passwd, and the test
checks which bytes the client sent back."""

from __future__ import annotations

import socket
import struct
import threading
from pathlib import Path

import pytest

from config.errors import ApplyError
from config.settings import load_settings
from spark_sink.db.connection import connect
from spark_sink.db.local_infile import LOAD_PACKET_BYTES, serving

# Client capabilities the fake server offers: protocol 4.1, secure auth, plugin auth, LOCAL files.
_CAPABILITIES = 0x1 | 0x80 | 0x200 | 0x2000 | 0x8000 | 0x80000
_OK = b"\x00\x00\x00\x02\x00\x00\x00"
SECRET_FILE = "/etc/passwd"


def _packet(sequence: int, payload: bytes) -> bytes:
    return struct.pack("<I", len(payload))[:3] + bytes([sequence]) + payload


def _handshake() -> bytes:
    return (
        b"\x0a5.7.0-fake\x00"
        + struct.pack("<I", 1)
        + b"abcdefgh\x00"
        + struct.pack("<H", _CAPABILITIES & 0xFFFF)
        + b"\x21"
        + struct.pack("<H", 2)
        + struct.pack("<H", _CAPABILITIES >> 16)
        + b"\x15"
        + b"\x00" * 10
        + b"ijklmnopqrst\x00"
        + b"mysql_native_password\x00"
    )


class FakeServer:
    """Answers every query with OK, except a query holding ``trigger``: that one is answered
    with a LOCAL INFILE request for ``requested``, and what the client sends back is kept."""

    def __init__(self, trigger: bytes, requested: str) -> None:
        self.trigger = trigger
        self.requested = requested
        self.received = bytearray()
        self.packets = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _read(self, conn: socket.socket) -> tuple[int, bytes]:
        header = self._exact(conn, 4)
        size = int.from_bytes(header[:3], "little")
        return header[3], self._exact(conn, size)

    @staticmethod
    def _exact(conn: socket.socket, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = conn.recv(size - len(data))
            if not chunk:
                raise ConnectionError("client left")
            data += chunk
        return data

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.sendall(_packet(0, _handshake()))
            sequence, _ = self._read(conn)
            conn.sendall(_packet(sequence + 1, _OK))
            try:
                while True:
                    _, command = self._read(conn)
                    if command[:1] == b"\x01":  # COM_QUIT
                        return
                    if self.trigger not in command:
                        conn.sendall(_packet(1, _OK))
                        continue
                    conn.sendall(_packet(1, b"\xfb" + self.requested.encode()))
                    while True:
                        sequence, data = self._read(conn)
                        if not data:
                            break
                        self.received += data
                        self.packets += 1
                    conn.sendall(_packet(sequence + 1, _OK))
            except ConnectionError:
                return


ROWS = b'1,"the sink\'s own rows"\n'
# The name the sink's LOAD DATA LOCAL asks for; the rows come from memory.
STAGING_NAME = "ticdc-sink-rows.csv"


def _connect(server: FakeServer):  # type: ignore[no-untyped-def]
    settings = load_settings(
        environ={
            "TICDC_SINK_DOWNSTREAM": f"mysql://root@127.0.0.1:{server.port}/?ssl-mode=disabled"
        }
    )
    return connect(settings, local_infile=True, autocommit=True)


def test_a_server_asking_for_another_file_during_the_sinks_load_gets_nothing() -> None:
    server = FakeServer(b"LOAD DATA", SECRET_FILE)
    conn = _connect(server)
    with (
        conn.cursor() as cursor,
        pytest.raises(ApplyError, match="/etc/passwd"),
        serving(conn, STAGING_NAME, ROWS),
    ):
        cursor.execute(f"LOAD DATA LOCAL INFILE '{STAGING_NAME}' INTO TABLE t")
    # The connection stays in step: the next statement runs.
    with conn.cursor() as cursor:
        cursor.execute("SELECT 1")
    conn.close()
    server.thread.join(timeout=5)
    secret = Path(SECRET_FILE).read_bytes()
    assert secret, "the test needs a non-empty /etc/passwd"
    assert bytes(server.received) == b""
    assert b"root:" not in server.received


def test_a_server_asking_for_a_file_in_reply_to_any_other_statement_gets_nothing() -> None:
    server = FakeServer(b"SELECT", SECRET_FILE)
    conn = _connect(server)
    with conn.cursor() as cursor, pytest.raises(ApplyError, match="refused"):
        cursor.execute("SELECT 42")
    conn.close()
    server.thread.join(timeout=5)
    assert bytes(server.received) == b""


def test_the_rows_the_sink_wrote_for_the_statement_are_sent() -> None:
    server = FakeServer(b"LOAD DATA", STAGING_NAME)
    conn = _connect(server)
    with conn.cursor() as cursor, serving(conn, STAGING_NAME, ROWS):
        cursor.execute(f"LOAD DATA LOCAL INFILE '{STAGING_NAME}' INTO TABLE t")
    conn.close()
    server.thread.join(timeout=5)
    assert bytes(server.received) == ROWS


def test_many_rows_go_in_big_packets_and_arrive_whole() -> None:
    rows = b"".join(b'%d,"row %d"\n' % (i, i) for i in range(300_000))
    assert len(rows) > 3 * LOAD_PACKET_BYTES
    server = FakeServer(b"LOAD DATA", STAGING_NAME)
    conn = _connect(server)
    with conn.cursor() as cursor, serving(conn, STAGING_NAME, memoryview(rows)):
        cursor.execute(f"LOAD DATA LOCAL INFILE '{STAGING_NAME}' INTO TABLE t")
    conn.close()
    server.thread.join(timeout=5)
    assert bytes(server.received) == rows
    assert server.packets == -(-len(rows) // LOAD_PACKET_BYTES)
