"""Running a pipeline's processes in tests: a worker and a sink as ``python -m ticdc_sink``
subprocesses of one pipeline, their logs, and checking the downstream against what was expected."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import quote

import orjson
import pytest

from config.settings import ENV_PREFIX, Downstream, Settings, load_settings
from config.signals import EXIT_STOP_OVERDUE, STOP_SIGNALS
from core.kafka_client import kafka_options
from core.model import RowChange
from core.redis_client import redis_client
from core.staging import Staging
from core.staging.dead_letters import MessageLetter
from spark_sink.db.checkpoint import CheckpointWatch
from streams.codecs import Codec, KafkaMessage
from ticdc_sink.produce import expected_state, scenario_messages, send
from ticdc_sink.scenario import Scenario
from ticdc_sink.verify import verify

# Partitions of the topic the ``topic`` fixture (conftest.py) creates.
TOPIC_PARTITIONS = 2
# Each spawned process's output, kept so that a failing test can show what its processes said.
PROCESS_LOGS = Path(tempfile.gettempdir()) / "ticdc-sink-test-logs"
# A test that replicates into MariaDB (the settings' downstream) and into the local TiDB: its
# ``pipeline`` (conftest.py) writes into the server of the parameter.
ON_EVERY_SERVER = pytest.mark.parametrize("downstream_settings", ["mariadb", "tidb"], indirect=True)


def downstream_address(downstream: Downstream) -> str:
    """``downstream`` as a ``TICDC_SINK_DOWNSTREAM`` value, its password included."""
    password = downstream.password.get_secret_value()
    login = quote(downstream.user, safe="") + (":" + quote(password, safe="") if password else "")
    _, _, parameters = str(downstream).partition("?")
    address = f"mysql://{login}@{downstream.host}:{downstream.port}/"
    return address + (f"?{parameters}" if parameters else "")


def applied_resolved_ts(settings: Settings) -> int:
    """The pipeline's applied resolved ts downstream; 0 before the sink has recorded any."""
    with CheckpointWatch(settings) as watch:
        return watch.applied_resolved_ts()


def pipeline_env(settings: Settings, protocol: str, **extra: str) -> dict[str, str]:
    """The environment of a worker or sink of the pipeline ``settings`` names, writing into its
    downstream."""
    downstream = {}
    if settings.downstream.url != load_settings().downstream.url:
        downstream[f"{ENV_PREFIX}DOWNSTREAM"] = downstream_address(settings.downstream.url)
    return {
        **os.environ,
        **downstream,
        "TICDC_SINK_GROUP": settings.group,
        "TICDC_SINK_TOPICS": ",".join(settings.kafka.topics),
        "TICDC_SINK_META_DB": settings.downstream.meta_db,
        "TICDC_SINK_PROTOCOL": protocol,
        "TICDC_SINK_WEB_PORT": "0",
        # A killed worker's partitions move after this: Kafka's minimum, to keep tests short.
        "TICDC_SINK_SESSION_TIMEOUT": "6",
        **extra,
    }


def spawn(
    command: str,
    env: dict[str, str],
    log: Path | None = None,
    program: Sequence[str] = (sys.executable, "-m", "ticdc_sink"),
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """``ticdc-sink COMMAND`` (this checkout's, unless ``program`` names another) in a session of
    its own, its output in ``log`` (by default a file of :data:`PROCESS_LOGS` named after the
    pipeline)."""
    if log is None:
        PROCESS_LOGS.mkdir(exist_ok=True)
        log = PROCESS_LOGS / f"{env['TICDC_SINK_GROUP']}-{command}-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        return subprocess.Popen(
            [*program, command],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
        )


def start_worker(
    settings: Settings, topic: str, group: str, **extra: str
) -> subprocess.Popen[bytes]:
    """A worker of pipeline ``group`` reading ``topic`` (Open Protocol unless ``extra`` says
    otherwise), in a session of its own, its output discarded."""
    configured = settings.updated({"group": group, "topics": (topic,)})
    return spawn("worker", pipeline_env(configured, "open", **extra), Path(os.devnull))


