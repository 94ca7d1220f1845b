"""Stopping a long-running process cleanly on SIGTERM or SIGINT, and within a bound."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
from types import FrameType

log = logging.getLogger("ticdc_sink.signals")

# What a supervisor sends to stop a process (SIGTERM) and what Ctrl-C sends (SIGINT).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# The exit code of a process that outlived its stop timeout and ended itself.
EXIT_STOP_OVERDUE = 3

# The process's own stderr, where stacks are written (a test may replace sys.stderr, which then
# has no descriptor).
STDERR_FD = 2

# The clock a stop signal started (:func:`end_if_overdue`), until the stop is done.
_overdue: threading.Timer | None = None


def stop_on_signals(
    stop: threading.Event | None = None, stop_timeout: float = 0.0
) -> threading.Event:
    """An event set when SIGTERM or SIGINT arrives, for a loop that checks it between steps
    (the step in progress finishes; nothing is interrupted halfway). Main thread only. With a
    ``stop_timeout``, the first signal also starts :func:`end_if_overdue`'s clock.

    Pass the event again to take the signals back from a library that installed handlers of
    its own (PySpark's SparkContext takes SIGINT)."""
    stop = threading.Event() if stop is None else stop

    def requested(signum: int, _: FrameType | None) -> None:
        name = signal.Signals(signum).name
        log.info("%s received: stopping", name)
        end_if_overdue(stop_timeout, name)
        stop.set()

    for signum in STOP_SIGNALS:
        signal.signal(signum, requested)
    return stop


def end_if_overdue(stop_timeout: float, signal_name: str) -> None:
    """End the process (:data:`EXIT_STOP_OVERDUE`) if it is still here ``stop_timeout``
    seconds from now, its threads' stacks written to stderr first: a stop stuck waiting on a
    service that went away still ends, and says where it was stuck. 0: no bound. Once started,
    the clock runs from the first signal: a later one does not restart it."""
    global _overdue
    if stop_timeout <= 0 or _overdue is not None:
        return

    def overdue() -> None:
        log.error(
            "still stopping %g s after %s (TICDC_SINK_STOP_TIMEOUT): ending now, exit %d; what "
            "was not committed is read again; where each thread was follows",
            stop_timeout,
            signal_name,
            EXIT_STOP_OVERDUE,
        )
        sys.stderr.flush()
        faulthandler.dump_traceback(STDERR_FD, all_threads=True)
        os._exit(EXIT_STOP_OVERDUE)

    _overdue = threading.Timer(stop_timeout, overdue)
    _overdue.name = "stop-timeout"
    _overdue.daemon = True
    _overdue.start()


def stop_done() -> None:
    """The stop finished (the worker's or sink's run returns): stop the clock, for a caller
    that goes on in this process (a test; the command line only exits)."""
    global _overdue
    if _overdue is not None:
        _overdue.cancel()
        _overdue = None
