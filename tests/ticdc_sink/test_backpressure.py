"""Backpressure against one transaction larger than the staging limit: its watermark comes only
after all of it, so a worker that held at the limit would wait for a sink that waits for it.

The transaction must span several of the consumer's fetches (1 MiB a partition) for the worker
to look at its limit in the middle of it: hence tens of thousands of rows."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import orjson
import pytest

from config.settings import Settings
from core.redis_client import redis_client
from core.staging import Staging
from tests.ticdc_sink.pipelines import (
    applied_resolved_ts,
    assert_replicated,
    pipeline_env,
    pipeline_running,
    wait_for,
)
from ticdc_sink.produce import expected_state, scenario_messages, send
from ticdc_sink.scenario import Scenario

pytestmark = pytest.mark.integration

PARTITIONS = 2
LIMIT = 10_000


def test_a_transaction_three_times_the_staging_limit_replicates(
    pipeline: Settings, unique: str, tmp_path: Path
) -> None:
    scenario = Scenario(seed=29, transactions=0, schema=unique, bulk_rows=3 * LIMIT)
    messages, final = scenario_messages(scenario, "open", PARTITIONS)
    asyncio.run(send(pipeline, unique, PARTITIONS, messages))
    expected = tmp_path / "expected.json"
    expected.write_bytes(orjson.dumps(expected_state(scenario)))
    staging = Staging(redis_client(pipeline), unique)
    staged_most = 0
    done = threading.Event()

    def sample() -> None:
        # Every few ms, on a thread of its own: the whole transaction is staged only from its
        # last row until the sink's trim after the commit, a few hundred ms.
        nonlocal staged_most
        while not done.is_set():
            staged_most = max(staged_most, staging.staged_totals()[0])
            done.wait(0.005)

    def applied() -> bool:
        return applied_resolved_ts(pipeline) >= final

    env = pipeline_env(pipeline, "open", TICDC_SINK_MAX_STAGED_ROWS=str(LIMIT))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with pipeline_running(env) as (worker, sink):
            wait_for(lambda: applied() or worker.poll() is not None, "the transaction applied", 90)
            assert worker.poll() is None and sink.poll() is None, "a process exited"
    finally:
        done.set()
        sampler.join()
    # Nothing of it is applied before its watermark, which follows all of it: the worker staged
    # the whole transaction, past its limit, while the sink applied it.
    assert staged_most >= 3 * LIMIT
    assert_replicated(pipeline, expected)
