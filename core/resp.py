"""Redis commands encoded up front and sent in one round trip.

redis-py encodes each argument of a pipeline in Python as it sends, while the event loop waits
for the GIL. A staging batch has two arguments per row, and natively packed rows arrive already
encoded (``ticdc_sink_native.stage_frames``, made in the decoding thread). A
:class:`CommandBatch` sends encoded arguments as they are.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    MovedError,
    RedisClusterException,
    TryAgainError,
)

# A command argument: bytes as they are, text as UTF-8, an integer in decimal (as redis-py).
Arg = bytes | str | int
# How long a batch retries TRYAGAIN (its slot's keys half moved) before the caller waits it out.
TRYAGAIN_FOR_S = 10.0
TRYAGAIN_PAUSE_S = 0.02
# How long a batch waits for the replicas it asks for (WAIT) before it counts as failed.
WAIT_MS = 5_000
# Redirections a batch follows before it gives up (a slot moving again and again).
MAX_REDIRECTIONS = 50
_ASKING = b"*1\r\n$6\r\nASKING\r\n"


def encode_args(args: Iterable[Arg]) -> bytes:
    """``args`` as RESP bulk strings, without a command header."""
    return b"".join(_bulk(arg) for arg in args)


def _bulk(arg: Arg) -> bytes:
    data = arg if isinstance(arg, bytes) else str(arg).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


class CommandBatch:
    """Commands queued as encoded bytes and sent in one round trip (a pipeline, no MULTI).

    ``route`` is a key in the slot of every queued command: a Redis Cluster client sends the
    batch to the master of that slot."""

    def __init__(self, route: str = "") -> None:
        self.route = route
        self._parts: list[bytes] = []
        # Each command's first part, its parts, and its name when MULTI or EXEC ("" else).
        self._commands: list[tuple[int, int, str]] = []

    def __len__(self) -> int:
        return len(self._commands)

    def command(self, *args: Arg) -> None:
        """Queue one command."""
        name = args[0] if args and args[0] in ("MULTI", "EXEC") else ""
        self.encoded(len(args), [encode_args(args)], str(name))

    def encoded(self, count: int, parts: Iterable[bytes], name: str = "") -> None:
        """Queue one command of ``count`` arguments, already encoded as ``parts``."""
        start = len(self._parts)
        self._parts.append(b"*%d\r\n" % count)
        self._parts.extend(parts)
        self._commands.append((start, len(self._parts) - start, name))

    def execute(
        self, client: redis.Redis | RedisCluster, replicas: int = 0, wait_ms: int = WAIT_MS
    ) -> list[Any]:
        """Send the queued commands and return their raw replies in order; with ``replicas``,
        only once that many replicas hold them (WAIT, in the same round trip).

        An error reply (or one inside EXEC's) is raised once every reply is read, so the
        connection stays in step; a connection error leaves the connection closed (Redis may
        have run any prefix). Fewer replicas than asked within ``wait_ms`` raise
        redis.TimeoutError (the writes stay: the caller retries as after a cut connection).
        """
        if not self._commands:
            return []
        wait = [encode_args(["WAIT", replicas, wait_ms])] if replicas else []
        if isinstance(client, RedisCluster):
            replies = self._execute_on_cluster(client, wait)
        else:
            payload = b"".join([*self._parts, b"*3\r\n" if wait else b"", *wait])
            replies = _round_trip(client, [payload], len(self._commands) + len(wait))
        if wait:
            acknowledged = replies.pop()
            if isinstance(acknowledged, redis.ResponseError):
                raise acknowledged
            if acknowledged < replicas:
                raise redis.TimeoutError(
                    f"{acknowledged} of {replicas} Redis replicas acknowledged the staged batch "
                    f"within {wait_ms} ms (TICDC_SINK_REDIS_MIN_REPLICAS)"
                )
        for reply in replies:
            # EXEC answers with an array holding each queued command's reply, errors included.
            for item in reply if isinstance(reply, list) else [reply]:
                if isinstance(item, redis.ResponseError):
                    raise item
        return replies

    def _execute_on_cluster(self, cluster: RedisCluster, wait: list[bytes]) -> list[Any]:
        if not self.route:
            raise ValueError("a batch for a Redis Cluster names a key of its slot (route)")
        body = [(first, size) for first, size, name in self._commands if not name]
        parts = [_MULTI]
        for first, size in body:
            parts.extend(self._parts[first : first + size])
        parts.append(_EXEC)
        if wait:
            parts += [b"*3\r\n", *wait]
        payload = b"".join(parts)
        # redis-py leaves the cluster's node look-ups untyped.
        untyped: Any = cluster
        node = untyped.get_node_from_key(self.route)
        asking = False
        tryagain_until = time.monotonic() + TRYAGAIN_FOR_S
        for _ in range(MAX_REDIRECTIONS):
            replies = _send(
                cluster,
                node,
                [_ASKING, payload] if asking else [payload],
                asking + len(body) + 2 + len(wait),
            )
            replies = replies[asking:]
            waited = replies[-1:] if wait else []
            replies = replies[: len(replies) - len(waited)]
            outcome = replies[-1]
            if isinstance(outcome, list):
                return self._unfolded(outcome) + waited
            redirect = _redirect(replies)
            if redirect is None:
                # Refused as queued, not redirected (CLUSTERDOWN, a malformed command):
                # nothing ran.
                raise _refusal(replies)
            if isinstance(redirect, TryAgainError):
                # The slot's keys are half moved: the migration goes on meanwhile.
                if time.monotonic() > tryagain_until:
                    raise redirect
                time.sleep(TRYAGAIN_PAUSE_S)
                continue
            if isinstance(redirect, MovedError):
                cluster.nodes_manager.move_slot(redirect)
            node = _node(cluster, f"{redirect.host}:{redirect.port}")
            asking = not isinstance(redirect, MovedError)
        raise redis.exceptions.ClusterError(
            f"the slot of {self.route} still moves after {MAX_REDIRECTIONS} redirections"
        )

    def _unfolded(self, results: list[Any]) -> list[Any]:
        """The replies the batch's commands would have had sent as queued (MULTI's OK, QUEUED,
        EXEC's array), from the one transaction's ``results``."""
        out: list[Any] = []
        group: list[Any] | None = None
        taken = iter(results)
        for _, _, name in self._commands:
            if name == "MULTI":
                group = []
                out.append(b"OK")
            elif name == "EXEC":
                out.append(group)
                group = None
            elif group is not None:
                group.append(next(taken))
                out.append(b"QUEUED")
            else:
                out.append(next(taken))
        return out


_MULTI = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"


def _send(cluster: RedisCluster, node: Any, payload: list[bytes], count: int) -> list[Any]:
    """:func:`_round_trip` to one node of ``cluster``; a node that fails makes the client learn
    the slots again (a failover may have moved them) before the error goes up."""
    try:
        return _round_trip(cluster.get_redis_connection(node), payload, count)
    except (redis.ConnectionError, redis.TimeoutError):
        with contextlib.suppress(redis.RedisError, RedisClusterException):
            cluster.nodes_manager.initialize(last_failed_node_name=node.name)
        raise


def _refusal(replies: list[Any]) -> redis.ResponseError:
    errors = [r for r in replies if isinstance(r, redis.ResponseError)]
    return errors[0] if errors else redis.ResponseError("the transaction was refused")


def _node(cluster: Any, name: str) -> Any:
    """The cluster's node at ``name`` (host:port), known to the client or not yet."""
    host, _, port = name.rpartition(":")
    node = cluster.get_node(host=host, port=int(port))
    if node is None:
        cluster.nodes_manager.initialize()
        node = cluster.get_node(host=host, port=int(port))
    if node is None:
        raise redis.exceptions.ClusterError(f"redirected to {name}, a node the cluster lacks")
    return node


def _redirect(replies: list[Any]) -> AskError | TryAgainError | None:
    """Where a refused transaction must go (MOVED, ASK: another node; TRYAGAIN: the same,
    later); None: it was refused for another reason."""
    for reply in replies:
        if isinstance(reply, AskError | TryAgainError):
            return reply
    return None


def _round_trip(client: redis.Redis, payload: list[bytes], count: int) -> list[Any]:
    """Send ``payload`` on one of ``client``'s connections and read ``count`` replies (error
    replies as values)."""
    pool = client.connection_pool
    # redis-py types its connections loosely: the two calls below are its public API.
    connection: Any = pool.get_connection()
    try:
        # One buffer: a send per part would be a system call per message.
        connection.send_packed_command(payload)
        return [_reply(connection) for _ in range(count)]
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)


def _reply(connection: Any) -> Any:
    try:
        return connection.read_response()
    except redis.ResponseError as error:
        return error
