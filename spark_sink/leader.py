"""One active sink per pipeline: a lease in Redis, with an epoch that fences a stale leader."""

from __future__ import annotations

import threading
import uuid

import redis

# The lease outlives a few missed renewals; a standby takes over within this after a crash.
LEASE_MS = 10_000

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


class LeaderLock:
    """``SET NX PX`` lease; each acquisition gets a larger epoch, recorded with the checkpoint."""

    def __init__(self, client: redis.Redis, key: str, lease_ms: int = LEASE_MS) -> None:
        self.client = client
        self.key = key
        self.lease_ms = lease_ms
        self.token = uuid.uuid4().hex
        self.epoch = 0
        self._renew = client.register_script(_RENEW)

    def acquire(self) -> bool:
        """Take the lease if nobody holds it; True when this instance leads now."""
        taken = self.client.set(self.key, self.token, nx=True, px=self.lease_ms)
        # A retried SET (its first reply lost with a cut connection) finds our own lease.
        if not taken and self.client.get(self.key) != self.token.encode():
            return False
        self.epoch = int(self.client.incr(self.key + ":epoch"))
        return True

    def renew(self) -> bool:
        """Extend the lease; False when it was lost (expired and maybe taken)."""
        return bool(self._renew(keys=[self.key], args=[self.token, self.lease_ms]))

    def keep_alive(self) -> threading.Event:
        """Renew the lease from a background thread (a long batch or Spark's start must not
        let it lapse); the returned event is set when the lease is lost."""
        lost = threading.Event()

        def beat() -> None:
            while not lost.wait(self.lease_ms / 3000):
                try:
                    if not self.renew():
                        lost.set()
                except redis.RedisError:
                    continue  # Redis away for a moment: the lease may still hold

        threading.Thread(target=beat, name="sink-lease", daemon=True).start()
        self._lost = lost
        return lost

    def release(self) -> None:
        if getattr(self, "_lost", None) is not None:
            self._lost.set()
        if self.renew():
            self.client.delete(self.key)
