"""The schema registry client against the real registry (`ticdc-sink services up --registry`):
schemas registered and fetched by id, cached in memory and in Redis, an unknown id named, the
password never shown, an outage waited out."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from config.errors import (
    ConfigError,
    RegistryUnavailableError,
    SchemaRegistryError,
    UnknownSchemaError,
)
from config.settings import Settings, load_settings
from core import outage
from core.staging import Staging
from streams.registry_http import RegistryAddress, request
from streams.schema_registry import SchemaRegistry
from tests.conftest import service_missing
from ticdc_sink.cli import main
from ticdc_sink.services.certificates import make_authority
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


def test_an_id_no_registry_hands_out_is_unknown_without_asking() -> None:
    # Nothing listens at port 9: a request would fail as an outage, not as an unknown id.
    nowhere = SchemaRegistry(RegistryAddress("http://127.0.0.1:9", "http://127.0.0.1:9"))
    for schema_id in (0, -1, 1 << 31, (1 << 32) - 1):
        with pytest.raises(UnknownSchemaError, match=f"schema id {schema_id} is unknown"):
            nowhere.schema(schema_id)


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
    """The local registry, which the test may stop: it is started again afterwards (with its
    schemas: they are in a file)."""
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

    # A registration and a lookup wait for the registry. It comes back with its schemas (they
    # are in a file): the lookup, by a client with no cache, gets the id registered before the
    # restart, and the registration a new id (ids are not handed out again). The lookup's
    # retries are held until the registration is done.
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

        client = SchemaRegistry.from_settings(settings, stopping=held)
        results["schema"] = client.schema(schema_id)

    with caplog.at_level(logging.WARNING, "ticdc_sink.schema_registry"):
        threads = [threading.Thread(target=register), threading.Thread(target=look_up)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        assert all(thread.is_alive() for thread in threads), "a call did not wait"
        local_registry.up()
        for thread in threads:
            thread.join(timeout=60)
    assert results["schema"] == schema
    assert isinstance(results["id"], int) and results["id"] > schema_id
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
    # A redirect is not followed (it would carry the login along): the root's is answered as is.
    assert request(SchemaRegistry.from_settings(root).address, "GET", "")[0] == 302
    # Nor would TiCDC take Apicurio's Confluent API as it is: its check wants {} at the base URL.
    status, body = request(SchemaRegistry.from_settings(settings).address, "GET", "")
    assert status == 200 and body.startswith(b"<!DOCTYPE html>")


@pytest.fixture
def secured(schema_registry_url: str) -> Settings:
    """The settings that reach the secured registry (`services up --secure --registry`): TLS
    with the local CA, basic auth with a password from its file."""
    from ticdc_sink.services.secure import secure_settings

    environ = {k: v for k, v in secure_settings().items() if "SCHEMA_REGISTRY" in k}
    settings = load_settings(environ=environ)
    try:
        SchemaRegistry.from_settings(settings, patience=0).check()
    except (RegistryUnavailableError, ConfigError) as exc:
        service_missing(
            "The secured schema registry", exc, start="ticdc-sink services up --secure --registry"
        )
    return settings


def test_the_secured_registry_takes_tls_and_the_login_and_refuses_what_is_wrong(
    secured: Settings, unique: str, tmp_path: Path
) -> None:
    schema = record(unique, "a")
    schema_id = SchemaRegistry.from_settings(secured).register(f"{unique}-value", schema)
    assert SchemaRegistry.from_settings(secured).schema(schema_id) == schema
    address = SchemaRegistry.from_settings(secured).address
    # What TiCDC's check of the registry reads: exactly {} at the base URL.
    assert request(address, "GET", "") == (200, b"{}")
    secret = secured.schema_registry.password.get_secret_value()
    other_ca = make_authority(tmp_path / "other-ca", "another CA").ca
    cases = {
        "TICDC_SINK_SCHEMA_REGISTRY_PASSWORD": {"schema_registry_password": "wrong-4711"},
        "TICDC_SINK_SCHEMA_REGISTRY_SSL_CA": {"schema_registry_ssl_ca": str(other_ca)},
        "does not answer as a Confluent schema registry (GET /schemas/ids/0: HTTP 400)": {
            "schema_registry": secured.schema_registry.url.replace("https:", "http:"),
            "schema_registry_ssl_ca": "",
        },
    }
    for named, change in cases.items():
        with pytest.raises(ConfigError) as raised:
            SchemaRegistry.from_settings(secured.updated(change), patience=5).check()
        message = str(raised.value)
        assert named in message
        assert secret not in message and "wrong-4711" not in message
    # A running worker waits for a login the registry refuses (an operator fixes it), and
    # tells why in its outage line; a one-shot call gives up.
    refused = secured.updated({"schema_registry_password": "wrong-4711"})
    with pytest.raises(RegistryUnavailableError, match="HTTP 401"):
        SchemaRegistry.from_settings(refused, patience=0.3).schema(schema_id)
