"""TiCDC's own encoded streams (shared/conformance/ticdc_encoded) replicated end to end by a
`worker` and an `apply` process into MariaDB and into TiDB, then every table compared row by row
with the truth: the stream's SQL workload run directly in the same server (so both sides are read
back by one server's functions, and TiDB's truth is what the upstream TiDB held)."""

from __future__ import annotations

import asyncio
import base64
import gzip
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from core.staging import Keys
from spark_sink.db.connection import connect
from streams.codecs import KafkaMessage
from tests.ticdc_sink.pipelines import (
    ON_EVERY_SERVER,
    applied_resolved_ts,
    pipeline_env,
    pipeline_running,
    spawn,
    stop,
)
from ticdc_sink.produce import send
from ticdc_sink.truth import TableRows, differences, read_tables, run_workload

pytestmark = pytest.mark.integration

PROTOCOLS = ["open", "craft", "canal-json", "simple", "simple-avro", "debezium"]
# From the stream's last message to the checkpoint reaching its last resolved ts, at most.
REPLICATION_TIMEOUT_S = 240
# TiCDC's Craft encoder corrupts FLOAT values (see the folder's README): `c_f` cannot match.
# Its Debezium encoder writes DECIMAL as a double (`c_dec`, `n`: DECIMAL(10,2) survives; a
# DECIMAL(65,30) rounded up past its range is refused downstream) and a NULL in a column with a
# DEFAULT as the default (`c_new`): see the README's Debezium notes.
KNOWN_CORRUPT = {
    "craft": {"t_types": {"c_f"}},
    "debezium": {"t_types": {"c_dec", "c_new"}, "t_comp": {"n"}},
}
# Streams without watermarks (TiCDC's Debezium encoder writes none): the worker resolves each
# partition once it is quiet at its end for this many seconds, up to the stream's last commit ts.
RESOLVE_WHEN_IDLE = {"debezium": "2"}


@pytest.fixture(scope="module")
def streams(conformance: Path) -> Path:
    folder = conformance / "ticdc_encoded"
    assert folder.is_dir(), f"{folder} is missing"
    return folder


def stream_messages(path: Path) -> list[tuple[int, KafkaMessage]]:
    """Each line of a stream file as (partition, message), in order."""
    out = []
    with gzip.open(path, "rb") as lines:
        for line in lines:
            item = orjson.loads(line)
            key = base64.b64decode(item["k"]) if item["k"] is not None else None
            value = base64.b64decode(item["v"]) if item["v"] is not None else b""
            out.append((int(item["p"]), KafkaMessage(key, value)))
    return out


@pytest.fixture
def databases(streams: Path, unique: str, pipeline: Settings) -> Iterator[dict[str, str]]:
    """Per protocol, the stream's own database name (its DDL names it), emptied before and after,
    and a truth database of this test's own."""
    names = {
        protocol: orjson.loads((streams / f"{protocol}.meta.json").read_bytes())["db"]
        for protocol in PROTOCOLS
    }
    truth = f"{unique}_truth"

    def drop() -> None:
        with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
            for name in [*names.values(), truth]:
                cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")

    drop()
    yield {**names, "truth": truth}
    drop()


def replicate(
    pipeline: Settings,
    protocol: str,
    meta: dict[str, Any],
    partitions: int,
    messages: list[tuple[int, KafkaMessage]],
    redis_client: Any,
) -> None:
    """Produce ``messages`` to the pipeline's topic of ``partitions`` partitions and run a worker
    and a sink until the checkpoint reaches the end of the stream ``meta`` describes."""
    group = pipeline.group
    asyncio.run(send(pipeline, group, partitions, messages))
    idle = RESOLVE_WHEN_IDLE.get(protocol)
    final = meta["last_commit_ts"] if idle else meta["final_resolved_ts"]
    env = pipeline_env(pipeline, protocol, TICDC_SINK_ON_ROW_ERROR="deadletter")
    if idle:
        env["TICDC_SINK_RESOLVE_WHEN_IDLE"] = idle
    with pipeline_running(env) as processes:
        deadline = time.monotonic() + REPLICATION_TIMEOUT_S
        while (checkpoint := applied_resolved_ts(pipeline)) < final:
            for process in processes:
                assert process.poll() is None, f"a process exited ({process.args!r})"
            # A message of TiCDC's own encoder that does not decode is a codec bug: say so now.
            undecoded = _undecoded(redis_client, group)
            assert not undecoded, f"{len(undecoded)} messages did not decode: {undecoded[0]}"
            assert time.monotonic() < deadline, f"checkpoint {checkpoint} never reached {final}"
            time.sleep(0.25)


