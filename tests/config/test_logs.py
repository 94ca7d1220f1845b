import io
import logging
import re
from collections.abc import Iterator

import orjson
import pytest

from config.choices import LogFormat, LogLevel
from config.logs import CHATTY_LOGGERS, LIBRARY_REPEAT_S, configure_logging, utc_time


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in CHATTY_LOGGERS}
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)
    logging.captureWarnings(False)


def test_a_text_line_has_utc_time_level_pipeline_and_logger() -> None:
    out = io.StringIO()
    configure_logging(LogLevel.INFO, LogFormat.TEXT, "shop", stream=out)
    logging.getLogger("ticdc_sink.sink").info("applied %d changes", 3)
    logging.getLogger("ticdc_sink.sink").debug("not shown at INFO")
    (line,) = out.getvalue().splitlines()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO \[shop\] ticdc_sink.sink: applied 3 changes",
        line,
    )


def test_a_json_line_is_one_object_with_the_same_fields_and_the_traceback() -> None:
    out = io.StringIO()
    configure_logging(LogLevel.DEBUG, LogFormat.JSON, "shop", stream=out)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("x").exception("failed")
    (line,) = out.getvalue().splitlines()
    record = orjson.loads(line)
    assert record["level"] == "ERROR" and record["pipeline"] == "shop"
    assert record["logger"] == "x" and record["message"] == "failed"
    assert record["time"].endswith("Z") and "ValueError: boom" in record["exception"]


def test_configuring_again_replaces_the_handler_and_quiets_chatty_libraries() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging(LogLevel.INFO, LogFormat.TEXT, "a", stream=first)
    configure_logging(LogLevel.INFO, LogFormat.TEXT, "b", stream=second)
    logging.getLogger("faust.worker").info("Starting...")
    logging.getLogger("faust.worker").warning("slow")
    logging.getLogger("mine").info("once")
    assert first.getvalue() == ""
    assert [line.split("] ", 1)[1] for line in second.getvalue().splitlines()] == [
        "faust.worker: slow",
        "mine: once",
    ]
    # DEBUG asks for everything, libraries included.
    configure_logging(LogLevel.DEBUG, LogFormat.TEXT, "b", stream=second)
    assert logging.getLogger("faust").level == logging.DEBUG


def test_utc_time_is_iso_with_milliseconds() -> None:
    assert utc_time(1_700_000_000.25) == "2023-11-14T22:13:20.250Z"


def test_a_library_repeating_one_line_is_heard_once_a_period() -> None:
    out = io.StringIO()
    configure_logging(stream=out)
    kafka, ours = logging.getLogger("aiokafka.client"), logging.getLogger("ticdc_sink.worker")
    for attempt in range(5):
        kafka.error("Unable connect to %r: %s", "127.0.0.1:9092", f"refused {attempt}")
        ours.warning("Kafka unavailable: attempt %d", attempt)
    kafka.error("Unable to update metadata from %r", 1)
    lines = out.getvalue().splitlines()
    assert sum("Unable connect" in line for line in lines) == 1
    assert sum("Unable to update metadata" in line for line in lines) == 1
    assert sum("Kafka unavailable" in line for line in lines) == 5, "the project's own lines stay"
    later = logging.LogRecord(
        "aiokafka.client", logging.ERROR, __file__, 1, "Unable connect to %r: %s", ("a", "b"), None
    )
    later.created += LIBRARY_REPEAT_S + 1
    logging.getLogger("aiokafka.client").handle(later)
    assert out.getvalue().count("Unable connect") == 2, "a line comes again after the period"
