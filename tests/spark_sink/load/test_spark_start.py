"""The Spark session started beside the loop: waited for only by whoever asks for it, built once,
a failed start logged once and raised to every load that needs Spark."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from config.errors import ConfigError
from spark_sink.load.spark_start import SparkStart


def test_the_session_is_built_once_in_a_thread_of_its_own_and_only_asking_waits() -> None:
    release = threading.Event()
    builds: list[str] = []
    session = object()

    def build() -> Any:
        builds.append(threading.current_thread().name)
        release.wait(10)
        return session

    spark = SparkStart(build)
    spark.start()
    spark.start()
    # Starting returned at once although the build is blocked.
    asked: list[Any] = []
    asking = threading.Thread(target=lambda: asked.append(spark()))
    asking.start()
    asking.join(0.2)
    assert asking.is_alive() and not asked
    release.set()
    asking.join(10)
    assert asked == [session]
    assert spark() is session
    assert builds == ["spark-start"]


def test_asking_before_any_start_builds_the_session() -> None:
    session = object()
    assert SparkStart(lambda: session)() is session


def test_a_failed_start_is_logged_once_and_raised_to_every_load_that_asks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def build() -> Any:
        raise RuntimeError("no JVM here")

    spark = SparkStart(build)
    with caplog.at_level(logging.ERROR, "ticdc_sink.sink"):
        for _ in range(2):
            with pytest.raises(ConfigError, match="Spark did not start: no JVM here"):
                spark()
    assert caplog.text.count("Spark did not start (no JVM here)") == 1