def process_logs(group: str, lines: int = 40) -> str:
    """The last lines of every process a test of pipeline ``group`` spawned, and the whole of
    a stack dump (:func:`stop`'s) in them."""
    parts = []
    for path in sorted(PROCESS_LOGS.glob(f"{group}-*.log")):
        whole = path.read_text(errors="replace").splitlines()
        dumped = [i for i, line in enumerate(whole) if "most recent call first" in line]
        tail = whole[min([max(0, len(whole) - lines), *dumped]) :]
        parts.append(f"--- {path.name}\n" + "\n".join(tail))
    return "\n".join(parts)


def forget_logs(group: str) -> None:
    """Delete the logs of the processes a test of pipeline ``group`` spawned."""
    for path in PROCESS_LOGS.glob(f"{group}-*.log"):
        path.unlink()


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Signal ``process``'s group and wait for it. A stop that got stuck fails: one the process
    ended itself (TICDC_SINK_STOP_TIMEOUT, exit 3) and one that outlives its minute (its
    threads' stacks written to its log by SIGQUIT, then killed)."""
    running = process.poll() is None
    if running:
        os.killpg(process.pid, sig)
    name = f"{' '.join(map(str, process.args[-2:]))} (pid {process.pid})"
    try:
        code = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGQUIT)
        time.sleep(2)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise AssertionError(
            f"{name} outlived its minute after {signal.Signals(sig).name}: its threads' stacks "
            "end its log"
        ) from None
    if running and code == EXIT_STOP_OVERDUE and sig in STOP_SIGNALS:
        raise AssertionError(f"{name} did not stop within TICDC_SINK_STOP_TIMEOUT: see its log")


