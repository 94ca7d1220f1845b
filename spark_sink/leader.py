"""One active sink per pipeline: a lease in Redis, with an epoch that fences a stale leader.

The lease survives a Redis outage shorter than itself: renewal keeps trying, faster, while Redis
is away. A leader that finds its lease lapsed (a longer outage, a restart that lost the last
renewal) and nobody else holding it takes it again, with a new epoch; only a lease another sink
holds now means this one stops. The checkpoint's epoch still fences whichever commit comes late.
"""

from __future__ import annotations

import logging
import threading
import uuid

import redis

from core.outage import Outage
from core.redis_client import RedisClient
from core.resp import WAIT_MS, CommandBatch
from core.staging import Keys

log = logging.getLogger("ticdc_sink.sink")

# The lease outlives a few missed renewals; a standby takes over within this after a crash.
LEASE_MS = 10_000
# How often renewal tries again while Redis does not answer (a restart takes a second or two).
RENEW_RETRY_S = 0.25

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


class LeaderLock:
    """``SET NX PX`` lease; each acquisition gets a larger epoch, recorded with the checkpoint."""

    def __init__(
        self,
        client: RedisClient,
        keys: Keys,
        lease_ms: int = LEASE_MS,
        min_replicas: int = 0,
        wait_ms: int = WAIT_MS,
    ) -> None:
        self.client = client
        self.key = keys.leader
        self.epoch_key = keys.leader_epoch
        self.lease_ms = lease_ms
        # Replicas that must hold a new epoch before this sink leads with it: a master that
        # fails over could otherwise lose the increment, and the next leader get the same epoch
        # (the checkpoint fences only a smaller one).
        self.min_replicas = min_replicas
        self.wait_ms = wait_ms
        self.token = uuid.uuid4().hex
        self.epoch = 0
        self._renew = client.register_script(_RENEW)

    def acquire(self) -> bool:
        """Take the lease if nobody holds it; True when this instance leads now."""
        taken = self.client.set(self.key, self.token, nx=True, px=self.lease_ms)
        # A retried SET (its first reply lost with a cut connection) finds our own lease.
        if not taken and self.client.get(self.key) != self.token.encode():
            return False
        self.epoch = self._next_epoch()
        return True

    def _next_epoch(self) -> int:
        if not self.min_replicas:
            return int(self.client.incr(self.epoch_key))
        # INCR and WAIT on one connection: WAIT counts the replicas that hold this connection's
        # writes.
        batch = CommandBatch(self.epoch_key)
        batch.command("INCR", self.epoch_key)
        (epoch,) = batch.execute(self.client, self.min_replicas, self.wait_ms)
        return int(epoch)

    def renew(self) -> bool:
        """Extend the lease; False when it was lost (expired and maybe taken)."""
        return bool(self._renew(keys=[self.key], args=[self.token, self.lease_ms]))

    def hold(self) -> bool:
        """Renew the lease, or take it again when it lapsed and nobody else took it (a new
        epoch); False only when another sink holds it now."""
        if self.renew():
            return True
        before = self.epoch
        if self.acquire():
            log.warning(
                "the leader lease had lapsed with no other holder: taken again, epoch %d -> %d",
                before,
                self.epoch,
            )
            return True
        return False

    def keep_alive(self, outage: Outage | None = None) -> threading.Event:
        """Renew the lease from a background thread (a long batch or Spark's start must not
        let it lapse); the returned event is set when another sink holds the lease. ``outage``:
        the process's Redis outage, so that one outage is logged once."""
        lost = threading.Event()
        outage = outage or Outage("Redis", log)

        def beat() -> None:
            wait = self.lease_ms / 3000
            while not lost.wait(wait):
                try:
                    held = self.hold()
                except redis.RedisError as error:
                    # Redis away for a moment: the lease may still hold; try again soon.
                    outage.failed(error, "renewing the leader lease")
                    wait = RENEW_RETRY_S
                    continue
                outage.answered()
                wait = self.lease_ms / 3000
                if not held:
                    lost.set()

        threading.Thread(target=beat, name="sink-lease", daemon=True).start()
        self._lost = lost
        return lost

    def release(self) -> None:
        if getattr(self, "_lost", None) is not None:
            self._lost.set()
        try:
            if self.renew():
                self.client.delete(self.key)
        except redis.RedisError as error:
            # Stopping while Redis is away: the lease lapses on its own.
            log.warning("could not release the leader lease (%s); it lapses by itself", error)
