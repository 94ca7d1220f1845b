"""How every benchmark script ends: its table, or one line naming what stopped it (no traceback).

Exit codes: 0 the table printed, 1 stopped by an error (the line says which, and names the
service when one could not be reached), 130 interrupted (Ctrl-C)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pymysql
import redis
from aiokafka.errors import KafkaConnectionError

from config.errors import TicdcSinkError

EXIT_STOPPED = 1
EXIT_INTERRUPTED = 130

# Errors that mean a service the script needs is not there, and which one.
_UNREACHABLE: tuple[tuple[type[BaseException], str], ...] = (
    (KafkaConnectionError, "Kafka"),
    (redis.exceptions.ConnectionError, "Redis"),
    (pymysql.err.OperationalError, "the downstream"),
)


def stopped_line(script: str, error: BaseException) -> str:
    """The one line a script stopped by ``error`` prints."""
    what = f"{type(error).__name__}: {error}" if not isinstance(error, TicdcSinkError) else error
    for kind, service in _UNREACHABLE:
        if isinstance(error, kind):
            return (
                f"{script}: stopped: {what} ({service} unreachable: are the local services up? "
                "`ticdc-sink services up`)"
            )
    return f"{script}: stopped: {what}"


def run(main: Callable[[], None]) -> None:
    """``main``, then exit by the codes above."""
    script = Path(sys.argv[0]).stem
    try:
        main()
    except KeyboardInterrupt:
        print(f"{script}: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as error:  # a benchmark's every failure ends in one line
        print(stopped_line(script, error), file=sys.stderr)
        sys.exit(EXIT_STOPPED)
