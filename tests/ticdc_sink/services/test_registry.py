"""The local schema registry (`ticdc-sink services up --registry`): Apicurio's Confluent API
on loopback, BACKWARD compatibility as a Confluent registry has by default, started once."""

from __future__ import annotations

import json
import urllib.request

import pytest

from ticdc_sink.services.base import ServiceState
from ticdc_sink.services.manager import services_up
from ticdc_sink.services.registry import RegistryService


@pytest.mark.integration
def test_up_again_reuses_the_running_registry_with_backward_compatibility(
    schema_registry_url: str,
) -> None:
    service = RegistryService()
    assert schema_registry_url == service.url == "http://127.0.0.1:8081/apis/ccompat/v7"
    pid = service.our_pid()
    assert pid is not None, "the registry was not started by ticdc-sink services up --registry"
    started = {s.name: state for s, state in services_up(registry=True)}
    assert started["registry"] is ServiceState.OURS
    assert service.our_pid() == pid
    with urllib.request.urlopen(f"{service.url}/config", timeout=5) as answer:
        assert json.load(answer) == {"compatibilityLevel": "BACKWARD"}


def test_only_the_option_starts_it_and_it_starts_last() -> None:
    from ticdc_sink.services.manager import all_services

    assert "registry" not in {s.name for s in all_services(secure=True, spark=True, tidb=True)}
    assert [s.name for s in all_services(tidb=True, registry=True)][-1] == "registry"
    # Its secured front comes with both options, after the registry it stands in front of.
    names = [s.name for s in all_services(secure=True, registry=True)]
    assert names[-2:] == ["registry", "registry-secure"]
    assert "registry-secure" not in {s.name for s in all_services(secure=True)}


def _call(url: str, method: str = "GET", body: object = None) -> tuple[int, object]:
    """``method`` of ``url`` with a JSON ``body``: the status and the JSON answer (None: none)."""
    import urllib.error

    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read()
            return answer.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


@pytest.mark.integration
def test_a_subject_takes_another_layout_only_through_apicurios_own_rule(
    schema_registry_url: str, unique: str
) -> None:
    """What a TiCDC Avro changefeed needs when a table is created again with another layout
    (README, "Apicurio Registry and TiCDC"): the global BACKWARD rule refuses the new schema; a
    Confluent-style `PUT /config/<subject>` is taken but changes nothing; the artifact's own
    COMPATIBILITY rule through Apicurio's API lets it in."""
    base = schema_registry_url.removesuffix("/apis/ccompat/v7")
    subject = f"{unique}-value"
    versions = f"{schema_registry_url}/subjects/{subject}/versions"
    artifact = f"{base}/apis/registry/v2/groups/default/artifacts/{subject}"

    def schema(field: str, kind: str) -> dict[str, str]:
        fields = [{"name": field, "type": kind}]
        return {"schema": json.dumps({"type": "record", "name": "r", "fields": fields})}

    assert _call(f"{base}/apis/registry/v2/admin/rules/COMPATIBILITY") == (
        200,
        {"type": "COMPATIBILITY", "config": "BACKWARD"},
    )
    try:
        assert _call(versions, "POST", schema("a", "int"))[0] == 200
        assert _call(versions, "POST", schema("b", "string"))[0] == 409
        none = {"compatibility": "NONE"}
        assert _call(f"{schema_registry_url}/config/{subject}", "PUT", none) == (200, none)
        assert _call(versions, "POST", schema("b", "string"))[0] == 409  # not enforced
        rule = {"type": "COMPATIBILITY", "config": "NONE"}
        assert _call(f"{artifact}/rules", "POST", rule)[0] == 204
        assert _call(versions, "POST", schema("b", "string"))[0] == 200
    finally:
        _call(artifact, "DELETE")
