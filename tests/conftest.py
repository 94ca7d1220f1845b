"""Session fixtures that connect to the real local services (`ticdc-sink services up`).

Under ``CI=true`` a missing service fails the test that needs it; elsewhere it skips, so unit
tests still run on a machine without the services.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
import redis

from config.settings import Settings, load_settings
from core.kafka_client import kafka_options
from core.redis_client import RedisClient
from core.redis_client import redis_client as make_redis_client
from spark_sink.db.connection import connect as downstream_connect

IN_CI = os.environ.get("CI", "").lower() == "true"
CHECKOUT = Path(__file__).parents[1]
# Where the shared folder (conformance vectors, the spec) is when it is not beside the checkout.
SHARED_ENV = "TICDC_SINK_SHARED"


def missing(message: str) -> None:
    """Fail under CI, skip elsewhere: something a test needs is not there."""
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def service_missing(name: str, error: BaseException, start: str = "ticdc-sink services up") -> None:
    missing(f"{name} is not reachable ({error}); run `{start}`")


def shared_folder(name: str) -> Path:
    """``shared/<name>`` (``conformance``, ``spec``): the shared folder sits beside the checkout,
    or where TICDC_SINK_SHARED points. Missing, it fails under CI and skips elsewhere."""
    shared = Path(os.environ.get(SHARED_ENV, CHECKOUT.parent / "shared"))
    folder = shared / name
    if not folder.is_dir():
        missing(
            f"{folder} is missing: these tests read shared/{name}, and the shared/ folder must "
            f"sit beside the checkout ({CHECKOUT}) or be named by {SHARED_ENV}"
        )
    return folder


@pytest.fixture(scope="session")
def native() -> Any:
    """The native wheel (``ticdc_sink_native``): required under CI, where `make` builds it."""
    from core.native import native_module

    module = native_module()
    if module is None:
        missing("ticdc_sink_native is not installed (make builds it from native/)")
    return module


@pytest.fixture(scope="session")
def settings() -> Settings:
    return load_settings()


@pytest.fixture
def unique() -> str:
    """A short name no other test uses (topics, tables, Redis prefixes)."""
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture
async def kafka_admin(settings: Settings) -> AsyncIterator[Any]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_options(settings, request_timeout_ms=10_000))
    try:
        await admin.start()
    except Exception as exc:
        await admin.close()
        service_missing("Kafka", exc)
    yield admin
    await admin.close()


@pytest.fixture(scope="session")
def redis_client(settings: Settings) -> Iterator[RedisClient]:
    client = make_redis_client(settings)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_missing("Redis", exc)
    yield client
    client.close()


# What a test parametrized over the staging store runs against (see ``redis_of``).
REDIS_KINDS = ["single", "cluster"]


@pytest.fixture(scope="session")
def redis_cluster_settings(settings: Settings) -> Settings:
    """The settings with the Redis Cluster of `services up --cluster` as the staging store; its
    nodes are started (once per session) when they do not answer."""
    from config.errors import ServiceError
    from ticdc_sink.services.cluster import redis_cluster_env, redis_cluster_up

    try:
        redis_cluster_up()
    except ServiceError as exc:
        service_missing("the Redis Cluster", exc, start="ticdc-sink services up --cluster")
    return load_settings(environ={**os.environ, **redis_cluster_env()})


@pytest.fixture(scope="session")
def redis_cluster_client(redis_cluster_settings: Settings) -> Iterator[RedisClient]:
    client = make_redis_client(redis_cluster_settings)
    yield client
    client.close()


def redis_of(request: pytest.FixtureRequest, single: RedisClient) -> RedisClient:
    """The client a test parametrized over :data:`REDIS_KINDS` runs against: ``single`` (the
    settings' Redis) or the Redis Cluster's. A module or folder overrides ``redis_client`` with
    it (``params=REDIS_KINDS``), and every fixture of the test follows (``staging``)."""
    if request.param == "cluster":
        cluster: RedisClient = request.getfixturevalue("redis_cluster_client")
        return cluster
    return single


@pytest.fixture(scope="session")
def secure_redis_cluster_settings(settings: Settings) -> Settings:
    """The settings with the secured Redis Cluster of `services up --cluster --secure` (TLS
    only, client certificates, an ACL user) as the staging store; its nodes are started (once
    per session) when they do not answer."""
    from config.errors import ServiceError
    from ticdc_sink.services.secure_cluster import (
        secure_redis_cluster_env,
        secure_redis_cluster_up,
    )

    try:
        secure_redis_cluster_up()
    except ServiceError as exc:
        service_missing(
            "the secured Redis Cluster", exc, start="ticdc-sink services up --cluster --secure"
        )
    return load_settings(environ={**os.environ, **secure_redis_cluster_env()})


@pytest.fixture(scope="session")
def clusters_env(redis_cluster_settings: Settings) -> dict[str, str]:
    """The variables of cluster.env: the Redis Cluster and the three-broker Kafka, whose nodes
    are started (once per session) when they do not answer."""
    from config.errors import ServiceError
    from ticdc_sink.services.cluster import cluster_settings, kafka_cluster_up

    try:
        kafka_cluster_up()
    except ServiceError as exc:
        service_missing("the Kafka cluster", exc, start="ticdc-sink services up --cluster")
    return cluster_settings()


def redis_env(client: RedisClient) -> dict[str, str]:
    """The ``TICDC_SINK_REDIS_*`` variables that point a spawned command at ``client``'s Redis
    (none for the settings' own Redis)."""
    from redis.cluster import RedisCluster

    from ticdc_sink.services.cluster import redis_cluster_env

    return redis_cluster_env() if isinstance(client, RedisCluster) else {}


@pytest.fixture(scope="session")
def mariadb_connect(settings: Settings) -> Callable[..., pymysql.connections.Connection]:
    """A factory of PyMySQL connections to the downstream, in UTC, autocommit on."""

    def connect(**kwargs: Any) -> pymysql.connections.Connection:
        return downstream_connect(settings, autocommit=True, **kwargs)

    try:
        connect().close()
    except pymysql.MySQLError as exc:
        service_missing("MariaDB", exc)
    return connect


@pytest.fixture(scope="session")
def tidb_settings(settings: Settings) -> Settings:
    """The settings with the local TiDB (`ticdc-sink services up --tidb` starts it) as the
    downstream."""
    from config.settings import Downstream
    from ticdc_sink.services.tidb_server import TiDBService

    address = f"mysql://root@{TiDBService.endpoint}/"
    return settings.updated({"downstream": Downstream.parse(address)})


@pytest.fixture(scope="session")
def tidb_connect(tidb_settings: Settings) -> Callable[..., pymysql.connections.Connection]:
    """A factory of PyMySQL connections to the local TiDB, in UTC, autocommit on."""

    def connect(**kwargs: Any) -> pymysql.connections.Connection:
        return downstream_connect(tidb_settings, autocommit=True, **kwargs)

    try:
        connect().close()
    except pymysql.MySQLError as exc:
        service_missing("TiDB", exc, start="ticdc-sink services up --tidb")
    return connect


@pytest.fixture(scope="session")
def tidb_safe_point(tidb_connect: Callable[..., pymysql.connections.Connection]) -> None:
    """A GC safe point in the local TiDB: TiDB refuses a snapshot read without one to check it
    against, and the unistore TiDB runs no GC worker to record one as a TiKV cluster's would."""
    with tidb_connect() as conn, conn.cursor() as cur:
        cur.execute(
            "INSERT IGNORE INTO mysql.tidb (VARIABLE_NAME, VARIABLE_VALUE, COMMENT) VALUES "
            "('tikv_gc_safe_point', '20000101-00:00:00.000 +0000', 'ticdc-sink tests')"
        )


@pytest.fixture
def downstream_settings(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    """The settings of the server a test writes into: the settings' downstream (MariaDB) unless
    parametrized (``indirect``) with ``"tidb"``, the local TiDB."""
    if getattr(request, "param", "mariadb") == "tidb":
        request.getfixturevalue("tidb_connect")  # fails under CI when TiDB does not answer
        tidb: Settings = request.getfixturevalue("tidb_settings")
        return tidb
    request.getfixturevalue("mariadb_connect")  # fails under CI when MariaDB does not answer
    return settings


@pytest.fixture
def scratch_db(
    mariadb_connect: Callable[..., pymysql.connections.Connection], unique: str
) -> Iterator[str]:
    """A database of its own for one test, dropped afterwards."""
    with mariadb_connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{unique}`")
    yield unique
    with mariadb_connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{unique}`")


@pytest.fixture(scope="session")
def schema_registry_url(settings: Settings) -> str:
    """The schema registry's Confluent API the settings name (the local Apicurio that
    `ticdc-sink services up --registry` starts, unless TICDC_SINK_SCHEMA_REGISTRY says
    otherwise), once it answers as a registry."""
    from config.errors import ConfigError, RegistryUnavailableError
    from streams.schema_registry import SchemaRegistry

    try:
        SchemaRegistry.from_settings(settings, patience=0).check()
    except (RegistryUnavailableError, ConfigError) as exc:
        service_missing("The schema registry", exc, start="ticdc-sink services up --registry")
    return settings.schema_registry.url


@pytest.fixture
def schema_registry(settings: Settings, schema_registry_url: str) -> Any:
    """A client of the schema registry, caching in memory only (a `SchemaRegistry`)."""
    from streams.schema_registry import SchemaRegistry

    return SchemaRegistry.from_settings(settings)


@pytest.fixture(scope="session")
def spark(settings: Settings) -> Iterator[Any]:
    from config.settings import default_of
    from spark_sink.load.spark_session import build_spark

    jdbc_jar = default_of("jdbc_jar")
    if not Path(jdbc_jar).exists():
        service_missing("MariaDB Connector/J", FileNotFoundError(jdbc_jar))
    session = build_spark("local[2]", "ticdc-sink-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def conformance() -> Path:
    """../shared/conformance: real TiCDC messages (set TICDC_SINK_SHARED to move it)."""
    return shared_folder("conformance")


@pytest.fixture
def staging(redis_client: RedisClient, unique: str) -> Iterator[Any]:
    """A Redis staging area of this test's own pipeline, deleted afterwards."""
    from core.staging import Staging

    area = Staging(redis_client, unique)
    yield area
    area.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    # Keep each phase's report on the test, so fixtures can tell a failed test at teardown.
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
def call_failed(request: pytest.FixtureRequest) -> Callable[[], bool]:
    """Asked at teardown: whether the test failed, so that diagnostics print only then."""

    def failed() -> bool:
        report = getattr(request.node, "report_call", None)
        return bool(report is not None and report.failed)

    return failed
