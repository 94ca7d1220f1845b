"""The sink's whole loop as a state machine (hypothesis), against real Redis and a real downstream.

Hypothesis stages random upstream transactions (1 change to several chunks, on a keyed and a
key-less table) across two partitions as TiCDC's messages carry them, TRUNCATE TABLE barriers
(in every partition, as TiCDC sends a DDL), and resolved events at random points (at a commit
ts, past it, in one partition only, older than one sent before). The sink runs with batch,
chunk and table limits drawn small, so every boundary is crossed: rounds read ahead, batches,
parts of a transaction, DDL barriers, a round that ends with a transaction in parts. While it
applies, more transactions arrive and the resolved ts moves on, another connection reads the
downstream, the sink is stopped (SIGTERM) or killed (the process gone: its connection dropped,
nothing else done) before or after any apply, and a new sink takes over.

A reference applies the same transactions one at a time. After every step, and before every
apply, the downstream read in one consistent snapshot must be the reference at the checkpoint
it holds (no transaction ever partly visible), and the checkpoint never goes back. A sink left
alone reaches the global resolved ts within a few rounds (no livelock).

The budget: ``SINK_LOOP_EXAMPLES`` examples per server (``make fuzz`` sets many).
"""

from __future__ import annotations

import os
import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymysql
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from config.settings import Settings
from core.model import ColumnFlag, DDLEvent, Op, RowChange, column_type
from core.redis_client import RedisClient
from core.staging import Staging, TopicPartition
from spark_sink.db.checkpoint import NO_CHECKPOINT, Checkpoint, CheckpointTable
from spark_sink.db.connection import connect
from spark_sink.loop import SinkLoop
from spark_sink.target import Target
from tests.ticdc_sink.pipelines import ON_EVERY_SERVER

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("SINK_LOOP_EXAMPLES", "6"))
STEPS = 30
TS = 449_500_000_000_000_000
TOPIC = "topic"
PARTITIONS = 2
# TiCDC's Open Protocol puts this many row events in a message (its max-batch-size default).
MESSAGE_ROWS = 16
KEY = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
KEYED = {
    "id": column_type(3, KEY),
    "u": column_type(3, int(ColumnFlag.UNIQUE_KEY)),
    "v": column_type(15, int(ColumnFlag.NULLABLE)),
}
KEYLESS = {"id": column_type(3, int(ColumnFlag.NULLABLE)), "v": column_type(15, 64)}
# TiDB's action code of TRUNCATE TABLE.
TRUNCATE_TABLE = 11
# What the sink may be told while it applies: before the apply call it names, or after it.
FAULTS = ("transaction", "resolve", "kill before", "kill after", "sigterm")

Keyed = tuple[int, int, str]
Keyless = tuple[int, str]
State = tuple[tuple[Keyed, ...], tuple[Keyless, ...]]


class KilledError(Exception):
    """The sink's process killed at this step."""


