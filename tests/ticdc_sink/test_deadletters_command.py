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
from core.redis_client import RedisClient
from core.staging import Staging, TopicPartition
from spark_sink.db.checkpoint import CheckpointTable
from streams.codecs import codec_for
from streams.worker.stager import MessageStager
from tests.conftest import REDIS_KINDS, redis_env, redis_of
from tests.streams.worker.records import stage_batch
from ticdc_sink.cli import main

pytestmark = pytest.mark.integration

TP = TopicPartition("orders", 1)
TS = 449_000_000_000_000_100


@pytest.fixture(params=REDIS_KINDS)
def redis_client(request: pytest.FixtureRequest, redis_client: RedisClient) -> RedisClient:
    """Each command on one Redis and on the Redis Cluster."""
    return redis_of(request, redis_client)


@pytest.fixture
def pipeline(
    staging: Staging,
    redis_client: RedisClient,
    monkeypatch: pytest.MonkeyPatch,
    mariadb_connect: Any,
) -> Iterator[Staging]:
    """A pipeline of its own whose dead letters hold one bad copy of a valid row message;
    main() in this process, its signal handlers put back afterwards."""
    for name, value in redis_env(redis_client).items():
        monkeypatch.setenv(name, value)
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
    assert "orders:1 offset 5" in out and "error      DecodeError: open:" in out
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
        b'{"version":1,"database":"shop","table":"orders","type":"INSERT","commitTs":5,"buildTs":5,'
        b'"schemaVersion":7,"data":{"id":"1"}}'
    )
    assert main(["deadletters", "replay", entry, "--value", str(tmp_path / "dml")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "still does not decode" in err and "no table schema yet for shop.orders" in err
    assert pipeline.dead_letters.count() == 1


def _row_letter(pipeline: Staging, cursor: Any, target: str, row: dict[str, Any]) -> str:
    """Dead-letter ``row`` of ``target`` as the sink does when the downstream refuses it."""
    from spark_sink.refused import RefusedRow, downstream_image

    key = {"id": row["id"]}
    before = downstream_image(cursor, target, key)
    refused = RefusedRow("shop", "t", key, "flag", TS, "4025 failed", row, target, before)
    pipeline.dead_letters.add_entries([refused.dead_letter()], 100)
    return pipeline.dead_letters.entries()[-1].id


def test_both_kinds_list_show_and_export_whole(
    pipeline: Staging,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    scratch_db: str,
    mariadb_connect: Any,
) -> None:
    message = _dead_letter(pipeline, tmp_path)
    with mariadb_connect() as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE `{scratch_db}`.t (id INT PRIMARY KEY, flag TINYINT)")
        row = _row_letter(pipeline, cursor, f"`{scratch_db}`.`t`", {"id": 7, "flag": 99})
    assert main(["deadletters", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "2 dead letters" in lines[0]
    assert lines[1].startswith(message) and " message  orders:1@5 " in lines[1]
    assert lines[2].startswith(row) and f' row      shop.t {{"id":7}} @{TS}' in lines[2]
    assert main(["deadletters", "show", row]) == 0
    shown = capsys.readouterr().out
    assert "kind       row" in shown and 'row        {"id":7,"flag":99}' in shown
    assert "before     null" in shown and "error      4025 failed" in shown
    assert main(["deadletters", "export"]) == 0
    first, second = map(orjson.loads, capsys.readouterr().out.splitlines())
    assert (first["kind"], first["offset"]) == ("message", 5)
    assert (second["kind"], second["row"], second["before"]) == ("row", {"id": 7, "flag": 99}, None)


def test_a_change_the_sink_cannot_apply_is_listed_with_its_message(
    pipeline: Staging, capsys: pytest.CaptureFixture[str]
) -> None:
    from spark_sink.plan import NO_NEW
    from spark_sink.unplannable import dead_letter_all

    types = {"id": column_type(3, 10)}
    found = RowChange(TS + 1, "shop", "orders", Op.INSERT, types, None, None)
    trimmed = RowChange(TS, "shop", "orders", Op.INSERT, types, None, None)
    pipeline.stage(TP, 5, [found])
    rule = NO_NEW.format(op="INSERT")
    dead_letter_all(pipeline, pipeline.pipeline, [(found, rule), (trimmed, rule)], 100)
    with_offset, unknown = (letter.id for letter in pipeline.dead_letters.entries())
    assert main(["deadletters", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f" row      shop.orders {{}} @{TS + 1} from orders:1@5  " in lines[1]
    assert f" row      shop.orders {{}} @{TS}  the sink cannot apply" in lines[2]
    assert main(["deadletters", "show", with_offset]) == 0
    assert "\nmessage    orders:1 offset 5\n" in capsys.readouterr().out
    assert main(["deadletters", "show", unknown]) == 0
    shown = capsys.readouterr().out
    assert "message" not in shown and f"(commit ts {TS}; offset unknown)" in shown
    assert main(["deadletters", "export"]) == 0
    first, second = map(orjson.loads, capsys.readouterr().out.splitlines())
    assert (first["topic"], first["partition"], first["offset"]) == ("orders", 1, 5)
    assert "offset" not in second and "topic" not in second


def test_a_row_letter_is_written_downstream_once_and_never_over_a_later_change(
    pipeline: Staging, capsys: pytest.CaptureFixture[str], scratch_db: str, mariadb_connect: Any
) -> None:
    target = f"`{scratch_db}`.`t`"
    with mariadb_connect() as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {target} (id INT PRIMARY KEY, flag TINYINT, b BLOB)")
        cursor.execute(f"INSERT INTO {target} VALUES (8, 1, NULL)")
        conn.commit()
        written = _row_letter(pipeline, cursor, target, {"id": 7, "flag": 99, "b": b"\x00\xff"})
        updated = _row_letter(pipeline, cursor, target, {"id": 8, "flag": 2, "b": None})
        superseded = _row_letter(pipeline, cursor, target, {"id": 9, "flag": 3, "b": None})
        # A later change of key 9 applied after its row was refused.
        cursor.execute(f"INSERT INTO {target} VALUES (9, 4, NULL)")
        conn.commit()
    assert main(["deadletters", "replay", written, "--keep"]) == 0
    assert capsys.readouterr().out.startswith('wrote the row of shop.t key {"id":7}')
    assert main(["deadletters", "replay", updated]) == 0
    assert capsys.readouterr().out.endswith(f"dead letter {updated} removed\n")
    # Again, the row it wrote is there now: written twice, it could undo a later change.
    assert main(["deadletters", "replay", written]) == 1
    assert "changed since the row was refused" in capsys.readouterr().err
    assert main(["deadletters", "replay", superseded]) == 1
    assert "changed since the row was refused" in capsys.readouterr().err
    with mariadb_connect() as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT id, flag, b FROM {target} ORDER BY id")
        assert cursor.fetchall() == ((7, 99, b"\x00\xff"), (8, 2, None), (9, 4, None))
    assert {e.id for e in pipeline.dead_letters.entries()} == {written, superseded}
