"""The benchmarks' CPU readings: a process's own seconds, Redis's, the local database server's."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from benchmarks.bench_e2e import downstream_pid
from benchmarks.cpu import cpu_seconds, redis_cpu, server_pid
from config.settings import Settings


def test_a_process_cpu_seconds_grow_with_its_work() -> None:
    before = cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    assert cpu_seconds(os.getpid()) - before >= 0.2
    assert cpu_seconds(2**22 + 1) == 0.0  # no such process


@pytest.mark.integration
def test_redis_and_the_local_mariadb_are_found(redis_client: Any, settings: Settings) -> None:
    assert redis_cpu(redis_client) > 0
    pid = downstream_pid(settings)
    assert pid is not None and pid == server_pid("mariadbd")
    assert cpu_seconds(pid) > 0
    elsewhere = settings.updated({"downstream": "mysql://root@db.example.com:3306/"})
    assert downstream_pid(elsewhere) is None