@dataclass
class Upstream:
    """The upstream's two tables, and their state after each commit ts."""

    keyed: dict[int, Keyed] = field(default_factory=dict)
    keyless: Counter[Keyless] = field(default_factory=Counter)
    # (commit ts, whether a DDL, the state after it), in commit-ts order.
    history: list[tuple[int, bool, State]] = field(default_factory=list)
    serial: int = 0
    # Keys are drawn below this; changes to rows the table holds are this share of a
    # transaction's keyed changes (the rest inserts).
    ids: int = 1_000
    changes: float = 0.75

    def state(self) -> State:
        return tuple(sorted(self.keyed.values())), tuple(sorted(self.keyless.elements()))

    def at(self, checkpoint: Checkpoint) -> State:
        """The state a downstream at ``checkpoint`` must hold: everything at or below its ts,
        except the DDL at it when the checkpoint has not recorded that DDL yet (the batch
        before a DDL commits up to the DDL's ts)."""
        state: State = ((), ())
        for ts, ddl, after in self.history:
            if ts > checkpoint.resolved_ts:
                break
            if ddl and ts == checkpoint.resolved_ts and checkpoint.ddl_ts < ts:
                break
            state = after
        return state

    def transaction(
        self, rng: random.Random, ts: int, db: str, size: int, keyless: float = 0.3
    ) -> list[RowChange]:
        """``size`` changes at ``ts``, at most one per row (as TiCDC sends a transaction):
        inserts, updates (some moving the key, some of those split into a delete and an insert
        as TiCDC splits them), deletes; on the key-less table (a ``keyless`` share of them),
        images added and removed."""
        changes: list[RowChange] = []
        touched: set[int] = set()
        removable = Counter(self.keyless)
        for _ in range(size):
            if rng.random() < keyless:
                changes.append(self._keyless_change(rng, ts, db, removable))
                continue
            free = [i for i in self.keyed if i not in touched]
            choice = "insert"
            if free and rng.random() < self.changes:
                choice = rng.choice(["update", "move", "delete"])
            if choice == "insert":
                new_id = self._free_id(rng)
                self.serial += 1
                row = (new_id, self.serial, rng.choice("ab"))
                self.keyed[new_id] = row
                touched.add(new_id)
                changes.append(RowChange(ts, db, "k", Op.INSERT, KEYED, _keyed(row), None))
                continue
            old = self.keyed[rng.choice(free)]
            touched.add(old[0])
            if choice == "delete":
                del self.keyed[old[0]]
                changes.append(RowChange(ts, db, "k", Op.DELETE, KEYED, None, _keyed(old)))
                continue
            new = (old[0], old[1], rng.choice("abc"))
            if choice == "move":
                del self.keyed[old[0]]
                new = (self._free_id(rng), old[1], old[2])
                touched.add(new[0])
            self.keyed[new[0]] = new
            if new[0] != old[0] and rng.random() < 0.5:
                changes.append(RowChange(ts, db, "k", Op.DELETE, KEYED, None, _keyed(old)))
                changes.append(RowChange(ts, db, "k", Op.INSERT, KEYED, _keyed(new), None))
            else:
                changes.append(RowChange(ts, db, "k", Op.UPDATE, KEYED, _keyed(new), _keyed(old)))
        rng.shuffle(changes)
        self.history.append((ts, False, self.state()))
        return changes

    def truncate(self, ts: int, table: str) -> None:
        if table == "k":
            self.keyed.clear()
        else:
            self.keyless.clear()
        self.history.append((ts, True, self.state()))

    def _free_id(self, rng: random.Random) -> int:
        while True:
            candidate = rng.randrange(self.ids)
            if candidate not in self.keyed:
                return candidate

    def _keyless_change(
        self, rng: random.Random, ts: int, db: str, removable: Counter[Keyless]
    ) -> RowChange:
        """An image added, removed or replaced; a removed one is a row the table held before
        the transaction (TiCDC sends nothing for a row a transaction adds and removes)."""
        new = (rng.randrange(4), rng.choice("ab"))
        held = sorted(removable.elements())
        if not held or rng.random() < 0.5:
            self.keyless[new] += 1
            return RowChange(ts, db, "n", Op.INSERT, KEYLESS, _keyless(new), None)
        old = rng.choice(held)
        removable[old] -= 1
        self.keyless[old] -= 1
        if rng.random() < 0.5:
            return RowChange(ts, db, "n", Op.DELETE, KEYLESS, None, _keyless(old))
        self.keyless[new] += 1
        return RowChange(ts, db, "n", Op.UPDATE, KEYLESS, _keyless(new), _keyless(old))


def _keyed(row: Keyed) -> dict[str, Any]:
    return {"id": row[0], "u": row[1], "v": row[2]}


def _keyless(row: Keyless) -> dict[str, Any]:
    return {"id": row[0], "v": row[1]}


def partition_of(change: RowChange) -> int:
    """As TiCDC's default dispatcher sends it: a keyed table's row by its key, a key-less
    table's rows all to one partition (by the table)."""
    if change.table == "n":
        return 0
    image = change.new if change.new is not None else change.old
    assert image is not None
    key = image["id"]
    assert isinstance(key, int)
    return key % PARTITIONS


