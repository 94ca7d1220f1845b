"""Redis from Debian's ``redis-server``, with the append-only file on."""

from __future__ import annotations

import socket

from ticdc_sink.services.base import Endpoint, LocalService, require_binary

# everysec, not always: Redis writes the AOF before it replies, so a killed Redis process loses
# nothing a worker was told is staged; only a machine crash can lose up to one second, and the
# downstream checkpoint's Kafka offsets replay that. `always` would fsync every staging write.
APPENDFSYNC = "everysec"


class RedisService(LocalService):
    name = "redis"
    endpoint = Endpoint("127.0.0.1", 6379)

    def install(self) -> None:
        self.binary = require_binary("redis-server", "redis-server", self.log_file)

    def ready(self) -> bool:
        """PING answered with PONG: after a restart Redis answers -LOADING while it reads its
        append-only file back."""
        try:
            with socket.create_connection(
                (self.endpoint.host, self.endpoint.port), timeout=1
            ) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def command(self) -> list[str]:
        return [
            self.binary,
            "--bind", self.endpoint.host,
            "--port", str(self.endpoint.port),
            "--dir", str(self.home),
            "--appendonly", "yes",
            "--appendfsync", APPENDFSYNC,
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "yes",
        ]  # fmt: skip
