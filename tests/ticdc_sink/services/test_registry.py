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
