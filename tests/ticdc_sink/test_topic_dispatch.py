"""`produce --topic-dispatcher`'s routing against what TiCDC's own code wrote
(shared/conformance/ticdc_encoded_topics: the topic and partitions of every DDL, the topics of
the checkpoint after it, each table's topic, the topics still getting the last checkpoint), and
the messages `produce` routes for a workload of the same shape."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from core.model import DDLEvent, Op, Resolved, RowChange, column_type
from spark_sink.db.connection import connect
from streams.codecs import codec_for
from tests.ticdc_sink.pipelines import (
    applied_resolved_ts,
    assert_replicated,
    pipeline_env,
    pipeline_running,
    wait_for,
)
from ticdc_sink.produce import routed_messages
from ticdc_sink.scenario import KEY, NULLABLE, Transaction
from ticdc_sink.topic_dispatch import TopicDispatcher, TopicRouter, substitute

STREAMS = {"open": "open", "canal-json": "canal-json", "avro": "avro"}
_NAME = r"`((?:[^`]|``)+)`"


@pytest.fixture(scope="module")
def streams(conformance: Path) -> Path:
    folder = conformance / "ticdc_encoded_topics"
    assert folder.is_dir(), f"{folder} is missing"
    return folder


def _names(query: str) -> tuple[tuple[str, str], tuple[str, str] | None]:
    """The (schema, table) a conformance DDL makes or changes ('' table for a database's), and
    for a RENAME the old name."""
    if query.startswith("DROP TABLE "):
        # TiCDC's rebuilt, unescaped "DROP TABLE `%s`.`%s`".
        schema, table = query[len("DROP TABLE `") : -1].split("`.`", 1)
        return (schema, table), None
    names = [
        (a.replace("``", "`"), b.replace("``", "`"))
        for a, b in re.findall(_NAME + r"\." + _NAME, query)
    ]
    if query.startswith("RENAME TABLE"):
        return names[1], names[0]
    if names:
        return names[0], None
    (schema,) = re.findall(_NAME, query)
    return (schema, ""), None


@pytest.mark.parametrize("protocol", list(STREAMS))
def test_the_router_routes_ddl_and_checkpoints_as_ticdc_did(protocol: str, streams: Path) -> None:
    meta = orjson.loads((streams / f"{STREAMS[protocol]}.meta.json").read_bytes())
    router = TopicRouter(meta["default_topic"], TopicDispatcher.TABLE, meta["partitions"], protocol)
    for ddl in meta["ddls"]:
        # The checkpoint after a DDL goes to the tables from before it.
        assert set(router.checkpoint_topics()) == set(ddl["checkpoint_topics_after"]), ddl
        (schema, table), before = _names(ddl["query"])
        event = DDLEvent(ddl["commit_ts"], schema, table or None, ddl["query"], 0)
        # The Avro meta does not list a DDL's partitions: its stream has each DDL on all 3.
        partitions = ddl.get("partitions", list(range(meta["partitions"])))
        assert router.ddl(event, before) == (ddl["topic"], partitions), ddl
    last = {
        t
        for t, v in meta["per_topic"].items()
        if v["last_checkpoint_ts"] == meta["final_resolved_ts"]
    }
    assert set(router.checkpoint_topics()) == last
    for line in meta["table_topics"]:
        name, topic = line.split(" -> ")
        schema, table = name.split(".", 1)
        assert router.topic_of(schema, table) == topic


def test_a_topic_name_keeps_only_kafkas_characters() -> None:
    assert substitute("p_{schema}_{table}", "db", "we`ird tab") == "p_db_we_ird_tab"
    assert substitute("p_{schema}", "d.b-1", "x") == "p_d.b-1"
    assert substitute("{schema}", ".", "") == "_"
    assert len(substitute("{table}", "", "x" * 300)) == 249


COLUMNS = {"id": column_type(3, KEY), "v": column_type(15, NULLABLE)}


def _row(ts: int, table: str, key: int) -> RowChange:
    return RowChange(ts, "db", table, Op.INSERT, COLUMNS, {"id": key, "v": "x"}, None)


def _ddl(ts: int, table: str | None, query: str, action: int) -> Transaction:
    return Transaction(ts, ddl=DDLEvent(ts, "db", table, query, action))


HISTORY = [
    _ddl(10, None, "CREATE DATABASE `db`", 1),
    _ddl(20, "a", "CREATE TABLE `db`.`a` (id INT PRIMARY KEY, v TEXT)", 3),
    _ddl(30, "b", "CREATE TABLE `db`.`b` (id INT PRIMARY KEY, v TEXT)", 3),
    Transaction(40, rows=[_row(40, "a", 1), _row(40, "b", 1)]),
    _ddl(50, "a", "TRUNCATE TABLE `db`.`a`", 11),
    _ddl(60, "b", "DROP TABLE `db`.`b`", 4),
    Transaction(70, rows=[_row(70, "a", 2)]),
]


def _places(messages: list[tuple[int, Any]], protocol: str) -> dict[Any, set[tuple[str, int]]]:
    """Per kind of event (row table, DDL query, checkpoint ts): the (topic, partition)s."""
    decoders: dict[tuple[str, int], Any] = {}
    seen: dict[Any, set[tuple[str, int]]] = defaultdict(set)
    for partition, message in messages:
        place = (message.topic, partition)
        decoder = decoders.setdefault(place, codec_for(protocol))
        for event in decoder.decode(message.key, message.value):
            if isinstance(event, RowChange):
                seen[("row", event.table)].add(place)
            elif isinstance(event, DDLEvent):
                seen[("ddl", event.commit_ts)].add(place)
            elif isinstance(event, Resolved):
                seen[("checkpoint", event.commit_ts)].add(place)
    return seen


@pytest.mark.parametrize("protocol", ["open", "canal-json"])
def test_produce_routes_a_workload_as_ticdc_does(protocol: str) -> None:
    router = TopicRouter("p", TopicDispatcher.TABLE, 2, protocol)
    messages, final = routed_messages(HISTORY, 2, 1, _dispatcher(), None, router)
    assert final == 70
    seen = _places(messages, protocol)
    every = {0} if protocol == "canal-json" else {0, 1}

    def on(*topics: str, parts: set[int] = {0, 1}) -> set[tuple[str, int]]:  # noqa: B006
        return {(topic, p) for topic in topics for p in parts}

    assert seen[("ddl", 10)] == on("p", parts=every)  # a database's DDL: the default topic
    assert seen[("ddl", 20)] == on("p_db_a", parts=every)  # CREATE TABLE: its own new topic
    assert seen[("checkpoint", 20)] == on("p")  # after it: the tables from before it
    assert seen[("checkpoint", 30)] == on("p", "p_db_a")
    assert seen[("ddl", 50)] == on("p_db_a", parts=every)
    assert seen[("ddl", 60)] == on("p_db_b", parts=every)  # DROP: the table's own topic
    assert seen[("checkpoint", 60)] == on("p", "p_db_a", "p_db_b")  # its last
    assert seen[("checkpoint", 70)] == on("p", "p_db_a")  # b is gone: its topic stops
    # Every row of a table on one partition of its topic.
    assert len(seen[("row", "a")]) == 1 and {t for t, _ in seen[("row", "a")]} == {"p_db_a"}
    assert {t for t, _ in seen[("row", "b")]} == {"p_db_b"}


@pytest.mark.parametrize("protocol", ["open", "canal-json"])
def test_a_drop_database_goes_to_the_default_topic_and_its_tables_topics_stop(
    protocol: str,
) -> None:
    history = [
        *HISTORY,
        _ddl(80, None, "DROP DATABASE `db`", 2),
        _ddl(90, None, "CREATE DATABASE `db`", 1),
        _ddl(100, "a", "CREATE TABLE `db`.`a` (id INT PRIMARY KEY, v TEXT)", 3),
        Transaction(110, rows=[_row(110, "a", 3)]),
    ]
    router = TopicRouter("p", TopicDispatcher.TABLE, 2, protocol)
    messages, final = routed_messages(history, 2, 1, _dispatcher(), None, router)
    assert final == 110
    seen = _places(messages, protocol)
    every = {0} if protocol == "canal-json" else {0, 1}
    assert seen[("ddl", 80)] == {("p", p) for p in every}
    # The checkpoint after it: the tables from before it, the last one a's topic gets...
    assert seen[("checkpoint", 80)] == {(t, p) for t in ("p", "p_db_a") for p in (0, 1)}
    assert seen[("checkpoint", 90)] == {("p", 0), ("p", 1)}
    # ... until a CREATE TABLE of the name writes to it again.
    assert seen[("ddl", 100)] == {("p_db_a", p) for p in every}
    assert seen[("checkpoint", 110)] == {(t, p) for t in ("p", "p_db_a") for p in (0, 1)}


def test_a_rename_goes_to_the_old_names_topic_and_moves_the_checkpoints() -> None:
    router = TopicRouter("p", TopicDispatcher.TABLE, 3, "open")
    router.ddl(DDLEvent(1, "db", "t", "CREATE TABLE `db`.`t` (a INT)", 3))
    rename = DDLEvent(2, "db", "u", "RENAME TABLE `db`.`t` TO `db`.`u`", 14)
    assert router.ddl(rename, ("db", "t")) == ("p_db_t", [0, 1, 2])
    assert router.checkpoint_topics() == ["p", "p_db_u"]
    router.ddl(DDLEvent(3, "db", None, "DROP DATABASE `db`", 2))
    assert router.checkpoint_topics() == ["p"]


def test_without_a_topic_dispatcher_everything_goes_to_the_default_topic() -> None:
    router = TopicRouter("p", TopicDispatcher.NONE, 2, "canal-json")
    assert router.ddl(DDLEvent(1, "db", "t", "CREATE TABLE `db`.`t` (a INT)", 3)) == ("p", [0])
    assert router.topic_of("db", "t") == "p"
    assert router.checkpoint_topics() == ["p"]


def _dispatcher() -> Any:
    from ticdc_sink.dispatchers import Dispatcher

    return Dispatcher.DEFAULT


# Every protocol `produce` writes that TiCDC routes by table (its topic dispatcher).
PROTOCOLS = ["open", "canal-json", "craft", "simple", "simple-avro", "debezium", "avro"]


def _routed_env(
    pipeline: Settings, unique: str, protocol: str, request: pytest.FixtureRequest
) -> dict[str, str]:
    """A worker's and a sink's environment for the topics `produce --topic-dispatcher` writes:
    the pattern and the default topic."""
    env = pipeline_env(
        pipeline.updated({"topics": ()}),
        protocol,
        TICDC_SINK_TOPICS_PATTERN=f"{unique}_.+",
        TICDC_SINK_DEFAULT_TOPIC=unique,
        # TiCDC's Debezium encoder writes no checkpoints: quiet partitions resolve.
        **({"TICDC_SINK_RESOLVE_WHEN_IDLE": "2"} if protocol == "debezium" else {}),
    )
    if protocol == "avro":
        env["TICDC_SINK_SCHEMA_REGISTRY"] = request.getfixturevalue("schema_registry_url")
    return env


def _produce(
    env: dict[str, str], unique: str, protocol: str, transactions: int, expected: Path
) -> int:
    """`produce --topic-dispatcher {schema}_{table} --table-changes`; its final resolved ts."""
    done = subprocess.run(
        [
            sys.executable, "-m", "ticdc_sink", "produce", "--protocol", protocol,
            "--topic", unique, "--schema", unique, "--partitions", "2",
            "--transactions", str(transactions), "--topic-dispatcher", "{schema}_{table}",
            "--table-changes", "--expected", str(expected),
        ],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"to {unique} and the topics {unique}_{{schema}}_{{table}}" in done.stdout
    found = re.search(r"final resolved ts (\d+)", done.stdout)
    assert found, done.stdout
    return int(found.group(1))


def _assert_replicated_with_tables_gone(pipeline: Settings, unique: str, expected: Path) -> None:
    """Row-exact, and no table left that a DROP TABLE, a RENAME or the DROP DATABASE took away
    (verify reads only the tables expected)."""
    assert_replicated(pipeline, expected)
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA IN (%s, %s)",
            (unique, f"{unique}_b"),
        )
        tables = {f"{schema}.{table}" for schema, table in cursor.fetchall()}
    assert tables == set(orjson.loads(expected.read_bytes())), tables


# On TiDB, which the sink writes alike whatever the protocol, one protocol of each way DDL and
# checkpoints reach a table's topic: every partition (Open, Avro) or the first (Canal-JSON).
ON_TIDB = {"open", "canal-json", "avro"}


@pytest.mark.integration
@pytest.mark.parametrize(
    ("downstream_settings", "protocol"),
    [("mariadb", protocol) for protocol in PROTOCOLS]
    + [("tidb", protocol) for protocol in PROTOCOLS if protocol in ON_TIDB],
    indirect=["downstream_settings"],
)
def test_a_stream_produce_routes_to_topics_replicates_with_the_default_topic(
    protocol: str,
    pipeline: Settings,
    unique: str,
    tmp_path: Path,
    topics_deleted: Any,
    request: pytest.FixtureRequest,
) -> None:
    """Workers and a sink started first, on the pattern and the default topic; `produce
    --topic-dispatcher` then creates the database's topic and each table's while they run, with
    a RENAME, a TRUNCATE, a DROP and a CREATE of the dropped table with another layout, and a
    second database dropped (its tables' topics then get no checkpoint) and made again with one
    of its tables, in another layout."""
    expected = tmp_path / "expected.json"
    env = _routed_env(pipeline, unique, protocol, request)
    with pipeline_running(env) as processes:
        final = _produce(env, unique, protocol, 80, expected)
        wait_for(lambda: applied_resolved_ts(pipeline) >= final, "the workload applied", 120)
        assert all(process.poll() is None for process in processes)
    _assert_replicated_with_tables_gone(pipeline, unique, expected)


# The SIGKILL test on TiDB too, for a protocol of each codec family: Open's JSON batches (with
# the native decoder) and Avro's registry.
KILLED_ON_TIDB = {"open", "avro"}


@pytest.mark.integration
@pytest.mark.parametrize(
    ("downstream_settings", "protocol"),
    [("mariadb", protocol) for protocol in PROTOCOLS]
    + [("tidb", protocol) for protocol in PROTOCOLS if protocol in KILLED_ON_TIDB],
    indirect=["downstream_settings"],
)
def test_a_routed_stream_with_table_changes_survives_killed_workers_and_sinks(
    protocol: str,
    pipeline: Settings,
    unique: str,
    tmp_path: Path,
    topics_deleted: Any,
    redis_client: Any,
    request: pytest.FixtureRequest,
) -> None:
    from tests.ticdc_sink.test_ticdc_topic_streams import _replicate

    expected = tmp_path / "expected.json"
    env = _routed_env(pipeline, unique, protocol, request)
    final = _produce(env, unique, protocol, 300, expected)
    chooser = random.Random(2)
    kills = sorted(chooser.uniform(0.5, 3.0) for _ in range(3))
    # A kill restarts a process, which puts the end off: the first always comes before it, the
    # later ones as the machine's speed has it.
    assert _replicate(env, pipeline, final, redis_client, kills) >= 1
    _assert_replicated_with_tables_gone(pipeline, unique, expected)
