"""The worker's periodic progress line: what it staged since the last line, and where the
pipeline's global resolved ts stands."""

from __future__ import annotations

from dataclasses import dataclass

from core.tso import describe_tso


@dataclass
class Progress:
    """Counts at the last line, to report what was staged since."""

    rows: int = 0
    messages: int = 0

    def line(self, rows: int, messages: int, partitions: int, resolved: int | None) -> str:
        """The line for totals ``rows`` and ``messages`` staged so far (then remembered)."""
        text = (
            f"staged {rows - self.rows} rows in {messages - self.messages} messages since the "
            f"last report ({rows} rows, {messages} messages in all); {partitions} partitions "
            f"assigned; global resolved ts {describe_tso(resolved)}"
        )
        self.rows, self.messages = rows, messages
        return text
