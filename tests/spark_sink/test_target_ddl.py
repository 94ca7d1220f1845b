"""The sink's DDL and schema drift against real MariaDB and Redis: where a DDL runs, what stops
the sink and how an operator gets past it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from prometheus_client import REGISTRY

from config.errors import DDLError, SchemaDriftError
from config.settings import OnDDLError, OnSchemaDrift, Settings
from core.model import ColumnFlag, DDLEvent, Op, RowChange, column_type
from core.staging import Staging, TopicPartition
from spark_sink.db.connection import connect
from spark_sink.db.tables import Column, tables_columns
from spark_sink.ddl.skip import request_skip_ddl
from spark_sink.loop import SinkLoop
from spark_sink.routing import Router
from spark_sink.target import Target

pytestmark = pytest.mark.integration

TP = TopicPartition("topic", 0)
TS = 449_100_000_000_000_000
PK = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
NULLABLE = int(ColumnFlag.NULLABLE)
COLUMNS = {"id": column_type(3, PK), "v": column_type(3, NULLABLE)}


class Upstream:
    """Stages DDL and rows at increasing offsets and commit ts, as one worker would."""

    def __init__(self, staging: Staging) -> None:
        self.staging = staging
        self.offset = 0
        self.ts = TS

    def ddl(self, schema: str, table: str | None, query: str) -> int:
        self.ts += 10
        event = DDLEvent(self.ts, schema, table, query, 0)
        self.staging.stage(TP, self.offset, [], [event], watermark=self.ts)
        self.offset += 1
        return self.ts

    def table_t(self, database: str) -> None:
        """``database`` and its table ``t`` (id, v) made upstream."""
        self.ddl(database, None, f"CREATE DATABASE `{database}`")
        self.ddl(database, "t", "CREATE TABLE t (id INT PRIMARY KEY, v INT)")

    def row(self, schema: str, table: str, values: dict[str, Any], columns: Any = None) -> int:
        self.ts += 10
        change = RowChange(self.ts, schema, table, Op.INSERT, columns or COLUMNS, values, None)
        self.staging.stage(TP, self.offset, [change], [], watermark=self.ts)
        self.offset += 1
        return self.ts


@pytest.fixture
def pipeline(settings: Settings, unique: str, redis_client: Any) -> Iterator[Any]:
    configured = settings.updated({"group": unique, "meta_db": f"{unique}_meta"})
    staging = Staging(redis_client, unique)
    staging.set_partition_count("topic", 1)
    yield configured, staging, Upstream(staging)
    for key in redis_client.scan_iter(staging.keys.pattern):
        redis_client.delete(key)
    with connect(configured, autocommit=True) as conn, conn.cursor() as cursor:
        for database in (f"{unique}_meta", f"{unique}_up", f"{unique}_replica"):
            cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")


def sink_for(settings: Settings, staging: Staging, **changes: Any) -> SinkLoop:
    configured = settings.updated(changes)
    router = Router(configured.sink.routes, configured.sink.skip_tables)
    return SinkLoop(configured, staging, Target(configured, router=router))


def query(settings: Settings, sql: str) -> list[tuple[Any, ...]]:
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(sql)
        return list(cursor.fetchall())


def tables_of(settings: Settings, database: str) -> set[str]:
    rows = query(
        settings,
        f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{database}'",
    )
    return {row[0] for row in rows}


def skipped(pipeline: str, reason: str) -> float:
    labels = {"pipeline": pipeline, "reason": reason}
    return REGISTRY.get_sample_value("ticdc_sink_ddl_skipped_total", labels) or 0.0


def test_a_ddl_of_a_missing_database_stops_and_never_runs_in_the_meta_database(
    pipeline: Any, unique: str
) -> None:
    settings, staging, upstream = pipeline
    missing = f"{unique}_up"
    ts = upstream.ddl(missing, "t2", "CREATE TABLE t2 (id INT PRIMARY KEY)")
    sink = sink_for(settings, staging)
    with pytest.raises(DDLError) as stopped:
        sink.run_once()
    message = str(stopped.value)
    for part in (unique, str(ts), repr(missing), "CREATE TABLE t2", "1049", "skip-ddl --ts"):
        assert part in message
    assert tables_of(settings, settings.downstream.meta_db) == {"checkpoint", "split_position"}
    assert sink.target.checkpoint().ddl_ts == 0
    # A restart meets it again (the batch before it committed up to its ts): never lost.
    with pytest.raises(DDLError):
        sink_for(settings, staging).run_once()
    # The operator skips it: recorded in the checkpoint, counted, and the sink goes on.
    before = skipped(unique, "skip-ddl")
    assert str(ts) in request_skip_ddl(settings, staging, ts)
    later = upstream.ddl(missing, None, f"CREATE DATABASE `{missing}`")
    assert sink.run_once() == later
    assert sink.target.checkpoint().ddl_ts == later
    assert skipped(unique, "skip-ddl") == before + 1
    assert tables_of(settings, missing) == set()
    assert tables_of(settings, settings.downstream.meta_db) == {"checkpoint", "split_position"}


def test_a_refused_ddl_is_skipped_when_configured(pipeline: Any, unique: str) -> None:
    settings, staging, upstream = pipeline
    database = f"{unique}_up"
    upstream.table_t(database)
    refused = upstream.ddl(database, "t", "ALTER TABLE t ADD COLUMN w NO_SUCH_TYPE")
    last = upstream.row(database, "t", {"id": 1, "v": 2})
    before = skipped(unique, "on-ddl-error")
    sink = sink_for(settings, staging, on_ddl_error=OnDDLError.SKIP)
    assert sink.run_once() == last
    assert sink.target.checkpoint().ddl_ts == refused
    assert skipped(unique, "on-ddl-error") == before + 1
    assert query(settings, f"SELECT id, v FROM `{database}`.t") == [(1, 2)]


def test_a_ddl_event_of_two_statements_runs_neither(pipeline: Any, unique: str) -> None:
    settings, staging, upstream = pipeline
    database = f"{unique}_up"
    upstream.table_t(database)
    ts = upstream.ddl(database, "u", "CREATE TABLE u (id INT); DROP TABLE t")
    with pytest.raises(DDLError) as stopped:
        sink_for(settings, staging).run_once()
    assert "more than one statement" in str(stopped.value) and str(ts) in str(stopped.value)
    assert tables_of(settings, database) == {"t"}


def test_tidb_only_ddl_is_made_safe_for_mariadb(pipeline: Any, unique: str) -> None:
    settings, staging, upstream = pipeline
    database = f"{unique}_up"
    upstream.ddl(database, None, f"CREATE DATABASE `{database}` PLACEMENT POLICY = `p1`")
    upstream.ddl(
        database,
        "t",
        "CREATE TABLE t (id BIGINT AUTO_RANDOM PRIMARY KEY, v INT) SHARD_ROW_ID_BITS=4 "
        "PRE_SPLIT_REGIONS=2",
    )
    cached = upstream.ddl(database, "t", "ALTER TABLE t CACHE")
    last = upstream.row(database, "t", {"id": 7, "v": 1})
    sink = sink_for(settings, staging)
    assert sink.run_once() == last
    assert sink.target.checkpoint().ddl_ts == cached
    assert query(settings, f"SELECT id, v FROM `{database}`.t") == [(7, 1)]


def test_routes_hold_across_ddl(pipeline: Any, unique: str) -> None:
    settings, staging, upstream = pipeline
    up, replica = f"{unique}_up", f"{unique}_replica"
    sink = sink_for(settings, staging, routes=f"{up}.*={replica}.*")
    # The routed database does not exist yet: its CREATE DATABASE makes it.
    upstream.ddl(up, None, f"CREATE DATABASE `{up}`")
    upstream.ddl(up, "a", "CREATE TABLE a (id INT PRIMARY KEY, v INT)")
    upstream.ddl(up, "b", f"CREATE TABLE `{up}`.b LIKE a")
    upstream.row(up, "a", {"id": 1, "v": 1})
    upstream.ddl(up, "a", f"ALTER TABLE `{up}`.`a` ADD COLUMN w INT")
    wide = COLUMNS | {"w": column_type(3, NULLABLE)}
    upstream.row(up, "a", {"id": 2, "v": 2, "w": 3}, wide)
    upstream.ddl(up, "a", f"RENAME TABLE a TO c, `{up}`.b TO d")
    upstream.row(up, "d", {"id": 5, "v": 5})
    upstream.ddl(up, "d", "TRUNCATE TABLE d")
    last = upstream.ddl(up, "c", "DROP TABLE IF EXISTS d")
    assert sink.run_once() == last
    assert tables_of(settings, replica) == {"c"}
    assert not query(settings, f"SHOW DATABASES LIKE '{up}'")
    assert query(settings, f"SELECT id, v, w FROM `{replica}`.c ORDER BY id") == [
        (1, 1, None),
        (2, 2, 3),
    ]


@pytest.mark.parametrize("routed", [False, True])
def test_a_ddl_reads_again_only_the_layouts_of_the_tables_it_names(
    pipeline: Any, unique: str, monkeypatch: pytest.MonkeyPatch, routed: bool
) -> None:
    settings, staging, upstream = pipeline
    up, replica = f"{unique}_up", f"{unique}_replica"
    reads: list[list[str]] = []

    def counted(cursor: Any, schema: str, tables: Sequence[str]) -> dict[str, list[Column]]:
        reads.append(sorted(tables))
        return tables_columns(cursor, schema, tables)

    monkeypatch.setattr("spark_sink.load.staging_tables.tables_columns", counted)
    routes = {"routes": f"{up}.*={replica}.*"} if routed else {}
    sink = sink_for(settings, staging, **routes)
    upstream.ddl(up, None, f"CREATE DATABASE `{up}`")
    upstream.ddl(up, "a", "CREATE TABLE a (id INT PRIMARY KEY, v INT)")
    upstream.ddl(up, "b", f"CREATE TABLE `{up}`.b (id INT PRIMARY KEY, v INT)")
    upstream.row(up, "a", {"id": 1, "v": 1})
    upstream.row(up, "b", {"id": 1, "v": 1})
    sink.run_once()
    upstream.ddl(up, "a", "ALTER TABLE a ADD COLUMN w INT")
    upstream.row(up, "a", {"id": 2, "v": 2, "w": 3}, COLUMNS | {"w": column_type(3, NULLABLE)})
    last = upstream.row(up, "b", {"id": 2, "v": 2})
    assert sink.run_once() == last
    # b's layout is still known; a's is read again, and its new column is written.
    assert reads == [["a", "b"], ["a"]]
    database = replica if routed else up
    assert query(settings, f"SELECT id, v, w FROM `{database}`.a ORDER BY id") == [
        (1, 1, None),
        (2, 2, 3),
    ]
    assert query(settings, f"SELECT id, v FROM `{database}`.b ORDER BY id") == [(1, 1), (2, 2)]
    # A DDL about a whole database may change any table: both are read again.
    upstream.ddl(up, None, f"ALTER DATABASE `{up}` CHARACTER SET utf8mb4")
    upstream.row(up, "a", {"id": 3, "v": 3, "w": 3}, COLUMNS | {"w": column_type(3, NULLABLE)})
    last = upstream.row(up, "b", {"id": 3, "v": 3})
    assert sink.run_once() == last
    assert reads == [["a", "b"], ["a"], ["a", "b"]]


def test_an_upstream_column_missing_downstream_stops_or_is_counted(
    pipeline: Any, unique: str
) -> None:
    settings, staging, upstream = pipeline
    database = f"{unique}_up"
    query(settings, f"CREATE DATABASE `{database}`")
    query(settings, f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, v INT)")
    wide = COLUMNS | {"extra": column_type(3, NULLABLE)}
    last = upstream.row(database, "t", {"id": 1, "v": 1, "extra": 9}, wide)
    with pytest.raises(SchemaDriftError) as stopped:
        sink_for(settings, staging).run_once()
    message = str(stopped.value)
    for part in (f"{database}.t", "'extra'", "TICDC_SINK_SKIP_TABLES", "ON_SCHEMA_DRIFT=ignore"):
        assert part in message
    ignoring = sink_for(settings, staging, on_schema_drift=OnSchemaDrift.IGNORE)
    assert ignoring.run_once() == last
    assert query(settings, f"SELECT id, v FROM `{database}`.t") == [(1, 1)]
    labels = {"pipeline": unique, "table": f"{database}.t", "column": "extra"}
    assert REGISTRY.get_sample_value("ticdc_sink_schema_drift_dropped_total", labels) == 1


def test_rows_of_a_table_missing_downstream_stop_the_sink(pipeline: Any, unique: str) -> None:
    settings, staging, upstream = pipeline
    database = f"{unique}_up"
    query(settings, f"CREATE DATABASE `{database}`")
    last = upstream.row(database, "never_created", {"id": 1, "v": 1})
    with pytest.raises(SchemaDriftError, match=r"never_created does not exist.*create it"):
        sink_for(settings, staging).run_once()
    skipping = sink_for(settings, staging, skip_tables=f"{database}.never_created")
    assert skipping.run_once() == last


def test_skip_ddl_refuses_what_the_sink_could_never_meet(
    pipeline: Any, unique: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from ticdc_sink.cli import main
    from ticdc_sink.exit_codes import EXIT_BAD_INPUT

    settings, staging, upstream = pipeline
    database = f"{unique}_up"
    applied = upstream.ddl(database, None, f"CREATE DATABASE `{database}`")
    assert sink_for(settings, staging).run_once() == applied
    first = upstream.ddl(database, "a", "CREATE TABLE a (id INT PRIMARY KEY)")
    second = upstream.ddl(database, "b", "CREATE TABLE b (id INT PRIMARY KEY)")
    env = {"TICDC_SINK_GROUP": unique, "TICDC_SINK_META_DB": settings.downstream.meta_db}

    def refused(argv: list[str]) -> str:
        capsys.readouterr()  # the sink's log lines before (a test before set logging up)
        assert main(argv) == EXIT_BAD_INPUT
        (line,) = capsys.readouterr().err.splitlines()
        return line

    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        assert refused(["skip-ddl", "--ts", str(applied)]) == (
            f"ticdc-sink skip-ddl: --ts {applied}: pipeline {unique} has already applied the "
            f"DDL up to ts {applied}"
        )
        assert refused(["skip-ddl", "--ts", str(first + 1)]).startswith(
            f"ticdc-sink skip-ddl: --ts {first + 1}: no DDL is staged at that commit ts in "
            f"pipeline {unique!r}"
        )
        assert main(["skip-ddl", "--ts", str(first)]) == 0
        # Asking for the same skip again changes nothing; another one would drop it.
        assert main(["skip-ddl", "--ts", str(first)]) == 0
        capsys.readouterr()
        assert refused(["skip-ddl", "--ts", str(second)]) == (
            f"ticdc-sink skip-ddl: --ts {second}: pipeline {unique} is already to skip the DDL "
            f"at ts {first}, not reached yet; give --replace to skip this one instead"
        )
        assert sink_for(settings, staging).target.checkpoint().skip_ddl_ts == first
        assert main(["skip-ddl", "--ts", str(second), "--replace"]) == 0
    assert sink_for(settings, staging).target.checkpoint().skip_ddl_ts == second
