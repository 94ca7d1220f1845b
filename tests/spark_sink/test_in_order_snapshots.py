"""A reader of the downstream while the sink applies on four connections at once: every
consistent snapshot it takes is the upstream at the checkpoint that snapshot holds (never a
batch partly applied, never a later batch without an earlier one)."""

from __future__ import annotations

import random
import threading

import pytest

from config.settings import Settings
from core.redis_client import RedisClient
from spark_sink.db.checkpoint import Checkpoint
from tests.spark_sink.test_loop_model import State, observed, sink_loop_machine
from tests.ticdc_sink.pipelines import ON_EVERY_SERVER

pytestmark = pytest.mark.integration

TRANSACTIONS = 400
# A resolved event after every this many transactions: rounds of several batches each.
RESOLVE_EVERY = 40
CONNECTIONS = 4


@ON_EVERY_SERVER
def test_a_reader_sees_the_upstream_at_the_checkpoint_while_four_connections_apply(
    downstream_settings: Settings, redis_client: RedisClient
) -> None:
    machine = sink_loop_machine(downstream_settings, redis_client)()
    # Mostly new rows over a wide key space: batches that seldom meet, as a table of many
    # rows written evenly gives (a hot row serializes the batches that touch it).
    machine.upstream.ids = 1 << 30
    machine.upstream.changes = 0.3
    mismatches: list[tuple[Checkpoint, State, State]] = []
    seen: set[int] = set()
    staged = threading.Event()
    done = threading.Event()

    def stage() -> None:
        rng = random.Random(41)
        for serial in range(TRANSACTIONS):
            # Mostly the keyed table: the key-less one is taken whole, one batch at a time.
            machine.stage_transaction(rng.randrange(2**32), rng.randint(1, 20), keyless=0.01)
            if serial % RESOLVE_EVERY == RESOLVE_EVERY - 1:
                machine.resolve(1, (0, 1))
        machine.resolve(1, (0, 1))
        staged.set()

    def read() -> None:
        while not done.is_set():
            checkpoint, state = observed(machine.settings, machine.db)
            seen.add(checkpoint.resolved_ts)
            expected = machine.upstream.at(checkpoint)
            if state != expected:
                mismatches.append((checkpoint, state, expected))

    try:
        machine.start(
            batch_rows=30, chunk_rows=1_000, chunk_bytes=None, batch_tables=None, connections=4
        )
        sink = machine.sink
        assert sink is not None
        # Its tables made before the reader's first snapshot (made after it, MariaDB refuses
        # the snapshot's reads: 1412).
        sink.target.checkpoint()
        threads = [threading.Thread(target=stage), threading.Thread(target=read)]
        for thread in threads:
            thread.start()
        applied = 0
        while not (staged.is_set() and applied == machine.global_resolved()):
            applied = sink.run_once()
        done.set()
        for thread in threads:
            thread.join()
        assert not mismatches, mismatches[0]
        checkpoint, state = observed(machine.settings, machine.db)
        assert checkpoint.resolved_ts == machine.global_resolved()
        assert state == machine.upstream.at(checkpoint)
        # The reader saw the checkpoint move through many batches, applied beside each other.
        assert len(seen) >= 10, sorted(seen)
        assert sink._in_order is not None and sink._in_order.most_in_flight >= 2
    finally:
        done.set()
        machine.teardown()
