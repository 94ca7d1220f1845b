"""What a registry's answers mean, and how its address is taken apart (pure functions)."""

from __future__ import annotations

import base64
import json

import pytest

from config.errors import RegistryUnavailableError, SchemaRegistryError, UnknownSchemaError
from config.settings import SchemaRegistrySettings
from streams.registry_http import (
    RegistryAddress,
    registered_id,
    schema_of,
    split_login,
    versions_path,
)

REGISTRY = "http://registry:8081"
SCHEMA = '{"type":"record","name":"r","fields":[]}'


def body(document: object) -> bytes:
    return json.dumps(document).encode()


def test_a_schema_answer_gives_its_text() -> None:
    assert schema_of(200, body({"schema": SCHEMA, "references": []}), 7, REGISTRY) == SCHEMA
    # Confluent names the type of a schema that is not Avro only.
    assert schema_of(200, body({"schema": SCHEMA, "schemaType": "AVRO"}), 7, REGISTRY) == SCHEMA


def test_only_the_registrys_not_found_makes_an_id_unknown() -> None:
    with pytest.raises(UnknownSchemaError, match=rf"schema id 7 is unknown to .* at {REGISTRY}$"):
        schema_of(404, body({"error_code": 40403, "message": "Schema not found"}), 7, REGISTRY)
    # A 404 of a wrong path, a proxy's page, a refused login, 5xx: the registry is away (the
    # client waits), never a message's dead letter.
    for status, answer in [
        (404, b"<html>Not Found</html>"),
        (404, body({"error_code": 404, "message": "HTTP 404 Not Found"})),
        (401, body({"error_code": 401, "message": "Unauthorized"})),
        (503, b""),
        (200, b"<!DOCTYPE html>"),
        (200, body({"id": 7})),
    ]:
        with pytest.raises(RegistryUnavailableError, match=f"HTTP {status}"):
            schema_of(status, answer, 7, REGISTRY)


def test_a_schema_that_is_not_avro_is_refused_naming_its_type() -> None:
    answer = body({"schema": "syntax = 'proto3';", "schemaType": "PROTOBUF"})
    with pytest.raises(SchemaRegistryError, match=r"schema id 7 .* is a PROTOBUF schema"):
        schema_of(200, answer, 7, REGISTRY)


def test_a_registration_answers_an_id_or_the_registrys_refusal() -> None:
    assert registered_id(200, body({"id": 12}), "t-value", REGISTRY) == 12
    refusal = body({"error_code": 409, "message": "Incompatible artifact"})
    with pytest.raises(SchemaRegistryError, match=r"'t-value' \(HTTP 409, error 409\)"):
        registered_id(409, refusal, "t-value", REGISTRY)
    with pytest.raises(RegistryUnavailableError, match="POST /subjects/t-value/versions: HTTP 502"):
        registered_id(502, b"Bad Gateway", "t-value", REGISTRY)


def test_a_subject_is_escaped_whole() -> None:
    assert versions_path("db.t-value") == "/subjects/db.t-value/versions"
    assert versions_path("a/b c") == "/subjects/a%2Fb%20c/versions"


def test_the_login_leaves_the_address_url_decoded() -> None:
    url = "https://ticdc:p%40ss%3Aw@registry.example:8081/apis/ccompat/v7/"
    base, user, password = split_login(url)
    assert base == "https://registry.example:8081/apis/ccompat/v7"
    assert (user, password) == ("ticdc", "p@ss:w")
    assert split_login("http://registry:8081") == ("http://registry:8081", None, None)


def _login(header: str | None) -> str:
    assert header is not None and header.startswith("Basic ")
    return base64.b64decode(header.removeprefix("Basic ")).decode()


def test_the_password_setting_replaces_the_urls_and_the_address_shows_neither() -> None:
    settings = SchemaRegistrySettings.model_validate(
        {"url": "http://ticdc:in%2Furl@registry:8081/"}
    )
    address = RegistryAddress.from_settings(settings)
    assert _login(address.authorization) == "ticdc:in/url"
    assert address.shown == "http://ticdc:***@registry:8081"
    assert address.base == "http://registry:8081"
    given = SchemaRegistrySettings.model_validate({"url": settings.url, "password": "from-a-file"})
    assert _login(RegistryAddress.from_settings(given).authorization) == "ticdc:from-a-file"
    assert RegistryAddress.from_settings(SchemaRegistrySettings()).authorization is None
