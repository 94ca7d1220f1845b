"""One pipeline's staging area: the writer, the watermark reads and the reader over one client.

Every process holds one :class:`Staging`; its parts live in their own modules (``writer.py``,
``watermarks.py``, ``reader.py``) and each forms key names only through :class:`Keys`.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import RedisCluster

from config.errors import StagingError
from core.redis_client import RedisClient
from core.staging.keys import Keys
from core.staging.layout import LAYOUT_VERSION, as_text
from core.staging.reader import StagingReader
from core.staging.schemas import SchemaHash
from core.staging.watermarks import WatermarkReader
from core.staging.writer import StagingWriter


def layout_refusal(pipeline: str, found: str | None) -> str:
    """Why a process stops at a staging area whose members are in member layout ``found`` (None:
    none recorded), and what the operator does about it."""
    older = found is None or (found.isdigit() and int(found) < LAYOUT_VERSION)
    writer = "an older ticdc-sink" if older else "another ticdc-sink version"
    recorded = "no member layout recorded" if found is None else f"member layout {found}"
    return (
        f"the staging area of pipeline {pipeline!r} was written by {writer} ({recorded}; this "
        f"version reads member layout {LAYOUT_VERSION}): stop its workers and sink, then run "
        "`ticdc-sink recover` to clear it and replay from the checkpoint, or let that version's "
        "sink apply what is staged first"
    )


class Staging(StagingWriter, WatermarkReader, StagingReader):
    """The staging area of one pipeline in Redis (see docs/architecture.md, "The Redis
    contract")."""

    def __init__(self, client: RedisClient, pipeline: str, min_replicas: int = 0) -> None:
        keys = Keys(pipeline)
        StagingWriter.__init__(self, client, keys, min_replicas)
        WatermarkReader.__init__(self, client, keys)
        StagingReader.__init__(self, client, keys, self)

    def check_layout(self) -> None:
        """Refuse (:class:`StagingError`) a staging area that holds members of another member
        layout than :data:`LAYOUT_VERSION`, or of none recorded: read as this one, they would be
        misread. The worker and the sink call it at start; an area holding no members is
        accepted (the first staging write records the member layout)."""
        recorded = self._client.get(self.keys.layout)
        found = None if recorded is None else as_text(recorded)
        if found != str(LAYOUT_VERSION) and self.holds_members():
            raise StagingError(layout_refusal(self.pipeline, found))

    def holds_members(self) -> bool:
        """Whether any row or DDL member is staged (one round trip after the partitions')."""
        keys = [self.keys.ddl, *(self.keys.rows(tp) for tp in self.partitions())]
        return bool(self._client.exists(*keys))

    def placement(self) -> dict[str, Any]:
        """Where the pipeline's keys live: on a Redis Cluster the slot and its master, and the
        master's replicas online (what `status` shows of a failover); None for what the server
        does not tell (a managed Redis may refuse INFO)."""
        client = self._client
        slot = None
        master = None
        if isinstance(client, RedisCluster):
            # redis-py leaves the cluster's node look-ups untyped.
            cluster: Any = client
            slot = cluster.keyslot(self.keys.offsets)
            node = cluster.nodes_manager.get_node_from_slot(slot)
            master = str(node.name)
            server: redis.Redis = client.get_redis_connection(node)
        else:
            server = client
        try:
            info = server.info("replication")
        except redis.ResponseError:
            return {"slot": slot, "master": master, "replicas": None}
        replicas = [
            f"{value['ip']}:{value['port']}"
            for name, value in sorted(info.items())
            if name.startswith("slave")
            and isinstance(value, dict)
            and value.get("state") == "online"
        ]
        return {"slot": slot, "master": master, "replicas": replicas}

    def schemas(self) -> SchemaHash:
        """The pipeline's schema hash (the Simple protocol's schemas)."""
        return SchemaHash(self._client, self.keys.schemas)

    def registry_schemas(self) -> SchemaHash:
        """The pipeline's cache of schemas fetched from a schema registry (a schema id never
        changes its schema, so a restarted worker reads them here instead of the registry)."""
        return SchemaHash(self._client, self.keys.registry_schemas)

    def sink_leads(self) -> bool:
        """Whether a sink holds the pipeline's leader lease now."""
        return bool(self._client.exists(self.keys.leader))

    def stored_keys(self, keep: frozenset[str] = frozenset()) -> list[bytes]:
        """Every key the pipeline has in Redis, but those named in ``keep``."""
        kept = {name.encode() for name in keep}
        return [k for k in self._client.scan_iter(self.keys.pattern) if k not in kept]

    def delete_keys(self, names: list[bytes]) -> None:
        """Delete ``names`` (as :meth:`stored_keys` lists them)."""
        if names:
            self._client.delete(*names)

    def clear(self) -> None:
        """Delete every key of the pipeline (tests and benchmarks start clean)."""
        self.delete_keys(self.stored_keys())

    def restore_leader_epoch(self, epoch: int) -> None:
        """Set the lease epoch counter, so the next sink leads with a newer epoch than
        ``epoch`` (``ticdc-sink recover``: the checkpoint recorded it)."""
        self._client.set(self.keys.leader_epoch, epoch)
