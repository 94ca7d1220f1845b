"""Stopping a long-running process cleanly on SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

log = logging.getLogger("ticdc_sink.signals")

# What a supervisor sends to stop a process (SIGTERM) and what Ctrl-C sends (SIGINT).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals(stop: threading.Event | None = None) -> threading.Event:
    """An event set when SIGTERM or SIGINT arrives, for a loop that checks it between steps
    (the step in progress finishes; nothing is interrupted halfway). Main thread only.

    Pass the event again to take the signals back from a library that installed handlers of
    its own (PySpark's SparkContext takes SIGINT)."""
    stop = threading.Event() if stop is None else stop

    def requested(signum: int, _: FrameType | None) -> None:
        log.info("%s received: stopping", signal.Signals(signum).name)
        stop.set()

    for signum in STOP_SIGNALS:
        signal.signal(signum, requested)
    return stop
