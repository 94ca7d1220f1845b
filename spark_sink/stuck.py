"""A transaction applied in parts that keeps going back to the checkpoint: told once, by name.

Each failure of such a transaction rolls back every part and reads it again from the checkpoint
(:mod:`spark_sink.apply_batch`), which an outage of a few seconds explains. The same transaction
failing again and again is no outage: the operator is told which transaction holds the
pipeline, how big it is, and why it last failed, instead of one more "downstream unavailable".
"""

from __future__ import annotations

from dataclasses import dataclass

# Tries of one transaction in a row, all failed, after which it is named: a lost connection or
# a restart to stage every image each explain one or two.
STUCK_AFTER = 3


@dataclass
class StuckWatch:
    """The failed tries in a row of the transaction in parts at ``commit_ts``."""

    after: int = STUCK_AFTER
    commit_ts: int = 0
    tries: int = 0
    # The most changes a try of it got through: how big it is at least.
    changes: int = 0

    def failed(self, commit_ts: int, changes: int, reason: BaseException) -> str | None:
        """Count a failed try of the transaction at ``commit_ts`` that got through ``changes``;
        the warning to log when this try makes it stuck, else None (said once per stuck run)."""
        if commit_ts != self.commit_ts:
            self.commit_ts, self.tries, self.changes = commit_ts, 0, 0
        self.tries += 1
        self.changes = max(self.changes, changes)
        if self.tries != self.after:
            return None
        return (
            f"the upstream transaction at ts {commit_ts} ({self.changes} changes or more, applied "
            f"in parts) failed {self.tries} times in a row and is read again from the checkpoint "
            f"each time; nothing after it is applied until it commits. Last reason: "
            f"{type(reason).__name__}: {reason}"
        )

    def committed(self, commit_ts: int) -> None:
        """The transaction at ``commit_ts`` committed: its count starts again."""
        if commit_ts == self.commit_ts:
            self.commit_ts, self.tries, self.changes = 0, 0, 0
