"""The stop clock (config/signals.py): a process still stopping at its stop timeout writes its
threads' stacks and ends with exit 3; a stop that finished in time stops the clock, so a
process that goes on (a test calling the sink in-process) is not ended later."""

from __future__ import annotations

import subprocess
import sys

import pytest

from config.signals import EXIT_STOP_OVERDUE

ARM = "from config.signals import end_if_overdue, stop_done; end_if_overdue(0.5, 'SIGTERM'); "


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )


def test_a_stop_past_its_timeout_ends_the_process_with_the_stacks_of_its_threads() -> None:
    done = _run(ARM + "import time; time.sleep(10)")
    assert done.returncode == EXIT_STOP_OVERDUE, done.stderr
    assert "still stopping 0.5 s after SIGTERM (TICDC_SINK_STOP_TIMEOUT)" in done.stderr
    # The main thread's stack, at the sleep it was stuck in.
    assert "most recent call first" in done.stderr and 'File "<string>", line 1' in done.stderr


def test_a_stop_done_in_time_stops_the_clock() -> None:
    done = _run(ARM + "stop_done(); import time; time.sleep(1.5)")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("timeout", [0.0])
def test_no_timeout_never_ends_the_process(timeout: float) -> None:
    code = f"from config.signals import end_if_overdue; end_if_overdue({timeout}, 'SIGTERM'); "
    done = _run(code + "import time; time.sleep(1)")
    assert done.returncode == 0, done.stderr
