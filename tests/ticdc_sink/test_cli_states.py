"""Every one-shot command in the states an operator meets: a service down or refusing the
settings, bad arguments, a prompt closed, a reader gone, a bug. Each gives one line and its exit
code, never a traceback. In-process through ``main`` where the process does not matter."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ticdc_sink.cli import main

CLOSED = "127.0.0.1:1"
DOWN = {
    "redis": ("TICDC_SINK_REDIS_URL", f"redis://{CLOSED}/0", "Redis"),
    "kafka": ("TICDC_SINK_KAFKA", CLOSED, "Kafka"),
    "downstream": ("TICDC_SINK_DOWNSTREAM", f"mysql://app:hunter2@{CLOSED}/", "the downstream"),
}


@pytest.fixture(autouse=True)
def _own_process_state(monkeypatch: pytest.MonkeyPatch, unique: str) -> Iterator[None]:
    """A pipeline and topic of this test's own; main()'s signal and log handlers put back."""
    monkeypatch.setenv("TICDC_SINK_GROUP", unique)
    monkeypatch.setenv("TICDC_SINK_META_DB", f"{unique}_meta")
    monkeypatch.setenv("TICDC_SINK_TOPICS", unique)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    root = logging.getLogger()
    log_handlers, level = list(root.handlers), logging.getLogger("aiokafka").level
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    root.handlers[:] = log_handlers
    logging.getLogger("aiokafka").setLevel(level)


def _line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a failed command wrote to stderr (and that it wrote only that)."""
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "down"),
    [
        (["status"], "redis"),
        (["status"], "kafka"),
        (["status"], "downstream"),
        (["deadletters", "list"], "redis"),
        (["deadletters", "export"], "redis"),
        (["deadletters", "purge", "--yes"], "redis"),
        (["deadletters", "show", "1-0"], "redis"),
        (["recover", "--dry-run"], "redis"),
        (["recover", "--dry-run"], "kafka"),
        (["recover", "--dry-run"], "downstream"),
        (["produce", "--transactions", "1"], "kafka"),
        (["verify", "--expected", "absent.json"], "downstream"),
        (["verify", "--db", "a", "--truth-db", "b"], "downstream"),
        (["skip-ddl", "--ts", "5"], "downstream"),
        (["check", "--upstream", "mysql://root@127.0.0.1:4000/"], "downstream"),
    ],
)
def test_a_service_down_is_one_line_naming_the_setting_and_address(
    argv: list[str],
    down: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    variable, value, service = DOWN[down]
    monkeypatch.setenv(variable, value)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    line = _line(capsys)
    assert line.startswith(f"ticdc-sink {argv[0]}: {variable}: cannot reach {service} at {CLOSED}")
    assert "hunter2" not in line
    assert not (tmp_path / ".ticdc-sink").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["decode", "--protocol", "avro", "value"],
        pytest.param(
            ["produce", "--protocol", "avro", "--transactions", "1"],
            marks=pytest.mark.integration,  # Kafka is reached first
        ),
    ],
    ids=["decode", "produce"],
)
def test_a_registry_down_is_waited_for_then_one_line_naming_the_setting(
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    # Avro's schemas come from the registry: a one-shot command waits for it as a starting
    # worker does (TICDC_SINK_STARTUP_TIMEOUT, one log line), then says which setting, exit 1.
    monkeypatch.setenv("TICDC_SINK_SCHEMA_REGISTRY", f"http://{CLOSED}")
    monkeypatch.setenv("TICDC_SINK_STARTUP_TIMEOUT", "1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "value").write_bytes(b"\x00\x00\x00\x00\x01\x02")  # a frame naming schema id 1
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[-1].startswith(
        f"ticdc-sink {argv[0]}: TICDC_SINK_SCHEMA_REGISTRY: the schema registry at "
        f"http://{CLOSED} did not answer while starting"
    ), err


@pytest.mark.integration
@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (
            ["produce", "--transactions", "1"],
            {"TICDC_SINK_KAFKA_SECURITY_PROTOCOL": "SSL"},
            "TICDC_SINK_KAFKA_SECURITY_PROTOCOL=SSL: ",
        ),
        (
            ["deadletters", "list"],
            {"TICDC_SINK_REDIS_URL": "rediss://127.0.0.1:6379/0"},
            "TICDC_SINK_REDIS_URL: ",
        ),
    ],
)
def test_tls_against_a_plaintext_port_is_one_line_naming_the_setting(
    argv: list[str],
    env: dict[str, str],
    named: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    if argv[0] == "produce":
        _needs_kafka()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert _line(capsys).startswith(f"ticdc-sink {argv[0]}: {named}")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["deadletters", "list", "--limit", "0"], "argument --limit: 0 is not a positive number"),
        (["deadletters", "show", "12x"], "argument id: '12x' is not a dead letter's id"),
        (["deadletters", "purge", "1-0", "x"], "argument ID: 'x' is not a dead letter's id"),
        (["produce", "--partitions", "0"], "argument --partitions: 0 is not a positive number"),
        (["produce", "--partitions", "-2"], "argument --partitions: -2 is not a positive number"),
        (["produce", "--duplicates", "2"], "argument --duplicates: 2 is not a share between"),
        (["produce", "--dispatcher", "key"], "argument --dispatcher: invalid choice: 'key'"),
        (["skip-ddl", "--ts", str(1 << 64)], f"argument --ts: {1 << 64} is not a commit ts"),
        (["skip-ddl", "--ts", "0"], "argument --ts: 0 is not a commit ts"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert says in _line(capsys)


def test_a_state_file_in_a_missing_directory_is_refused_not_created(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    expected = tmp_path / "absent" / "dir" / "x.json"
    assert main(["produce", "--expected", str(expected)]) == 2
    assert _line(capsys) == (
        f"ticdc-sink produce: --expected {expected}: no directory {expected.parent}"
    )
    assert not (tmp_path / "absent").exists()


def test_a_missing_file_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["decode", "--protocol", "open", "/nonexistent/value"]) == 2
    assert _line(capsys) == "ticdc-sink decode: /nonexistent/value: No such file or directory"


@pytest.mark.integration
def test_end_of_input_at_the_purge_prompt_deletes_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], redis_client: Any
) -> None:
    class ClosedTerminal:
        def isatty(self) -> bool:
            return True

        def readline(self) -> str:
            return ""  # Ctrl-D

    monkeypatch.setattr(sys, "stdin", ClosedTerminal())
    assert main(["deadletters", "purge"]) == 2
    assert _line(capsys).endswith("no answer at the prompt (end of input): nothing changed")


