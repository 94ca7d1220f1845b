"""The pipeline through the secured services (`services up --secure`): SASL_SSL Kafka with a
client certificate, TLS-only MariaDB with a password user, Redis on TLS with an ACL user.

Every process runs as a user would run it, from the settings in ``<state dir>/secure.env``; their
output (and the sink's metrics page) must never hold a password or a key. A wrong CA, a wrong
password and plaintext against a TLS-only port must each stop a command at start with one line
naming the setting.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from config.settings import SaslMechanism, Settings, load_settings
from core.kafka_client import kafka_options
from core.redis_client import redis_address, redis_client
from core.staging import Keys
from spark_sink.db.connection import connect as downstream_connect
from tests.conftest import missing
from ticdc_sink.exit_codes import EXIT_BAD_INPUT
from ticdc_sink.services.base import state_dir
from ticdc_sink.services.certificates import make_authority
from ticdc_sink.services.secure import SECURE_ENV

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secure_env() -> dict[str, str]:
    """The settings `services up --secure` wrote, as a shell that sources the file sees them."""
    path = state_dir() / SECURE_ENV
    if not path.exists():
        missing(f"{path} is missing; run `ticdc-sink services up --secure`")
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = shlex.split(value)[0]
    return env


@pytest.fixture(scope="module")
def secure_settings(secure_env: dict[str, str]) -> Settings:
    settings = load_settings(environ=secure_env)
    try:
        downstream_connect(settings).close()
    except pymysql.MySQLError as exc:
        missing(f"the secured MariaDB is not reachable ({exc}); run `services up --secure`")
    return settings


@pytest.fixture(scope="module")
def secrets(secure_env: dict[str, str]) -> list[str]:
    """What must never show: the three passwords and the client key's body."""
    found = [
        Path(secure_env[name]).read_text().strip()
        for name in (
            "TICDC_SINK_KAFKA_SASL_PASSWORD_FILE",
            "TICDC_SINK_REDIS_PASSWORD_FILE",
            "TICDC_SINK_DOWNSTREAM_PASSWORD_FILE",
        )
    ]
    key_lines = Path(secure_env["TICDC_SINK_KAFKA_SSL_KEY"]).read_text().splitlines()
    return found + [line for line in key_lines if "-----" not in line][:3]


