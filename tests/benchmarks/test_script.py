"""How a benchmark script ends when it cannot run: one line, exit 1, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pymysql

from benchmarks.script import EXIT_STOPPED, stopped_line
from config.errors import ConfigError


def test_a_script_without_kafka_ends_in_one_line_naming_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_tables", "--rows", "10", "--tables", "1"],
        env={**os.environ, "TICDC_SINK_KAFKA": "127.0.0.1:1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == EXIT_STOPPED, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("bench_tables: stopped: KafkaConnectionError")
    assert "Kafka unreachable" in last and "ticdc-sink services up" in last


def test_the_line_names_the_service_an_error_says_is_away() -> None:
    refused = pymysql.err.OperationalError(2003, "Can't connect to MySQL server on '127.0.0.1'")
    assert "the downstream unreachable" in stopped_line("bench_e2e", refused)
    # The project's own errors are already one line for an operator: no type name before them.
    assert (
        stopped_line("bench_e2e", ConfigError("bad setting")) == "bench_e2e: stopped: bad setting"
    )
    assert stopped_line("bench_e2e", ValueError("x")) == "bench_e2e: stopped: ValueError: x"