def observed(settings: Settings, db: str) -> tuple[Checkpoint, State]:
    """The checkpoint and both tables, read in one consistent snapshot."""
    table = CheckpointTable(settings.downstream.meta_db, settings.group)
    with connect(settings) as conn, conn.cursor() as cursor:
        cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        try:
            checkpoint = table.read(cursor) or NO_CHECKPOINT
        except pymysql.err.ProgrammingError:  # no checkpoint table before the sink's first
            checkpoint = NO_CHECKPOINT
        cursor.execute(f"SELECT id, u, v FROM `{db}`.k")
        keyed = tuple(sorted((int(i), int(u), str(v)) for i, u, v in cursor.fetchall()))
        cursor.execute(f"SELECT id, v FROM `{db}`.n")
        keyless = tuple(sorted((int(i), str(v)) for i, v in cursor.fetchall()))
        conn.rollback()
    return checkpoint, (keyed, keyless)


def sink_loop_machine(base: Settings, redis_client: RedisClient) -> type[RuleBasedStateMachine]:
    class SinkLoopMachine(RuleBasedStateMachine):
        """One pipeline per example: its own Redis staging area, database and meta database."""

        def __init__(self) -> None:
            super().__init__()
            self.name = "m" + os.urandom(5).hex()
            self.db = self.name
            self.upstream = Upstream()
            self.staging = Staging(redis_client, self.name)
            self.offsets = [0] * PARTITIONS
            # The last commit ts, and the highest resolved ts any partition was sent.
            self.last_ts = TS
            self.promised = TS
            self.watermarks: list[int | None] = [None] * PARTITIONS
            self.applied = 0
            self.settings = base
            self.sink: SinkLoop | None = None
            self.stop = threading.Event()

        @initialize(
            batch_rows=st.integers(1, 24),
            chunk_rows=st.integers(2, 8),
            chunk_bytes=st.sampled_from([None, 48, 200]),
            batch_tables=st.sampled_from([None, 1]),
            connections=st.sampled_from([1, 3]),
        )
        def start(
            self,
            batch_rows: int,
            chunk_rows: int,
            chunk_bytes: int | None,
            batch_tables: int | None,
            connections: int,
        ) -> None:
            values: dict[str, Any] = {
                "group": self.name,
                "meta_db": f"{self.name}_meta",
                "batch_rows": batch_rows,
                "chunk_rows": chunk_rows,
                # Never Spark: its JVM would take longer than every example together.
                "spark_min_rows": 10**9,
                "apply_connections": connections,
            }
            if chunk_bytes is not None:
                values["chunk_bytes"] = chunk_bytes
            if batch_tables is not None:
                values["batch_tables"] = batch_tables
            self.settings = base.updated(values)
            self.staging.set_partition_count(TOPIC, PARTITIONS)
            with connect(self.settings, autocommit=True) as conn, conn.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE `{self.db}`")
                cursor.execute(
                    f"CREATE TABLE `{self.db}`.k "
                    "(id INT PRIMARY KEY, u INT NOT NULL UNIQUE, v VARCHAR(4))"
                )
                cursor.execute(f"CREATE TABLE `{self.db}`.n (id INT, v VARCHAR(4))")
            self.restart()

        def restart(self) -> None:
            """A new sink process: the old one's connection gone, whatever it held rolled back."""
            if self.sink is not None:
                self.sink.close()
                self.sink.target.drop_connection()
            self.stop = threading.Event()
            self.sink = SinkLoop(self.settings, self.staging, Target(self.settings), stop=self.stop)

        def teardown(self) -> None:
            if self.sink is not None:
                self.sink.close()
                self.sink.target.drop_connection()
            self.staging.clear()
            with connect(base, autocommit=True) as conn, conn.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS `{self.db}`")
                cursor.execute(f"DROP DATABASE IF EXISTS `{self.name}_meta`")

        # What the workers stage.

        def next_ts(self, rng: random.Random) -> int:
            self.last_ts = max(self.last_ts, self.promised) + rng.randint(1, 3)
            return self.last_ts

        def send(self, partition: int, rows: list[RowChange], **extra: Any) -> None:
            tp = TopicPartition(TOPIC, partition)
            self.staging.stage(tp, self.offsets[partition], rows, **extra)
            self.offsets[partition] += 1

        def stage_transaction(self, seed: int, size: int, keyless: float = 0.3) -> None:
            rng = random.Random(seed)
            ts = self.next_ts(rng)
            changes = self.upstream.transaction(rng, ts, self.db, size, keyless)
            by_partition: dict[int, list[RowChange]] = {}
            for change in changes:
                by_partition.setdefault(partition_of(change), []).append(change)
            for partition, rows in sorted(by_partition.items()):
                for start in range(0, len(rows), MESSAGE_ROWS):
                    self.send(partition, rows[start : start + MESSAGE_ROWS])

        def resolve(self, past: int, partitions: tuple[int, ...]) -> None:
            """A resolved event ``past`` after the last commit ts in ``partitions``."""
            watermark = max(self.last_ts, self.promised) + past
            for partition in partitions:
                self.send(partition, [], watermark=watermark)
                seen = self.watermarks[partition]
                self.watermarks[partition] = max(seen or 0, watermark)
            self.promised = max(self.promised, watermark)

        def global_resolved(self) -> int | None:
            if any(w is None for w in self.watermarks):
                return None
            return min(w for w in self.watermarks if w is not None)

        @rule(
            seed=st.integers(0, 2**32),
            size=st.sampled_from([1, 2, 5, 13, 40]),
            resolved_past=st.sampled_from([None, 0, 1, 5]),
        )
        def transaction(self, seed: int, size: int, resolved_past: int | None) -> None:
            """A transaction, and the resolved event TiCDC often sends right after it."""
            self.stage_transaction(seed, size)
            if resolved_past is not None:
                self.resolve(resolved_past, (0, 1))

        @rule(table=st.sampled_from(["k", "n"]), seed=st.integers(0, 2**32))
        def truncate(self, table: str, seed: int) -> None:
            ts = self.next_ts(random.Random(seed))
            self.upstream.truncate(ts, table)
            ddl = DDLEvent(ts, self.db, table, f"TRUNCATE TABLE `{table}`", TRUNCATE_TABLE)
            for partition in range(PARTITIONS):
                self.send(partition, [], ddls=[ddl])

        @rule(
            past=st.sampled_from([0, 1, 5]),
            partitions=st.sampled_from([(0, 1), (1, 0), (0,), (1,)]),
            times=st.integers(1, 3),
        )
        def resolved(self, past: int, partitions: tuple[int, ...], times: int) -> None:
            for _ in range(times):
                self.resolve(past, partitions)

        @rule(partition=st.integers(0, PARTITIONS - 1))
        def late_resolved(self, partition: int) -> None:
            """An older resolved event again, as TiCDC replays them: it moves nothing."""
            seen = self.watermarks[partition]
            if seen is not None:
                self.send(partition, [], watermark=seen - 1)

        # The sink.

        @rule(
            faults=st.lists(
                st.tuples(st.integers(0, 6), st.sampled_from(FAULTS), st.integers(0, 2**32)),
                max_size=3,
            )
        )
        def run_sink(self, faults: list[tuple[int, str, int]]) -> None:
            """One call of the loop, with ``faults`` at the apply calls they name."""
            assert self.sink is not None
            self.applied = self.checked(self.applied)
            calls = [0]
            target = self.sink.target
            planned: dict[int, list[tuple[str, int]]] = {}
            for at, fault, seed in faults:
                planned.setdefault(at, []).append((fault, seed))

            def watched(apply: Callable[..., Any]) -> Callable[..., Any]:
                def call(*args: Any, **kwargs: Any) -> Any:
                    at = calls[0]
                    calls[0] += 1
                    after = []
                    for fault, seed in planned.get(at, []):
                        if fault == "transaction":
                            self.stage_transaction(seed, 1 + seed % 20)
                            self.resolve(seed % 3, (0, 1))
                        elif fault == "resolve":
                            self.resolve(seed % 3, (0, 1))
                        elif fault == "sigterm":
                            self.stop.set()
                        elif fault == "kill before":
                            raise KilledError(f"before apply call {at}")
                        else:
                            after.append(fault)
                    # Nothing of a transaction is seen before it commits whole.
                    self.applied = self.checked(self.applied)
                    result = apply(*args, **kwargs)
                    if after:
                        raise KilledError(f"after apply call {at}")
                    return result

                return call

            for name in ("apply_batch", "apply_part", "apply_ddl"):
                setattr(target, name, watched(getattr(target, name)))
            try:
                self.sink.run_once()
            except KilledError:
                self.restart()
                return
            finally:
                for name in ("apply_batch", "apply_part", "apply_ddl"):
                    target.__dict__.pop(name, None)
            if self.stop.is_set():
                self.restart()

        @precondition(lambda self: self.sink is not None)
        @rule()
        def settle(self) -> None:
            """Left alone, the sink reaches the global resolved ts, and no two rounds in a row
            leave the checkpoint where it was: a round may end early to apply a transaction in
            parts again (its images staged), never twice for one transaction."""
            assert self.sink is not None
            resolved = self.global_resolved()
            reached = [self.sink.run_once()]
            stalled = 0
            while reached[-1] != (resolved or self.applied):
                reached.append(self.sink.run_once())
                stalled = stalled + 1 if reached[-1] == reached[-2] else 0
                assert stalled < 2, (resolved, reached)
            if resolved is None:
                assert reached == [self.applied]

        def checked(self, before: int) -> int:
            """The downstream is the upstream at its checkpoint, which has not gone back;
            returns the checkpoint's ts."""
            checkpoint, state = observed(self.settings, self.db)
            assert checkpoint.resolved_ts >= before, (checkpoint, before)
            assert state == self.upstream.at(checkpoint), checkpoint
            return checkpoint.resolved_ts

        @invariant()
        def downstream_is_the_upstream_at_its_checkpoint(self) -> None:
            if self.sink is not None:
                self.applied = self.checked(self.applied)

    return SinkLoopMachine


