"""Moving a Redis Cluster slot from its master to another, step by step as `redis-cli --cluster
reshard` does (SETSLOT IMPORTING/MIGRATING, MIGRATE its keys, SETSLOT NODE), so that a test can
stop between steps and send commands while the slot is half moved."""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import RedisCluster


class SlotMove:
    """The move of ``slot`` from the master ``source`` (host, port) to the master ``target``;
    by default from the master serving it, as the client knows, to another."""

    def __init__(
        self,
        cluster: RedisCluster,
        slot: int,
        source: tuple[str, int] | None = None,
        target: tuple[str, int] | None = None,
    ) -> None:
        nodes: Any = cluster
        if source is None or target is None:
            owner = nodes.nodes_manager.get_node_from_slot(slot)
            other = next(n for n in nodes.get_primaries() if n.name != owner.name)
            source, target = (owner.host, owner.port), (other.host, other.port)
        self.cluster = cluster
        self.slot = slot
        self.source_address, self.target_address = source, target
        self.source = redis.Redis(*source)
        self.target = redis.Redis(*target)
        self.source_id = self.source.execute_command("CLUSTER MYID").decode()
        self.target_id = self.target.execute_command("CLUSTER MYID").decode()
        self.target_port = target[1]
        self.begun = False

    def back(self) -> SlotMove:
        """The move that brings the slot back."""
        return SlotMove(self.cluster, self.slot, self.target_address, self.source_address)

    def begin(self) -> None:
        self.begun = True
        self.target.execute_command("CLUSTER SETSLOT", self.slot, "IMPORTING", self.source_id)
        self.source.execute_command("CLUSTER SETSLOT", self.slot, "MIGRATING", self.target_id)

    def migrate_keys(self, count: int) -> int:
        """MIGRATE up to ``count`` of the slot's keys still on the source; how many moved."""
        keys = self.source.execute_command("CLUSTER GETKEYSINSLOT", self.slot, count)
        if keys:
            self.source.execute_command(
                "MIGRATE", "127.0.0.1", self.target_port, "", 0, 5000, "KEYS", *keys
            )
        return len(keys)

    def finish(self) -> None:
        """Move what is left, then give the slot to the target on both nodes (the others
        learn it by gossip, and answer MOVED meanwhile)."""
        while self.migrate_keys(100):
            pass
        for node in (self.target, self.source):
            node.execute_command("CLUSTER SETSLOT", self.slot, "NODE", self.target_id)
        self.begun = False

    def close(self) -> None:
        """Finish a move begun (a failed test leaves no slot half moved for the next)."""
        try:
            if self.begun:
                self.finish()
        finally:
            self.source.close()
            self.target.close()


def move_slot(cluster: RedisCluster, key: str) -> None:
    """Move the slot of ``key`` to another master at once."""
    move = SlotMove(cluster, cluster.keyslot(key))
    try:
        move.begin()
        move.finish()
    finally:
        move.close()
