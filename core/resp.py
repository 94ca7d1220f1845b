"""Redis commands encoded up front and sent in one round trip.

redis-py encodes each argument of a pipeline in Python as it sends, while the event loop waits
for the GIL. A staging batch has two arguments per row, and natively packed rows arrive already
encoded (``ticdc_sink_native.stage_frames``, made in the decoding thread). A
:class:`CommandBatch` sends encoded arguments as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import redis

# A command argument: bytes as they are, text as UTF-8, an integer in decimal (as redis-py).
Arg = bytes | str | int


def encode_args(args: Iterable[Arg]) -> bytes:
    """``args`` as RESP bulk strings, without a command header."""
    return b"".join(_bulk(arg) for arg in args)


def _bulk(arg: Arg) -> bytes:
    data = arg if isinstance(arg, bytes) else str(arg).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


class CommandBatch:
    """Commands queued as encoded bytes and sent in one round trip (a pipeline, no MULTI)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._commands = 0

    def __len__(self) -> int:
        return self._commands

    def command(self, *args: Arg) -> None:
        """Queue one command."""
        self.encoded(len(args), [encode_args(args)])

    def encoded(self, count: int, parts: Iterable[bytes]) -> None:
        """Queue one command of ``count`` arguments, already encoded as ``parts``."""
        self._parts.append(b"*%d\r\n" % count)
        self._parts.extend(parts)
        self._commands += 1

    def execute(self, client: redis.Redis) -> list[Any]:
        """Send the queued commands and return their raw replies in order.

        An error reply (or one inside EXEC's) is raised once every reply is read, so the
        connection stays in step; a connection error leaves the connection closed (Redis may
        have run any prefix).
        """
        if not self._commands:
            return []
        pool = client.connection_pool
        # redis-py types its connections loosely: the two calls below are its public API.
        connection: Any = pool.get_connection()
        try:
            # One buffer: a send per part would be a system call per message.
            connection.send_packed_command([b"".join(self._parts)])
            replies = [_reply(connection) for _ in range(self._commands)]
        except BaseException:
            connection.disconnect()
            raise
        finally:
            pool.release(connection)
        for reply in replies:
            # EXEC answers with an array holding each queued command's reply, errors included.
            for item in reply if isinstance(reply, list) else [reply]:
                if isinstance(item, redis.ResponseError):
                    raise item
        return replies


def _reply(connection: Any) -> Any:
    try:
        return connection.read_response()
    except redis.ResponseError as error:
        return error
