"""One active sink per pipeline: a lease in Redis, with an epoch that fences a stale leader."""

from __future__ import annotations

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
        if not self.client.set(self.key, self.token, nx=True, px=self.lease_ms):
            return False
        self.epoch = int(self.client.incr(self.key + ":epoch"))
        return True

    def renew(self) -> bool:
        """Extend the lease; False when it was lost (expired and maybe taken)."""
        return bool(self._renew(keys=[self.key], args=[self.token, self.lease_ms]))

    def release(self) -> None:
        if self.renew():
            self.client.delete(self.key)