@contextlib.contextmanager
def pipeline_running(env: dict[str, str]) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One worker and one sink for the duration of the block, stopped (SIGTERM) after it."""
    processes = [spawn("worker", env), spawn("apply", env)]
    try:
        yield processes
    finally:
        stop_all(processes)


def stop_all(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """:func:`stop` each of ``processes``, every one even when a stop before failed (none is
    left running into the next test); the first failure is raised after."""
    failures = []
    for process in processes:
        try:
            stop(process)
        except AssertionError as failure:
            failures.append(failure)
    if failures:
        raise failures[0]


def assert_replicated(settings: Settings, *expected: Path) -> None:
    for state in expected:
        ok, report = verify(settings, state)
        assert ok, "\n".join(report)


def assert_grammar_live(
    settings: Settings,
    protocol: str,
    messages: list[tuple[int, KafkaMessage]],
    final: int,
    expected: Path,
    malformed: list[tuple[str, KafkaMessage]],
    topics: Sequence[str] = (),
    **env: str,
) -> None:
    """Send ``messages`` (a workload whose last resolved ts is ``final``, which replicated leaves
    ``expected``) with every message of ``malformed`` (rule name, message) sent between its two
    halves to every partition; run a worker and a sink until the workload is applied. Neither
    exits, the downstream is ``expected``, and each malformed message is one dead letter, at its
    offset, naming its rule (the live tests of each protocol's grammar). A stream of a topic per
    table (Avro) names its ``topics`` (where messages naming none go) and the malformed
    messages' one topic; ``env`` is the worker's and sink's environment beyond the pipeline's."""
    topic = settings.kafka.topics[0]
    partitions = 1 + max(partition for partition, _ in messages)
    half = len(messages) // 2
    # The malformed messages' topic, and what it held before them: offsets are per topic.
    target = malformed[0][1].topic
    sent_before = [
        sum(1 for p, m in messages[:half] if p == part and m.topic in (None, target))
        for part in range(partitions)
    ]
    middle = [(p, message) for p in range(partitions) for _, message in malformed]
    sent = messages[:half] + middle + messages[half:]
    asyncio.run(send(settings, topic, partitions, sent, topics))
    with pipeline_running(pipeline_env(settings, protocol, **env)) as (worker, sink):
        wait_for(
            lambda: applied_resolved_ts(settings) >= final or worker.poll() is not None,
            "the workload applied",
        )
        assert worker.poll() is None, "the worker exited"
        assert sink.poll() is None, "the sink exited"
    assert_replicated(settings, expected)
    letters = Staging(redis_client(settings), settings.group).dead_letters.entries()
    messages_only = [d for d in letters if isinstance(d, MessageLetter)]
    assert len(messages_only) == len(letters), "a row of the workload was dead-lettered"
    found = sorted((d.tp.partition, d.offset, d.error) for d in messages_only)
    assert [(p, o) for p, o, _ in found] == [
        (p, sent_before[p] + i) for p in range(partitions) for i in range(len(malformed))
    ]
    for partition, offset, error in found:
        rule = malformed[offset - sent_before[partition]][0]
        assert f"breaks rule {rule}" in error, (rule, error)


async def delete_topics(settings: Settings, prefix: str) -> None:
    """Delete the topics named ``<prefix>_...`` (a stream of a topic per table)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        topics = [t for t in await admin.list_topics() if t.startswith(f"{prefix}_")]
        if topics:
            await admin.delete_topics(topics)
    finally:
        await admin.close()


def wait_for(condition: Callable[[], object], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def run_worker_until_resolved(
    settings: Settings, staging: Staging, topic: str, group: str, ts: int, **extra: str
) -> None:
    """A worker of pipeline ``group`` on ``topic``, until the global resolved ts reaches ``ts``."""
    worker = start_worker(settings, topic, group, **extra)
    try:
        deadline = time.monotonic() + 90
        while (staging.global_resolved_ts() or 0) < ts:
            assert worker.poll() is None, "the worker stopped"
            assert time.monotonic() < deadline, "the global resolved ts never came"
            time.sleep(0.25)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)


def _socket_inodes(group: int) -> set[str]:
    """The inodes of the sockets the processes of process group ``group`` hold open."""
    inodes = set()
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or os.getpgid(int(entry.name)) != group:
                continue
            for fd in (entry / "fd").iterdir():
                target = str(fd.readlink())
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
        except OSError:  # the process or the descriptor went away meanwhile
            continue
    return inodes


def client_ports(process: subprocess.Popen[bytes], server_port: int) -> set[int]:
    """The local ports of the TCP connections to ``server_port`` that ``process`` and every
    process of its group (a sink's Spark JVM included) hold: what the server's process list
    shows as those clients' ports."""
    inodes = _socket_inodes(process.pid)
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote = int(fields[2].rsplit(":", 1)[1], 16)
            if fields[9] in inodes and remote == server_port:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def assert_grammar_live_on_a_row(
    settings: Settings,
    unique: str,
    tmp_path: Path,
    protocol: str,
    codec: Codec,
    malformed: Callable[[RowChange], list[tuple[str, KafkaMessage]]],
) -> None:
    """:func:`assert_grammar_live` on the scenario's workload in ``protocol`` over 2 partitions,
    the malformed messages made by ``malformed`` on a row of the workload's first half (its
    table, at its commit ts), as ``codec`` reads it."""
    scenario = Scenario(seed=40, transactions=80, schema=unique)
    messages, final = scenario_messages(scenario, protocol, 2, seed=40)
    row = next(
        event
        for _, message in messages[: len(messages) // 2]
        for event in codec.decode(message.key, message.value)
        if isinstance(event, RowChange)
    )
    expected = tmp_path / "expected.json"
    expected.write_bytes(orjson.dumps(expected_state(scenario, protocol)))
    assert_grammar_live(settings, protocol, messages, final, expected, malformed(row))