def assert_matches_truth(
    pipeline: Settings,
    protocol: str,
    streams: Path,
    databases: dict[str, str],
    redis_client: Any,
) -> int:
    """Run the workload's SQL into the truth database and assert the replica equals it row by
    row, but for the rows the server refused (only values TiCDC's encoders corrupted); returns
    how many were refused."""
    run_workload(pipeline, streams / "workload.sql.jsonl.gz", databases["truth"])
    refused = _dead_letters(redis_client, pipeline.group)
    ignored = KNOWN_CORRUPT.get(protocol, {})
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        truth = read_tables(cursor, databases["truth"], ignored)
        replica = read_tables(cursor, databases[protocol], ignored)
    for letter in refused:
        # A row the server refused is missing downstream, or stale; the rest must match.
        table = letter["table"].removeprefix(databases[protocol] + ".")
        for tables in (truth, replica):
            _leave_out(tables[table], orjson.loads(letter["key"]))
    report = differences(truth, replica)
    assert not report, "\n".join(report)
    assert {(r["table"], r["column"]) for r in refused} <= {
        (f"{databases[protocol]}.{table}", column)
        for table, columns in ignored.items()
        for column in columns
    }
    return len(refused)


@ON_EVERY_SERVER
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ticdc_stream_replicates_row_exact(
    protocol: str,
    streams: Path,
    pipeline: Settings,
    databases: dict[str, str],
    redis_client: Any,
) -> None:
    started = time.monotonic()
    meta = orjson.loads((streams / f"{protocol}.meta.json").read_bytes())
    messages = stream_messages(streams / f"{protocol}.jsonl.gz")
    assert len(messages) == meta["messages"]
    replicate(pipeline, protocol, meta, meta["partitions"], messages, redis_client)
    replicated = time.monotonic()
    refused = assert_matches_truth(pipeline, protocol, streams, databases, redis_client)
    print(
        f"{protocol}: replicated in {replicated - started:.1f} s, "
        f"truth and comparison in {time.monotonic() - replicated:.1f} s; "
        f"{refused} rows refused by the server"
    )


def _dead_letters(redis_client: Any, group: str) -> list[dict[str, str]]:
    """The rows the sink dead-lettered (the worker's undecodable messages have no ``table``)."""
    entries = redis_client.xrange(Keys(group).dead_letters)
    return [
        {k.decode(): v.decode() for k, v in fields.items()}
        for _, fields in entries
        if b"table" in fields
    ]


def _undecoded(redis_client: Any, group: str) -> list[str]:
    """The worker's dead letters (messages that did not decode): their errors."""
    entries = redis_client.xrange(Keys(group).dead_letters)
    return [
        f"partition {fields[b'partition'].decode()} offset {fields[b'offset'].decode()}: "
        + fields[b"error"].decode()
        for _, fields in entries
        if b"offset" in fields
    ]


def _leave_out(table: TableRows, key: dict[str, Any]) -> None:
    places = {table.columns.index(name): str(value) for name, value in key.items()}
    for row in [r for r in table.rows if all(r[i] == v for i, v in places.items())]:
        del table.rows[row]


@ON_EVERY_SERVER
def test_a_row_the_downstream_refuses_stops_the_sink_with_one_message(
    streams: Path, pipeline: Settings, unique: str, databases: dict[str, str]
) -> None:
    meta = orjson.loads((streams / "craft.meta.json").read_bytes())
    asyncio.run(
        send(pipeline, unique, meta["partitions"], stream_messages(streams / "craft.jsonl.gz"))
    )
    env = pipeline_env(pipeline, "craft")  # TICDC_SINK_ON_ROW_ERROR=stop, the default
    worker = spawn("worker", env)
    try:
        sink = subprocess.run(
            [sys.executable, "-m", "ticdc_sink", "apply"],
            env=env,
            capture_output=True,
            text=True,
            timeout=REPLICATION_TIMEOUT_S,
        )
    finally:
        stop(worker)
    assert sink.returncode == 1, sink.stderr
    assert "Traceback" not in sink.stderr
    (line,) = [line for line in sink.stderr.splitlines() if "refuses" in line]
    print(line)
    assert line.startswith("ticdc-sink apply: the downstream refuses a row of oracle_craft.t_types")
    assert "(key id=" in line and "column c_f;" in line
    # MariaDB: "Incorrect double value" or "Out of range value"; TiDB: "Incorrect float value".
    refusal = r"\): (1366 Incorrect (double|float) value|1264 Out of range value)"
    assert re.search(refusal, line), line
    refused_ts = int(re.search(r"commit ts (\d+)", line).group(1))  # type: ignore[union-attr]
    # The batch holding the refused row was not applied, nor anything after it.
    assert 0 < applied_resolved_ts(pipeline) < refused_ts
