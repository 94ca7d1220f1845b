"""The schema registry client against the real registry (`ticdc-sink services up --registry`):
schemas registered and fetched by id, cached in memory and in Redis, an unknown id named, the
password never shown, an outage waited out."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from config.errors import (
    ConfigError,
    RegistryUnavailableError,
    SchemaRegistryError,
    UnknownSchemaError,
)
from config.settings import Settings
from core import outage
from core.staging import Staging
from streams.schema_registry import SchemaRegistry
from ticdc_sink.cli import main
from ticdc_sink.services.registry import RegistryService

pytestmark = pytest.mark.integration

# Far above any id the test registry hands out.
UNKNOWN_ID = 2_000_000_007


def record(name: str, *fields: str) -> str:
    """An Avro record schema of int fields, as JSON text."""
    document = {
        "type": "record",
        "name": name,
        "fields": [{"name": field, "type": "int"} for field in fields],
    }
    return json.dumps(document)


def test_a_registered_schema_is_fetched_by_its_id(
    schema_registry: SchemaRegistry, settings: Settings, unique: str
) -> None:
    schema = record(unique, "a", "b")
    schema_id = schema_registry.register(f"{unique}-value", schema)
    assert schema_id > 0
    # Registering it again gives the same id, as TiCDC relies on after a restart.
    assert schema_registry.register(f"{unique}-value", schema) == schema_id
    fresh = SchemaRegistry.from_settings(settings)
    assert json.loads(fresh.schema(schema_id)) == json.loads(schema)


def test_an_unknown_id_raises_naming_the_id_and_the_registry(
    schema_registry: SchemaRegistry, schema_registry_url: str
) -> None:
    with pytest.raises(UnknownSchemaError) as raised:
        schema_registry.schema(UNKNOWN_ID)
    assert str(raised.value) == (
        f"schema id {UNKNOWN_ID} is unknown to the schema registry at {schema_registry_url}"
    )
    assert raised.value.schema_id == UNKNOWN_ID


def test_an_incompatible_schema_is_refused_with_the_registrys_reason(
    schema_registry: SchemaRegistry, unique: str
) -> None:
    schema_registry.register(f"{unique}-value", record(unique, "a"))
    # BACKWARD (set at start): a new field without a default cannot read the old records.
    with pytest.raises(SchemaRegistryError) as raised:
        schema_registry.register(f"{unique}-value", record(unique, "a", "b"))
    assert f"subject '{unique}-value'" in str(raised.value)
    assert "HTTP 409" in str(raised.value)


@pytest.fixture
def local_registry(schema_registry_url: str) -> Iterator[RegistryService]:
    """The local registry, which the test may stop: it is started again afterwards (empty, as
    its schemas are in memory)."""
    service = RegistryService()
    if service.our_pid() is None or schema_registry_url != service.url:
        pytest.fail(
            f"this test stops and starts the registry: it must be the one `ticdc-sink services "
            f"up --registry` started from this checkout ({service.url})",
            pytrace=False,
        )
    yield service
    service.up()


def test_cached_schemas_are_served_while_the_registry_is_away_and_an_outage_is_waited_out(
    local_registry: RegistryService,
    settings: Settings,
    staging: Staging,
    unique: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Retries at most half a second apart: the test waits for the registry's restart, not for
    # the client's back-off.
    monkeypatch.setattr(outage, "RETRY_MAX_S", 0.5)
    schema = record(unique, "a")
    schema_id = SchemaRegistry.from_settings(settings).register(f"{unique}-value", schema)
    fetcher = SchemaRegistry.from_settings(settings, staging)
    assert fetcher.schema(schema_id) == schema
    local_registry.down()

    # Away: a client that asks gives up at once (patience 0), so the others did not ask.
    with pytest.raises(RegistryUnavailableError, match="ConnectionRefusedError"):
        SchemaRegistry.from_settings(settings, patience=0).schema(schema_id)
    assert fetcher.schema(schema_id) == schema  # its memory
    restarted_worker = SchemaRegistry.from_settings(settings, staging, patience=0)
    assert restarted_worker.schema(schema_id) == schema  # the pipeline's Redis hash

    # A registration and a lookup wait for the registry. It comes back empty (its schemas are
    # in memory): the registration is its first schema, id 1, which the lookup then asks for;
    # the lookup's retries are held until the registration is done, so it cannot ask before.
    registered = threading.Event()
    results: dict[str, object] = {}
    later = record(f"{unique}_later", "b")

    def register() -> None:
        results["id"] = SchemaRegistry.from_settings(settings).register(f"{unique}-later", later)
        registered.set()

    def look_up() -> None:
        def held() -> bool:
            registered.wait(timeout=120)
            return False

        client = SchemaRegistry.from_settings(settings, staging, stopping=held)
        results["schema"] = client.schema(1)

    with caplog.at_level(logging.WARNING, "ticdc_sink.schema_registry"):
        threads = [threading.Thread(target=register), threading.Thread(target=look_up)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        assert all(thread.is_alive() for thread in threads), "a call did not wait"
        local_registry.up()
        for thread in threads:
            thread.join(timeout=60)
    assert results == {"id": 1, "schema": later}
    lines = [record.getMessage() for record in caplog.records]
    away = [line for line in lines if "unavailable since" in line]
    back = [line for line in lines if " back after " in line]
    # Once each way per client: the registration's and the lookup's.
    assert len(away) == len(back) == 2, lines
    assert all(line.startswith(f"schema registry at {local_registry.url} ") for line in away + back)


PASSWORD = "s3cr@t:pw/4711"
LOGIN_URL = f"http://ticdc:{quote(PASSWORD, safe='')}@127.0.0.1:8081/apis/ccompat/v7"


def test_the_password_never_shows_in_settings_errors_or_logs(
    schema_registry_url: str,
    settings: Settings,
    unique: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The local registry takes any login: the client sends it and works as without one.
    with_login = settings.updated({"schema_registry": LOGIN_URL})
    client = SchemaRegistry.from_settings(with_login)
    client.check()
    schema_id = client.register(f"{unique}-value", record(unique, "a"))
    assert json.loads(client.schema(schema_id)) == json.loads(record(unique, "a"))
    shown: list[str] = [repr(with_login), str(with_login.schema_registry)]
    shown += with_login.describe().values()
    with pytest.raises(UnknownSchemaError) as unknown:
        client.schema(UNKNOWN_ID)
    shown.append(str(unknown.value))
    # A registry that is away, waited for and then given up.
    away = with_login.updated({"schema_registry": LOGIN_URL.replace(":8081", ":9")})
    with (
        caplog.at_level(logging.WARNING, "ticdc_sink.schema_registry"),
        pytest.raises(RegistryUnavailableError) as unavailable,
    ):
        SchemaRegistry.from_settings(away, patience=0.5).schema(1)
    shown += [str(unavailable.value), caplog.text]
    assert "unavailable since" in caplog.text
    # The command that prints the settings, and one that fails on the setting.
    monkeypatch.setenv("TICDC_SINK_SCHEMA_REGISTRY", LOGIN_URL)
    assert main(["config", "describe"]) == 0
    assert main(["config", "describe", "--json"]) == 0
    monkeypatch.setenv("TICDC_SINK_SCHEMA_REGISTRY_SSL_CA", "/nowhere/ca.pem")
    assert main(["config", "describe"]) == 2
    out, err = capsys.readouterr()
    assert "TICDC_SINK_SCHEMA_REGISTRY_SSL_CA need an https:// TICDC_SINK_SCHEMA_REGISTRY" in err
    shown += [out, err]
    secrets = [PASSWORD, quote(PASSWORD, safe=""), "4711"]
    leaks = [text for text in shown for secret in secrets if secret in text]
    assert not leaks
    assert "http://ticdc:***@127.0.0.1:8081/apis/ccompat/v7" in "".join(shown)


def test_an_address_that_is_no_registry_is_refused_at_start_naming_the_setting(
    schema_registry_url: str, settings: Settings
) -> None:
    # Apicurio's root, not its Confluent API: what a user may give by mistake.
    root = settings.updated({"schema_registry": "http://127.0.0.1:8081/"})
    with pytest.raises(ConfigError) as raised:
        SchemaRegistry.from_settings(root, patience=0).check()
    assert str(raised.value).startswith(
        "TICDC_SINK_SCHEMA_REGISTRY: http://127.0.0.1:8081 does not answer as a Confluent "
        "schema registry (GET /schemas/ids/0: HTTP 404)"
    )
