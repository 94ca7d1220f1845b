"""Riding out a downstream that is away for now: a call retried while its error is transient (as
the server's dialect says), and the one outage log of the process's downstream."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from core.outage import Outage
from spark_sink.db.dialect import ANY_SERVER, Dialect

log = logging.getLogger("ticdc_sink.sink")
T = TypeVar("T")
# One per process, as a process has one downstream: each outage is logged once, whoever meets it.
DOWNSTREAM_OUTAGE = Outage("the downstream", log)

RETRY_ATTEMPTS = 6
RETRY_FIRST_DELAY_S = 0.5


def with_retries(action: Callable[[], T], what: str, dialect: Dialect = ANY_SERVER) -> T:
    """Run ``action``, retrying the errors ``dialect`` calls transient with exponential backoff;
    a downstream that stays away longer raises to the caller (the sink's loop waits on)."""
    delay = RETRY_FIRST_DELAY_S
    for attempt in range(1, RETRY_ATTEMPTS + 1):
        try:
            result = action()
        except Exception as error:
            if not dialect.is_transient(error) or attempt == RETRY_ATTEMPTS:
                raise
            if dialect.is_connection_error(error):
                DOWNSTREAM_OUTAGE.failed(error, what)
            else:
                log.warning("%s failed (%s); retry %d in %.1f s", what, error, attempt, delay)
            time.sleep(delay)
            delay *= 2
            continue
        DOWNSTREAM_OUTAGE.answered()
        return result
    raise AssertionError("unreachable")
