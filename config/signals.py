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
        if not stop.is_set():
            end_if_overdue(stop_timeout, name)
        stop.set()

    for signum in STOP_SIGNALS:
        signal.signal(signum, requested)
    return stop


def end_if_overdue(stop_timeout: float, signal_name: str) -> None:
    """End the process (:data:`EXIT_STOP_OVERDUE`) if it is still here ``stop_timeout``
    seconds from now, its threads' stacks written to stderr first: a stop stuck waiting on a
    service that went away still ends, and says where it was stuck. 0: no bound."""
    if stop_timeout <= 0:
        return

    def overdue() -> None:
        log.error(
            "still stopping %.0f s after %s (TICDC_SINK_STOP_TIMEOUT): ending now, exit %d; what "
            "was not committed is read again; where each thread was follows",
            stop_timeout,
            signal_name,
            EXIT_STOP_OVERDUE,
        )
        faulthandler.dump_traceback(all_threads=True)
        sys.stderr.flush()
        os._exit(EXIT_STOP_OVERDUE)

    timer = threading.Timer(stop_timeout, overdue)
    timer.name = "stop-timeout"
    timer.daemon = True
    timer.start()