def _run(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ticdc_sink", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def secure_pipeline(
    secure_env: dict[str, str], secure_settings: Settings, unique: str
) -> Iterator[dict[str, str]]:
    """The environment of one pipeline on the secured services, cleaned up afterwards."""
    env = {
        **secure_env,
        "TICDC_SINK_GROUP": unique,
        "TICDC_SINK_TOPICS": unique,
        "TICDC_SINK_META_DB": f"{unique}_meta",
        "TICDC_SINK_PROTOCOL": "open",
        "TICDC_SINK_WEB_PORT": "0",
        "TICDC_SINK_SESSION_TIMEOUT": "6",
    }
    yield env
    client = redis_client(secure_settings)
    for key in client.scan_iter(Keys(unique).pattern):
        client.delete(key)
    client.close()
    with downstream_connect(secure_settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}`")
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")

    async def drop_topic() -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(**kafka_options(secure_settings))
        await admin.start()
        try:
            await admin.delete_topics([unique])
        finally:
            await admin.close()

    asyncio.run(drop_topic())


# The sink loads small tables over its own PyMySQL connection (LOAD DATA LOCAL) and large ones
# through Spark's Connector/J (a PKCS12 key store): 0, without loading in place, sends every table
# through Spark.
@pytest.mark.parametrize("spark_min_rows", ["50000", "0"], ids=["driver-load", "spark-load"])
def test_replicates_end_to_end_through_the_secured_services_and_never_shows_a_secret(
    secure_pipeline: dict[str, str],
    secrets: list[str],
    unique: str,
    tmp_path: Path,
    spark_min_rows: str,
) -> None:
    secure_pipeline["TICDC_SINK_SPARK_MIN_ROWS"] = spark_min_rows
    # A table that loads in place never meets Spark: the Spark case stages every table.
    secure_pipeline["TICDC_SINK_LOAD_IN_PLACE"] = "true" if spark_min_rows != "0" else "false"
    expected = tmp_path / "expected.json"
    outputs: list[str] = []
    produced = _run(
        "produce", "--topic", unique, "--partitions", "3", "--transactions", "80",
        "--duplicates", "0.05", "--schema", unique, "--expected", str(expected),
        env=secure_pipeline,
    )  # fmt: skip
    outputs.append(produced.stdout + produced.stderr)
    assert produced.returncode == 0, outputs[-1]

    metrics_port = _free_port()
    logs = [tmp_path / "worker.log", tmp_path / "apply.log"]
    processes = []
    for command, log in zip(("worker", "apply"), logs, strict=True):
        env = {**os.environ, **secure_pipeline}
        if command == "apply":
            env["TICDC_SINK_METRICS_PORT"] = str(metrics_port)
        with log.open("wb") as handle:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "ticdc_sink", command],
                    env=env,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    try:
        deadline = time.monotonic() + 240
        while True:
            verified = _run("verify", "--expected", str(expected), env=secure_pipeline)
            if verified.returncode == 0:
                break
            assert all(p.poll() is None for p in processes), [
                log.read_text(errors="replace")[-3000:] for log in logs
            ]
            assert time.monotonic() < deadline, verified.stdout + verified.stderr
            time.sleep(3)
        outputs.append(verified.stdout + verified.stderr)
        assert "verify: match" in verified.stdout
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as page:
            outputs.append(page.read().decode())
        assert "ticdc_sink" in outputs[-1]
        status = _run("status", env=secure_pipeline)
        assert status.returncode == 0, status.stderr
        assert f"{unique}:0" in status.stdout
        outputs.append(status.stdout + status.stderr)
        for args in (["--help"], ["worker", "--help"], ["services", "--help"]):
            shown = _run(*args, env=secure_pipeline)
            outputs.append(shown.stdout + shown.stderr)
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, 15)
            process.wait(timeout=60)
    outputs += [log.read_text(errors="replace") for log in logs]
    # recover, too, reaches all three (the group's offsets over SASL_SSL); the stopped worker's
    # group membership may take a moment to end.
    deadline = time.monotonic() + 60
    while (recovered := _run("recover", "--yes", env=secure_pipeline)).returncode != 0:
        assert "still consume" in recovered.stderr, recovered.stderr
        assert time.monotonic() < deadline, recovered.stderr
        time.sleep(2)
    assert f"{unique}:0: replay from offset" in recovered.stdout
    outputs.append(recovered.stdout + recovered.stderr)
    everything = "\n".join(outputs)
    assert "Traceback" not in everything
    for secret in secrets:
        assert secret not in everything


@pytest.fixture(scope="module")
def wrong_ca(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The CA file of another authority: it signed nothing the services show."""
    return str(make_authority(tmp_path_factory.mktemp("other-ca"), "another CA").ca)


@pytest.fixture(scope="module")
def wrong_password(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("wrong") / "password"
    path.write_text("not-the-password-4711\n")
    return str(path)


_TLS_SETTINGS = {
    "kafka": ("TICDC_SINK_KAFKA_SSL_CA", "TICDC_SINK_KAFKA_SSL_CERT", "TICDC_SINK_KAFKA_SSL_KEY"),
    "redis": ("TICDC_SINK_REDIS_SSL_CA", "TICDC_SINK_REDIS_SSL_CERT", "TICDC_SINK_REDIS_SSL_KEY"),
}


@pytest.mark.parametrize(
    ("case", "named"),
    [
        ("kafka wrong CA", "TICDC_SINK_KAFKA_SSL_CA"),
        ("redis wrong CA", "TICDC_SINK_REDIS_SSL_CA"),
        ("downstream wrong CA", "TICDC_SINK_DOWNSTREAM ssl-ca"),
        ("kafka wrong password", "TICDC_SINK_KAFKA_SASL_PASSWORD"),
        ("redis wrong password", "TICDC_SINK_REDIS_PASSWORD"),
        ("downstream wrong password", "TICDC_SINK_DOWNSTREAM_PASSWORD"),
        ("kafka plaintext", "TICDC_SINK_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT"),
        ("redis plaintext", "TICDC_SINK_REDIS_URL"),
        ("downstream plaintext", "TICDC_SINK_DOWNSTREAM ssl-mode=disabled"),
    ],
)
def test_a_wrong_ca_password_or_plaintext_fails_at_start_naming_the_setting(
    case: str,
    named: str,
    secure_env: dict[str, str],
    secure_settings: Settings,
    wrong_ca: str,
    wrong_password: str,
) -> None:
    env = {**secure_env, "TICDC_SINK_TOPICS": "unused"}
    service, _, problem = case.partition(" ")
    if problem == "wrong CA":
        setting = "TICDC_SINK_DOWNSTREAM_SSL_CA" if service == "downstream" else named
        env[setting] = wrong_ca
    elif problem == "wrong password":
        env[
            f"TICDC_SINK_{service.upper()}{'_SASL' if service == 'kafka' else ''}_PASSWORD_FILE"
        ] = wrong_password
    elif service == "kafka":
        env["TICDC_SINK_KAFKA_SECURITY_PROTOCOL"] = "SASL_PLAINTEXT"
    elif service == "redis":
        env["TICDC_SINK_REDIS_URL"] = env["TICDC_SINK_REDIS_URL"].replace("rediss://", "redis://")
    else:
        env["TICDC_SINK_DOWNSTREAM"] = (
            f"mysql://ticdc@{secure_settings.downstream.url.host}:"
            f"{secure_settings.downstream.url.port}/?ssl-mode=disabled"
        )
    for name in _TLS_SETTINGS.get(service, ()) if problem == "plaintext" else ():
        env.pop(name)
    started = time.monotonic()
    result = _run("status", env={**env, **_blank_unset(env)}, timeout=60)
    lines = result.stderr.strip().splitlines()
    # A setting that does not reach its service is bad input, as a malformed one is.
    assert result.returncode == EXIT_BAD_INPUT, result.stdout + result.stderr
    assert len(lines) == 1, result.stderr
    assert named in lines[0]
    assert "Traceback" not in result.stderr
    assert "not-the-password-4711" not in result.stderr
    assert time.monotonic() - started < 45


def _blank_unset(env: dict[str, str]) -> dict[str, str]:
    """The secured TLS settings ``env`` leaves out, blank: the test's own environment (which
    may come from a shell that sourced secure.env) must not fill them back in."""
    names = [n for names in _TLS_SETTINGS.values() for n in names]
    return {n: "" for n in names if n not in env}


def test_the_secured_redis_port_is_told_apart_from_a_plaintext_one(
    secure_settings: Settings, settings: Settings
) -> None:
    from core.connectivity import answers_plaintext, speaks_tls

    secured, plain = redis_address(secure_settings), redis_address(settings)
    assert speaks_tls(secured) and not answers_plaintext(secured)
    assert answers_plaintext(plain) and not speaks_tls(plain)


def test_scram_sha_256_logs_in_as_well(secure_settings: Settings) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    from core.connectivity import check_kafka

    settings = secure_settings.updated({"kafka_sasl_mechanism": SaslMechanism.SCRAM_SHA_256})

    async def topics() -> Any:
        await check_kafka(settings)
        admin = AIOKafkaAdminClient(**kafka_options(settings))
        await admin.start()
        try:
            return await admin.list_topics()
        finally:
            await admin.close()

    assert isinstance(asyncio.run(topics()), list)


def test_spark_loads_over_jdbc_with_the_client_certificate(
    spark: Any, secure_settings: Settings, unique: str
) -> None:
    from spark_sink.load.spark_session import jdbc_options

    with downstream_connect(secure_settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{unique}`")
    try:
        options = jdbc_options(secure_settings.downstream.url, unique)
        assert "password" not in options["url"] and "keyStorePassword" not in options["url"]
        frame = spark.createDataFrame([(i, f"row {i}") for i in range(50)], "id INT, name STRING")
        frame.write.format("jdbc").options(**options, dbtable="tls_rt").mode("overwrite").save()
        with downstream_connect(secure_settings, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM `{unique}`.tls_rt")
            assert cur.fetchone() == (50,)
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
            assert cur.fetchone()[1].startswith("TLS")
    finally:
        with downstream_connect(secure_settings, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{unique}`")


def test_services_up_secure_runs_the_secured_services_and_writes_their_settings(
    secure_env: dict[str, str],
) -> None:
    from ticdc_sink.services.base import ServiceState
    from ticdc_sink.services.secure import secure_services

    states = {service.name: service.state() for service in secure_services()}
    assert all(state is not ServiceState.STOPPED for state in states.values()), states
    # secure.env names password files (owner-only), never a password.
    for name, value in secure_env.items():
        assert "PASSWORD" not in name or name.endswith("_FILE"), name
        if name.endswith("_FILE") or name.endswith("_KEY"):
            assert Path(value).stat().st_mode & 0o077 == 0, name
