"""Logging for every ticdc-sink process, configured here and nowhere else.

Each record is one line on stderr with its UTC time, level, pipeline and logger: text for people
(``2026-11-23T18:04:05.123Z INFO [shop] ticdc_sink.sink: ...``) or one JSON object for log
collectors. Faust's worker would install its own handlers; it is told not to (see
``streams/worker/run.py``), so its records come out in the same form.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import IO, Any

import orjson

from config.choices import LogFormat, LogLevel
from config.errors import TicdcSinkError

# Libraries whose INFO records are start-up chatter (Faust's services starting one by one, the
# Kafka client's connections, py4j's gateway): they log WARNING and above unless DEBUG is asked.
# streams.transport is the worker's Faust consumer service, which logs as Faust's do.
CHATTY_LOGGERS = ("faust", "mode", "aiokafka", "kafka", "py4j", "asyncio", "streams.transport")

# A library logs every failed reconnect (aiokafka: several lines a second while Kafka is away);
# the same line from it passes once in this many seconds, so an outage reads as one line.
LIBRARY_REPEAT_S = 60.0

# The pipeline of a record logged before the settings named one.
NO_PIPELINE = "-"

_LEVELS = {
    LogLevel.DEBUG: logging.DEBUG,
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
}


def utc_time(created: float) -> str:
    """A record's time as ISO 8601 UTC to the millisecond."""
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


class _PipelineFilter(logging.Filter):
    """Gives every record the pipeline this process serves (unless the record names one)."""

    def __init__(self, pipeline: str) -> None:
        super().__init__()
        self.pipeline = pipeline

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "pipeline"):
            record.pipeline = self.pipeline
        return True


class TextFormatter(logging.Formatter):
    """``<UTC time> <LEVEL> [<pipeline>] <logger>: <message>``, a traceback indented below."""

    def format(self, record: logging.LogRecord) -> str:
        line = (
            f"{utc_time(record.created)} {record.levelname} [{record.__dict__['pipeline']}] "
            f"{record.name}: {record.getMessage()}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object a record: time, level, pipeline, logger, message (and a traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": utc_time(record.created),
            "level": record.levelname,
            "pipeline": record.__dict__["pipeline"],
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(document).decode()


class _StderrHandler(logging.StreamHandler[IO[str]]):
    """Writes to whatever ``sys.stderr`` is at the time of each record (as logging's own
    last-resort handler does), so a redirected stderr still gets them."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, _: IO[str]) -> None:
        pass


class _LibraryRepeatFilter(logging.Filter):
    """Passes a chatty library's record once per ``period`` seconds for the same message."""

    def __init__(self, period: float = LIBRARY_REPEAT_S) -> None:
        super().__init__()
        self.period = period
        self._last: dict[tuple[str, str], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(CHATTY_LOGGERS) or record.levelno >= logging.CRITICAL:
            return True
        # The template, not the text: each attempt's text differs in its error and address.
        key = (record.name, str(record.msg))
        last = self._last.get(key)
        if last is not None and record.created - last < self.period:
            return False
        self._last[key] = record.created
        return True


class _RetoldErrorFilter(logging.Filter):
    """Drops a library's retelling of an error of ours: the error says all in its own one line
    (a worker's halt names the message), and Faust's crash record of it adds its traceback, then
    a "Reraising original exception" notice before the one line the command ends with."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("ticdc_sink"):
            return True
        if record.exc_info and isinstance(record.exc_info[1], TicdcSinkError):
            return False
        return "We experienced a crash!" not in str(record.msg)


def configure_logging(
    level: LogLevel = LogLevel.INFO,
    log_format: LogFormat = LogFormat.TEXT,
    pipeline: str = NO_PIPELINE,
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Send every record of this process to ``stream`` (stderr) in one form; returns the
    handler. Calling it again replaces what an earlier call (or a library) installed."""
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(JsonFormatter() if log_format is LogFormat.JSON else TextFormatter())
    handler.addFilter(_PipelineFilter(pipeline))
    handler.addFilter(_LibraryRepeatFilter())
    handler.addFilter(_RetoldErrorFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    number = _LEVELS[level]
    root.setLevel(number)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(number if number <= logging.DEBUG else logging.WARNING)
    # Warnings (DeprecationWarning from a library, say) go through the same handler.
    logging.captureWarnings(True)
    return handler
