import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config.settings import Settings
from ticdc_sink import __version__
from ticdc_sink.cli import build_parser, main, missing_extra


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"ticdc-sink {__version__}"


def test_help_lists_the_commands_and_no_secret(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICDC_SINK_DOWNSTREAM", "mysql://app:hunter2@db:3306/")
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "services" in out and "decode" in out
    assert "hunter2" not in out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["nonsense"])
    assert exited.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_a_worker_without_its_extra_names_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As installed without `worker`: Faust is not there, and the worker's module not yet read.
    monkeypatch.setitem(sys.modules, "faust", None)
    monkeypatch.delitem(sys.modules, "streams.worker.run", raising=False)
    assert main(["worker"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "ticdc-sink worker: the Python package 'faust' is not installed: install "
        "'ticdc-sink[worker]' (README, Install)"
    )


def test_which_extra_a_missing_package_asks_for() -> None:
    assert "'ticdc-sink[sink]'" in str(missing_extra("apply", ModuleNotFoundError(name="sqlglot")))
    assert "'ticdc-sink[worker,sink]'" in str(
        missing_extra("status", ModuleNotFoundError(name="redis.asyncio"))
    )
    # A module of the project's own that is missing is a bug, not an install without an extra.
    assert missing_extra("apply", ModuleNotFoundError(name="spark_sink.gone")) is None


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: its own process, stdin not a terminal."""
    return subprocess.run(
        [sys.executable, "-m", "ticdc_sink", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--config", "{path}", "verify", "--expected", "{path}.absent"],
        ["verify", "--config", "{path}", "--expected", "{path}.absent"],
        ["verify", "--expected", "{path}.absent", "--config={path}"],
    ],
)
def test_config_is_accepted_anywhere_on_the_command_line(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sink.toml"
    path.write_text('group = "from-file"\n')
    seen: list[Settings] = []
    monkeypatch.setattr("ticdc_sink.verify.verify", lambda s, _: (seen.append(s), (True, []))[1])
    assert main([part.format(path=path) for part in argv]) == 0
    assert seen[0].group == "from-file"


def test_a_bad_argument_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["produce", "--partitions", "many"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "ticdc-sink produce: argument --partitions: 'many' is not a positive number" in err


def test_a_bad_setting_is_one_line_naming_it_with_the_password_masked() -> None:
    result = _run(
        "status",
        TICDC_SINK_REDIS_URL="http://user:hunter2@redis:6379/0",
        TICDC_SINK_SESSION_TIMEOUT="2",
    )
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("ticdc-sink status: invalid settings: ")
    assert "TICDC_SINK_REDIS_URL='http://user:***@redis:6379/0'" in line
    assert "TICDC_SINK_SESSION_TIMEOUT='2'" in line
    assert "hunter2" not in line and "Traceback" not in result.stderr


def test_a_missing_config_file_is_one_line() -> None:
    result = _run("worker", "--config", "/nonexistent/sink.toml")
    assert result.returncode == 2
    assert result.stderr == "ticdc-sink worker: --config /nonexistent/sink.toml: no such file\n"


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (its SigCgt mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def test_a_one_shot_command_stopped_by_sigterm_says_so_in_one_line(tmp_path: Path) -> None:
    # `decode` from a pipe that never ends: it waits on stdin until stopped.
    process = subprocess.Popen(
        [sys.executable, "-m", "ticdc_sink", "decode", "--protocol", "open"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Once the command catches SIGTERM: before that the signal ends Python unseen (a start of
    # over 2 s on a loaded machine did so).
    deadline = time.monotonic() + 60
    while not _catches(process.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM
    assert err == "ticdc-sink decode: stopped (SIGTERM)\n"


@pytest.mark.integration
async def test_a_worker_on_a_topic_that_does_not_exist_stops_with_one_line(
    kafka_admin: object, unique: str, redis_client: object
) -> None:
    result = _run(
        "worker", TICDC_SINK_TOPICS=unique, TICDC_SINK_GROUP=unique, TICDC_SINK_WEB_PORT="0"
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"ticdc-sink worker: TICDC_SINK_TOPICS: topic {unique!r} not found"
    )
    assert "Traceback" not in result.stderr


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(found.choices)


def test_the_readme_says_for_every_command_what_it_does_when_a_service_is_down() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("\n## Operations\n", 1)[1].split("\n## ", 1)[0]
    # The table's first cells: `status`, `deadletters list|show|export|purge`, ...
    rows = [
        re.split(r"(?<!\\)\|", line)[1]  # an escaped \| stays in its cell
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    named = {word for cell in rows for word in re.findall(r"[a-z][a-z-]+", cell)}
    commands = _subcommands(build_parser())
    actions = set(_subcommands(commands["deadletters"]))
    assert set(commands) - named == set()
    assert actions - named == set()
