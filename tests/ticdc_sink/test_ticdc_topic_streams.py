"""TiCDC's own streams of a changefeed with a topic per table (shared/conformance/
ticdc_encoded_topics: CREATE DATABASE on the default topic, RENAME and DROP TABLE whose topics
then get no checkpoint, TRUNCATE, a second database, topics created mid-stream), replayed to
Kafka topic by topic and partition by partition as TiCDC wrote them, replicated by a worker on
TICDC_SINK_TOPICS_PATTERN + TICDC_SINK_DEFAULT_TOPIC and a sink, and compared row by row with the
workload's SQL run directly in the same server."""

from __future__ import annotations

import asyncio
import base64
import gzip
import random
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from core.model import RowChange
from spark_sink.db.connection import connect
from streams.codecs import KafkaMessage
from tests.ticdc_sink.pipelines import (
    ON_EVERY_SERVER,
    applied_resolved_ts,
    pipeline_env,
    spawn,
    stop,
)
from tests.ticdc_sink.test_ticdc_streams import _undecoded
from ticdc_sink.produce import send
from ticdc_sink.truth import differences, read_tables, run_workload

pytestmark = pytest.mark.integration

# From the last message sent to the checkpoint at the stream's last checkpoint, at most.
REPLICATION_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def streams(conformance: Path) -> Path:
    folder = conformance / "ticdc_encoded_topics"
    assert folder.is_dir(), f"{folder} is missing"
    return folder


def topic_messages(path: Path, prefix: str) -> list[tuple[int, KafkaMessage]]:
    """Each line of a stream file as (partition, message to its topic), in order; every topic
    renamed ``<prefix>_<topic>`` so that each run has topics of its own."""
    out = []
    with gzip.open(path, "rb") as lines:
        for line in lines:
            item = orjson.loads(line)
            key = base64.b64decode(item["k"]) if item["k"] is not None else None
            value = base64.b64decode(item["v"]) if item["v"] is not None else b""
            out.append((int(item["p"]), KafkaMessage(key, value, f"{prefix}_{item['topic']}")))
    return out


@pytest.fixture
def databases(pipeline: Settings, unique: str) -> Iterator[dict[str, str]]:
    """The streams' databases (their DDL names them) and this test's truth, dropped before and
    after."""
    names = [f"conf_{name}{suffix}" for name in ("open", "canal", "avro") for suffix in ("", "_b")]
    truth = f"{unique}_truth"

    def drop() -> None:
        with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
            for name in [*names, truth, f"{truth}_b"]:
                cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")

    drop()
    yield {"truth": truth}
    drop()


def _env(
    pipeline: Settings, protocol: str, meta: dict[str, Any], unique: str, **extra: str
) -> dict[str, str]:
    default = f"{unique}_{meta['default_topic']}"
    return pipeline_env(
        pipeline,
        protocol,
        TICDC_SINK_TOPICS="",
        TICDC_SINK_TOPICS_PATTERN=f"{default}_.+",
        TICDC_SINK_DEFAULT_TOPIC=default,
        **extra,
    )


def registered(
    messages: list[tuple[int, KafkaMessage]], meta: dict[str, Any], registry: Any, unique: str
) -> list[tuple[int, KafkaMessage]]:
    """``messages`` with each schema of the stream registered (under its subject, renamed as the
    topics are, in id order: a subject's later id is its next version) and every Confluent frame's
    id rewritten to the one the registry gave."""
    ids: dict[int, int] = {
        entry["id"]: registry.register(f"{unique}_{entry['subject']}", entry["schema"])
        for entry in sorted(meta["schemas"], key=lambda entry: entry["id"])
    }

    def framed(data: bytes | None) -> bytes | None:
        if not data or data[0] != 0:
            return data  # a DDL (1), a checkpoint (2), a tombstone, a null key
        old = int.from_bytes(data[1:5], "big")
        return b"\0" + ids[old].to_bytes(4, "big") + data[5:]

    return [(p, KafkaMessage(framed(m.key), framed(m.value) or b"", m.topic)) for p, m in messages]


def _replicate(
    env: dict[str, str],
    pipeline: Settings,
    final: int,
    redis_client: Any,
    kills: Sequence[float] = (),
) -> int:
    """A worker and a sink until the checkpoint reaches ``final``; at each of ``kills`` (seconds
    from the start) one of them, at random, SIGKILLed and started again. Returns the kills done
    (those due before the end)."""
    processes = {"worker": spawn("worker", env), "apply": spawn("apply", env)}
    chooser = random.Random(len(kills))
    started = time.monotonic()
    pending = sorted(kills)
    done = 0
    try:
        deadline = started + REPLICATION_TIMEOUT_S
        while (checkpoint := applied_resolved_ts(pipeline)) < final:
            if pending and time.monotonic() - started >= pending[0]:
                pending.pop(0)
                name = chooser.choice(sorted(processes))
                stop(processes[name], signal.SIGKILL)
                processes[name] = spawn(name, env)
                done += 1
            for process in processes.values():
                assert process.poll() is None, f"a process exited ({process.args!r})"
            undecoded = _undecoded(redis_client, pipeline.group)
            assert not undecoded, f"{len(undecoded)} messages did not decode: {undecoded[0]}"
            assert time.monotonic() < deadline, f"checkpoint {checkpoint} never reached {final}"
            time.sleep(0.25)
    finally:
        for process in processes.values():
            stop(process)
    return done


