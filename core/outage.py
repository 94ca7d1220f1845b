"""One log line per outage of a service (Redis, Kafka, the downstream), not one per retry.

A process that rides out an outage retries many times; the operator needs to know what is away,
since when, and that the process is waiting, then that it came back. :class:`Outage` tracks one
service's outage and says so once at each end; the callers do the backing off.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

# The first wait after a failure, and the most a retry loop waits between attempts.
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0


def next_delay(delay: float) -> float:
    """The wait after ``delay``: doubled, capped at :data:`RETRY_MAX_S`."""
    return min(delay * 2, RETRY_MAX_S)


@dataclass
class Outage:
    """The state of one service's outage as one process sees it."""

    service: str
    log: logging.Logger
    # time.time() of the first failure of the current outage; None while the service answers.
    since: float | None = None
    retries: int = field(default=0)

    def failed(self, error: BaseException, doing: str) -> None:
        """A call to the service failed: log the outage when it starts, count the retry."""
        if self.since is None:
            self.since = time.time()
            self.retries = 0
            started = time.strftime("%H:%M:%S", time.gmtime(self.since))
            self.log.warning(
                "%s unavailable since %s UTC while %s (%s: %s); retrying until it is back",
                self.service,
                started,
                doing,
                type(error).__name__,
                error,
            )
        self.retries += 1

    def answered(self) -> None:
        """A call to the service succeeded: log the end of an outage, if there was one."""
        if self.since is None:
            return
        self.log.warning(
            "%s back after %.1f s (%d retries)",
            self.service,
            time.time() - self.since,
            self.retries,
        )
        self.since = None

    @property
    def ongoing(self) -> bool:
        return self.since is not None