@ON_EVERY_SERVER
def test_the_sink_loop_keeps_the_downstream_the_upstream_at_its_checkpoint(
    downstream_settings: Settings, redis_client: RedisClient
) -> None:
    machine = sink_loop_machine(downstream_settings, redis_client)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            # A failing run prints its steps as they ran: shrinking them takes many minutes
            # of a real sink and downstream.
            phases=[Phase.explicit, Phase.reuse, Phase.generate],
        ),
    )


@ON_EVERY_SERVER
def test_a_transaction_in_parts_before_the_round_end_or_a_ddl_commits_and_the_sink_goes_on(
    downstream_settings: Settings, redis_client: RedisClient
) -> None:
    """The two shapes the model found, replayed step by step as hypothesis prints a case: a
    transaction in parts that ends a round whose resolved ts is past it, and one right before
    a DDL. Each last part commits at its transaction's ts, and the sink goes on."""
    machine = sink_loop_machine(downstream_settings, redis_client)()
    try:
        machine.start(
            batch_rows=24, chunk_rows=4, chunk_bytes=None, batch_tables=None, connections=1
        )
        machine.transaction(seed=1, size=40, resolved_past=5)
        machine.settle()
        machine.downstream_is_the_upstream_at_its_checkpoint()
        machine.transaction(seed=2, size=13, resolved_past=None)
        machine.truncate(table="k", seed=3)
        machine.resolved(past=1, partitions=(0, 1), times=1)
        machine.settle()
        machine.downstream_is_the_upstream_at_its_checkpoint()
        assert machine.applied == machine.global_resolved()
    finally:
        machine.teardown()
