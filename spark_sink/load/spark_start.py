"""The sink's Spark session, started when a load through Spark first asks for it: no other load
waits for its JVM or shares the machine with its start, and a Spark that does not start fails
only such loads (the rest never need it)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from config.errors import ConfigError
from config.settings import Settings, env_name
from spark_sink.load.spark_session import build_spark

log = logging.getLogger("ticdc_sink.sink")


def sink_spark(settings: Settings) -> Callable[[], Any]:
    """What builds the Spark session of ``settings``' pipeline."""
    # The group in the name tells pipelines apart on a shared cluster's pages.
    return lambda: build_spark(
        settings.spark.master,
        f"ticdc-sink-{settings.group}",
        settings.spark.jdbc_jar,
        pipeline=settings.group,
    )


class SparkStart:
    """The Spark session ``build`` makes, built once in a thread of its own: calling the object
    begins it (or :meth:`start` does, ahead of the first call) and waits for it.

    The thread is never the main one, so PySpark leaves the process's SIGINT handler alone."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._session: Any = None
        self._error: Exception | None = None

    def start(self) -> None:
        """Begin building the session, unless that has begun."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="spark-start", daemon=True)
                self._thread.start()

    def __call__(self) -> Any:
        """The session, once built; a build that failed raises ConfigError (every call; the
        failure is logged once, when it happens)."""
        self.start()
        self._done.wait()
        if self._error is not None:
            raise ConfigError(f"Spark did not start: {self._error}") from self._error
        return self._session

    def _run(self) -> None:
        started = time.monotonic()
        try:
            self._session = self._build()
        except Exception as error:
            self._error = error
            log.error(
                "Spark did not start (%s): a batch with a table of %s rows or more, which loads "
                "through Spark, fails; the others apply without it",
                error,
                env_name("spark_min_rows"),
            )
        else:
            log.info("Spark started in %.1f s", time.monotonic() - started)
        finally:
            self._done.set()
