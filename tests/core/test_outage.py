"""One log line at each end of an outage, however many retries it takes."""

from __future__ import annotations

import logging

import pytest

from core.outage import RETRY_MAX_S, Outage, next_delay


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage("Redis", logging.getLogger("test.outage"))
    with caplog.at_level(logging.WARNING, "test.outage"):
        outage.answered()
        for _ in range(5):
            outage.failed(ConnectionError("refused"), "staging")
        assert outage.ongoing and outage.retries == 5
        outage.answered()
        outage.answered()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("Redis unavailable since ") and "while staging" in lines[0]
    assert "ConnectionError: refused" in lines[0] and "retrying" in lines[0]
    assert lines[1].startswith("Redis back after ") and "(5 retries)" in lines[1]
    assert not outage.ongoing


def test_backoff_doubles_up_to_its_cap() -> None:
    assert next_delay(0.2) == 0.4
    assert next_delay(RETRY_MAX_S) == RETRY_MAX_S
