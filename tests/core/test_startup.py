"""At start a process waits for its services, bounded by TICDC_SINK_STARTUP_TIMEOUT."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from config.errors import UnreachableError
from config.settings import masked
from core.startup import wait_for


def test_a_service_that_answers_late_is_waited_for() -> None:
    calls = []

    def probe() -> None:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise ConnectionRefusedError("not yet")

    wait_for("Redis", "redis://x", probe, timeout=5)
    assert len(calls) == 3


def test_a_service_that_never_answers_names_the_setting_and_address() -> None:
    def probe() -> None:
        raise ConnectionRefusedError("refused")

    started = time.monotonic()
    with pytest.raises(UnreachableError) as failed:
        wait_for("Redis", "redis://:***@h:1/0", probe, timeout=0.5)
    assert time.monotonic() - started < 2
    message = str(failed.value)
    assert "Redis at redis://:***@h:1/0" in message
    assert "TICDC_SINK_STARTUP_TIMEOUT=0.5 s" in message


def test_passwords_are_masked() -> None:
    assert masked("redis_url", "redis://user:secret@host:6380/0") == "redis://user:***@host:6380/0"
    assert masked("redis_url", "redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("command", ["worker", "apply"])
def test_a_process_without_its_service_exits_with_one_line(command: str) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "TICDC_SINK_TOPICS": "nothing",
        "TICDC_SINK_REDIS_URL": f"redis://:hunter2@127.0.0.1:{port}/0",
        "TICDC_SINK_STARTUP_TIMEOUT": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "ticdc_sink", command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith(f"ticdc-sink {command}: Redis at redis://:***@127.0.0.1:{port}/0")
    assert "TICDC_SINK_STARTUP_TIMEOUT=1 s" in lines[-1]
    assert "hunter2" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
