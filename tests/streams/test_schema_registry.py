"""The schema registry client against the real registry (`ticdc-sink services up --registry`):
schemas registered and fetched by id, cached in memory and in Redis, an unknown id named, the
password never shown, an outage waited out."""

from __future__ import annotations

import json

import pytest

from config.errors import SchemaRegistryError, UnknownSchemaError
from config.settings import Settings
from streams.schema_registry import SchemaRegistry

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
