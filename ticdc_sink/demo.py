"""`ticdc-sink demo` (`make demo`): the whole pipeline on the local services, end to end.

Produce a seeded TiCDC-like stream (DDL, 1-50 row transactions, key changes, an ADD COLUMN midway,
re-sent messages) to a fresh topic, run one `worker` and one `apply` as their own processes, show
progress, verify the downstream against the expected state, and print a summary.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from config.settings import Settings
from core.redis_client import redis_client
from core.staging import Staging
from core.tso import tso_millis, tso_time
from spark_sink.db.checkpoint import CheckpointWatch
from ticdc_sink.produce import run_produce
from ticdc_sink.verify import verify

DEMO_PARTITIONS = 4
DEMO_TRANSACTIONS = 800
# How long the demo waits for the pipeline to catch up before it gives up.
DEMO_TIMEOUT_S = 300


def run_demo(settings: Settings, config: str | None = None) -> int:
    """Run the demo; exit code 0 when the downstream matches the upstream state. ``config``: the
    TOML settings file ``settings`` came from, which the worker and the sink read too."""
    name = f"demo_{uuid.uuid4().hex[:8]}"
    demo = settings.updated({"group": name, "topics": (name,)})
    expected = Path(".ticdc-sink") / f"{name}.expected.json"
    print(f"producing a TiCDC Open Protocol stream to topic {name} ({DEMO_PARTITIONS} partitions)")
    print(f"replicating into {settings.downstream.url}")
    sent, final = run_produce(
        demo, name, "open", DEMO_PARTITIONS, DEMO_TRANSACTIONS, seed=7, expected=expected,
        duplicates=0.05, schema=name,
    )  # fmt: skip
    env = {
        **os.environ,
        "TICDC_SINK_GROUP": name,
        "TICDC_SINK_TOPICS": name,
        "TICDC_SINK_PROTOCOL": "open",
        "TICDC_SINK_WEB_PORT": "0",
    }
    staging = Staging(redis_client(settings), name)
    started = time.monotonic()
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ticdc_sink",
                command,
                *(["--config", config] if config else []),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for command in ("worker", "apply")
    ]
    watch = CheckpointWatch(demo)
    try:
        checkpoint = 0
        while checkpoint < final:
            if time.monotonic() - started > DEMO_TIMEOUT_S:
                print(f"\ngave up after {DEMO_TIMEOUT_S} s")
                return 1
            time.sleep(0.5)
            checkpoint = watch.applied_resolved_ts()
            resolved = staging.global_resolved_ts() or 0
            behind_ms = max(0, tso_millis(resolved) - tso_millis(checkpoint)) if checkpoint else 0
            staged, _ = staging.staged_totals()
            applied = tso_time(checkpoint) if checkpoint else "-"
            print(
                f"\r{time.monotonic() - started:6.1f} s  staged {staged:7d} rows  "
                f"applied up to {applied:24}  behind resolved {behind_ms / 1000:8.1f} s",
                end="",
                flush=True,
            )
        elapsed = time.monotonic() - started
    finally:
        watch.close()
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
    print()
    ok, report = verify(demo, expected)
    print("\n".join(report))
    print(
        f"{sent} messages ({DEMO_TRANSACTIONS} transactions) replicated in {elapsed:.1f} s, "
        "process start-up included"
    )
    print(f"downstream database `{name}`; see: TICDC_SINK_GROUP={name} ticdc-sink status")
    print(f"verify: {'match' if ok else 'MISMATCH'}")
    return 0 if ok else 1