def _assert_matches_truth(
    pipeline: Settings, workload: Path, meta: dict[str, Any], truth: str
) -> None:
    run_workload(pipeline, workload, truth)
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        for replica, expected in ((meta["db"], truth), (meta["db2"], f"{truth}_b")):
            report = differences(read_tables(cursor, expected), read_tables(cursor, replica))
            assert not report, "\n".join(report)
        cursor.execute(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
            (meta["db"],),
        )
        tables = sorted(row[0] for row in cursor.fetchall())
    assert "t_nc" not in tables and "we`ird tab" not in tables and "t_nc_renamed" in tables


def _run(
    protocol: str,
    file: str,
    streams: Path,
    pipeline: Settings,
    unique: str,
    databases: dict[str, str],
    redis_client: Any,
    kills: Sequence[float],
    registry: tuple[str, Any] | None = None,
) -> None:
    started = time.monotonic()
    meta = orjson.loads((streams / f"{file}.meta.json").read_bytes())
    messages = topic_messages(streams / f"{file}.jsonl.gz", unique)
    assert len(messages) == meta["messages"]
    extra = {}
    if registry is not None:
        url, client = registry
        messages = registered(messages, meta, client, unique)
        extra["TICDC_SINK_SCHEMA_REGISTRY"] = url
    topics = [f"{unique}_{topic}" for topic in meta["topics"]]
    asyncio.run(send(pipeline, topics[0], meta["partitions"], messages, topics))
    env = _env(pipeline, protocol, meta, unique, **extra)
    done = _replicate(env, pipeline, meta["final_resolved_ts"], redis_client, kills)
    # A kill restarts a process, which puts the end off: the first always comes before it, the
    # later ones as the machine's speed has it.
    assert done or not kills, f"none of {len(kills)} kills came before the end"
    replicated = time.monotonic()
    workload = streams / (
        "workload-avro.sql.jsonl.gz" if file == "avro" else "workload.sql.jsonl.gz"
    )
    _assert_matches_truth(pipeline, streams / workload, meta, databases["truth"])
    print(f"{file}: replicated in {replicated - started:.1f} s ({len(kills)} kills)")


@ON_EVERY_SERVER
@pytest.mark.parametrize(("protocol", "file"), [("open", "open"), ("canal-json", "canal-json")])
def test_a_topic_per_table_stream_replicates_past_drop_and_rename(
    protocol: str,
    file: str,
    streams: Path,
    pipeline: Settings,
    unique: str,
    databases: dict[str, str],
    redis_client: Any,
    topics_deleted: Any,
) -> None:
    _run(protocol, file, streams, pipeline, unique, databases, redis_client, [])


@ON_EVERY_SERVER
def test_an_avro_topic_per_table_stream_replicates_past_drop_and_rename(
    streams: Path,
    pipeline: Settings,
    unique: str,
    databases: dict[str, str],
    redis_client: Any,
    topics_deleted: Any,
    schema_registry_url: str,
    schema_registry: Any,
) -> None:
    registry = (schema_registry_url, schema_registry)
    _run("avro", "avro", streams, pipeline, unique, databases, redis_client, [], registry)


def test_killed_workers_and_sinks_lose_nothing_past_drop_and_rename(
    streams: Path,
    pipeline: Settings,
    unique: str,
    databases: dict[str, str],
    redis_client: Any,
    topics_deleted: Any,
) -> None:
    # Within the first seconds: on a quiet machine the whole stream replicates in about 3 s
    # after the processes start, on a loaded one in 15.
    chooser = random.Random(38)
    kills = sorted(chooser.uniform(0.5, 3.0) for _ in range(4))
    _run("open", "open", streams, pipeline, unique, databases, redis_client, kills)


def test_the_avro_stream_decodes_with_its_schemas_registered_anew(streams: Path) -> None:
    """:func:`registered` over a registry that hands out other ids than the generator's: every
    message of the Avro stream decodes, its rows as TiCDC encoded them."""
    from streams.codecs.avro import AvroCodec
    from streams.codecs.avro.registry import MemoryRegistry

    meta = orjson.loads((streams / "avro.meta.json").read_bytes())
    registry = MemoryRegistry()
    registry.register("other", '"string"')  # every id of the stream shifts by one
    messages = registered(topic_messages(streams / "avro.jsonl.gz", "x"), meta, registry, "x")
    codecs: dict[tuple[str | None, int], AvroCodec] = {}
    rows = 0
    for partition, message in messages:
        codec = codecs.setdefault((message.topic, partition), AvroCodec(registry))
        events = codec.decode(message.key, message.value)
        rows += sum(1 for event in events if isinstance(event, RowChange))
    assert rows == sum(count for table in meta["encoded_rows"].values() for count in table.values())
