"""The sink's own dead letters (rows the downstream refuses, changes it cannot plan): added in
one round trip, the oldest past the cap counted as trimmed, each told in one log line."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from core.metrics import DEAD_LETTERS_TRIMMED
from core.staging import Staging

log = logging.getLogger("ticdc_sink.sink")


def add_dead_letters(
    staging: Staging, group: str, letters: Sequence[tuple[dict[str, str], str]], max_entries: int
) -> None:
    """Add each ``(entry, line)`` of ``letters`` to the dead letters and log its line."""
    if not letters:
        return
    trimmed = staging.dead_letters.add_entries([entry for entry, _ in letters], max_entries)
    DEAD_LETTERS_TRIMMED.labels(group).inc(trimmed)
    for _, line in letters:
        log.warning("dead letter: %s", line)
