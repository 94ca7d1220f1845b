"""`ticdc-sink deadletters` against the real Redis (and MariaDB for the checkpoint check)."""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from config.settings import OnError
from core.model import Op, RowChange, column_type
from core.staging import Staging, TopicPartition
from spark_sink.db.checkpoint import CheckpointTable
from streams.codecs import codec_for
from streams.worker.stager import MessageStager
from tests.streams.worker.records import stage_batch
from ticdc_sink.cli import main

pytestmark = pytest.mark.integration

TP = TopicPartition("orders", 1)
TS = 449_000_000_000_000_100


@pytest.fixture
def pipeline(
    staging: Staging, monkeypatch: pytest.MonkeyPatch, mariadb_connect: Any
) -> Iterator[Staging]:
    """A pipeline of its own whose dead letters hold one bad copy of a valid row message;
    main() in this process, its signal handlers put back afterwards."""
    monkeypatch.setenv("TICDC_SINK_GROUP", staging.pipeline)
    monkeypatch.setenv("TICDC_SINK_META_DB", f"{staging.pipeline}_meta")
    monkeypatch.setenv("TICDC_SINK_PROTOCOL", "open")
    staging.set_partition_count(TP.topic, 2)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    root = logging.getLogger()
    log_handlers = list(root.handlers)
    yield staging
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    root.handlers[:] = log_handlers
    with mariadb_connect() as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{staging.pipeline}_meta`")


def _rows() -> list[RowChange]:
    types = {"id": column_type(3, 10)}
    return [RowChange(TS + i, "shop", "orders", Op.INSERT, types, {"id": i}, None) for i in (1, 2)]


def _dead_letter(staging: Staging, tmp_path: Path) -> str:
    """Dead-letter a cut copy of a valid message; its fix (the whole value) goes to a file."""
    (good,) = codec_for("open").encode(_rows())
    stager = MessageStager(staging, codec_for("open"), OnError.DEADLETTER)
    stage_batch(stager, [(TP, 5, good.key, good.value[:-3])])
    (tmp_path / "key").write_bytes(good.key)
    (tmp_path / "value").write_bytes(good.value)
    (letter,) = staging.dead_letters.entries()
    return letter.id


def test_list_show_and_export(
    pipeline: Staging, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = _dead_letter(pipeline, tmp_path)
    assert main(["deadletters", "list"]) == 0
    out = capsys.readouterr().out
    assert f"{pipeline.pipeline}: 1 dead letters" in out
    assert entry in out and "orders:1@5" in out
    assert main(["deadletters", "show", entry]) == 0
    out = capsys.readouterr().out
    assert "orders:1 offset 5" in out and "error      open:" in out
    assert main(["deadletters", "export", "--output", str(tmp_path / "out.jsonl")]) == 0
    (line,) = (tmp_path / "out.jsonl").read_text().splitlines()
    assert orjson.loads(line)["offset"] == 5


def test_replay_of_a_fixed_message_stages_its_rows_and_drops_the_dead_letter(
    pipeline: Staging, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = _dead_letter(pipeline, tmp_path)
    capsys.readouterr()
    # As it stands it still does not decode: one line, nothing changes.
    assert main(["deadletters", "replay", entry]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "still does not decode" in err
    fixed = ["--key", str(tmp_path / "key"), "--value", str(tmp_path / "value")]
    assert main(["deadletters", "replay", entry, *fixed]) == 0
    assert "staged 2 rows of orders:1 offset 5" in capsys.readouterr().out
    assert pipeline.dead_letters.count() == 0
    released = [e for e in pipeline.release(0, TS + 10) if isinstance(e, RowChange)]
    assert released == _rows()


def test_replay_is_refused_while_a_sink_runs_or_once_the_downstream_is_past_it(
    redis_client: redis.Redis,
    pipeline: Staging,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    mariadb_connect: Any,
) -> None:
    entry = _dead_letter(pipeline, tmp_path)
    fixed = ["--key", str(tmp_path / "key"), "--value", str(tmp_path / "value")]
    redis_client.set(pipeline.keys.leader, "someone")
    assert main(["deadletters", "replay", entry, *fixed]) == 1
    assert "stop it before a replay" in capsys.readouterr().err
    redis_client.delete(pipeline.keys.leader)
    with mariadb_connect() as conn, conn.cursor() as cursor:
        table = CheckpointTable(f"{pipeline.pipeline}_meta", pipeline.pipeline)
        table.create(cursor)
        table.advance(cursor, TS + 5, 1, {})
    assert main(["deadletters", "replay", entry, *fixed]) == 1
    err = capsys.readouterr().err
    assert "past the message's commit ts" in err and "2024-" in err
    assert pipeline.dead_letters.count() == 1
    assert not any(isinstance(e, RowChange) for e in pipeline.release(0, TS + 10))


def test_purge_asks_unless_told_yes(
    pipeline: Staging, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    _dead_letter(pipeline, tmp_path)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False, raising=False)
    assert main(["deadletters", "purge"]) == 2
    assert "pass --yes" in capsys.readouterr().err
    assert pipeline.dead_letters.count() == 1
    assert main(["deadletters", "purge", "--yes"]) == 0
    assert pipeline.dead_letters.count() == 0


def test_a_replay_still_waiting_for_its_schema_is_refused_in_one_line(
    pipeline: Staging,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entry = _dead_letter(pipeline, tmp_path)
    capsys.readouterr()
    # A Simple DML whose table schema Redis does not hold: the hold signal, refused by name.
    monkeypatch.setenv("TICDC_SINK_PROTOCOL", "simple")
    (tmp_path / "dml").write_bytes(
        b'{"version":1,"database":"shop","table":"orders","type":"INSERT","commitTs":5,'
        b'"schemaVersion":7,"data":{"id":"1"}}'
    )
    assert main(["deadletters", "replay", entry, "--value", str(tmp_path / "dml")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "still does not decode" in err and "no table schema yet for shop.orders" in err
    assert pipeline.dead_letters.count() == 1