async def _topic_ends(topic: str, partitions: int, create: bool = False) -> list[int]:
    """The end offsets of ``topic``'s partitions (created first if ``create``)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    if create:
        admin = AIOKafkaAdminClient(bootstrap_servers="127.0.0.1:9092")
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, partitions, 1)])
        finally:
            await admin.close()
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9092")
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    finally:
        await consumer.stop()
    return [ends[tp] for tp in sorted(ends)]


async def _delete_topic(topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers="127.0.0.1:9092")
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


@pytest.mark.integration
def test_produce_refuses_another_partition_count_before_writing(
    unique: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _needs_kafka()
    assert asyncio.run(_topic_ends(unique, 3, create=True)) == [0, 0, 0]
    try:
        argv = ["produce", "--topic", unique, "--partitions", "5"]
        assert main([*argv, "--expected", str(tmp_path / "x.json")]) == 2
        assert _line(capsys) == (
            f"ticdc-sink produce: --partitions 5: topic {unique!r} already has 3 partitions; "
            "give --partitions 3, or another topic"
        )
        assert asyncio.run(_topic_ends(unique, 3)) == [0, 0, 0]
        assert not (tmp_path / "x.json").exists()
    finally:
        asyncio.run(_delete_topic(unique))


def test_a_bug_is_one_line_saying_so_with_its_traceback_in_a_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*_: Any, **__: Any) -> int:
        raise RuntimeError("the describe broke")

    monkeypatch.setattr("ticdc_sink.config_command.run_describe", broken)
    assert main(["config", "describe"]) == 1
    line = _line(capsys)
    assert line.startswith(
        "ticdc-sink config: unexpected error, a bug: RuntimeError: the describe broke "
        "(traceback in "
    )
    assert "report it" in line
    kept = Path(line.split("(traceback in ", 1)[1].split(";", 1)[0])
    assert "Traceback" in kept.read_text() and "the describe broke" in kept.read_text()
    kept.unlink()


def test_a_reader_gone_from_stdout_ends_decode_quietly(conformance: Path) -> None:
    stream = conformance / "ticdc_encoded" / "open.jsonl.gz"
    process = subprocess.Popen(
        [sys.executable, "-m", "ticdc_sink", "decode", "--protocol", "open", "--stream", stream],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.readline()
    process.stdout.close()  # as `| head -1` does
    err = process.stderr.read()
    assert process.wait(timeout=60) == 128 + signal.SIGPIPE
    assert err == b""


@pytest.mark.integration
@pytest.mark.parametrize(
    ("argv", "code", "first"),
    [
        (["status"], 0, "pipeline {group}"),
        (["deadletters", "list"], 0, "pipeline {group}: 0 dead letters"),
        (["deadletters", "export"], 0, ""),
        (
            ["deadletters", "show", "1-0"],
            2,
            "no dead letter '1-0' in pipeline '{group}' (see: list)",
        ),
        (
            ["deadletters", "replay", "1-0"],
            2,
            "no dead letter '1-0' in pipeline '{group}' (see: list)",
        ),
        (["recover", "--dry-run"], 2, "TICDC_SINK_TOPICS: topic '{group}' not found"),
        (
            ["skip-ddl", "--ts", "5"],
            2,
            "--ts 5: no pipeline '{group}': no checkpoint downstream and nothing staged in Redis"
            " (check TICDC_SINK_GROUP)",
        ),
    ],
)
def test_an_unknown_or_empty_pipeline(
    argv: list[str],
    code: int,
    first: str,
    unique: str,
    capsys: pytest.CaptureFixture[str],
    redis_client: Any,
    mariadb_connect: Any,
) -> None:
    if argv[0] in {"status", "recover"}:
        _needs_kafka()
    try:
        assert main(argv) == code
        if argv[0] == "skip-ddl":
            # A refused skip leaves nothing behind downstream.
            with mariadb_connect() as conn, conn.cursor() as cursor:
                cursor.execute("SHOW DATABASES LIKE %s", (f"{unique}_meta",))
                assert cursor.fetchone() is None
    finally:
        with mariadb_connect() as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")
    captured = capsys.readouterr()
    if code:
        assert _line_of(captured.err) == f"ticdc-sink {argv[0]}: {first.format(group=unique)}"
    else:
        assert (captured.out.splitlines() or [""])[0] == first.format(group=unique)


def _needs_kafka() -> None:
    import socket

    from tests.conftest import service_missing

    try:
        socket.create_connection(("127.0.0.1", 9092), timeout=5).close()
    except OSError as error:
        service_missing("Kafka", error)


def _line_of(err: str) -> str:
    (line,) = err.splitlines()
    return line
