"""CPU seconds of the processes a benchmark drives, read from /proc and from Redis itself."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# The names local database servers run under (/proc/PID/comm, at most 15 characters).
SERVER_NAMES = ("mariadbd", "mysqld", "tidb-server")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its finished children so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def redis_cpu(client: Any) -> float:
    """Redis's own CPU seconds so far (``INFO cpu``)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def server_pid(name: str) -> int | None:
    """The pid of the local process whose name starts with ``name`` (one of
    :data:`SERVER_NAMES`), if one runs here."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().startswith(name):
                return int(entry.name)
        except OSError:
            continue
    return None
