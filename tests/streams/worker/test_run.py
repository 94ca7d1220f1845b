"""What a worker says at start about the protocol it is configured for."""

from __future__ import annotations

from typing import Any

import pytest

from config.settings import Protocol
from streams.worker.run import protocol_warnings


@pytest.mark.parametrize(("idle", "warned"), [(0.0, True), (2.0, False)])
def test_debezium_without_resolve_when_idle_is_warned_about(
    settings: Any, idle: float, warned: bool
) -> None:
    debezium = settings.updated({"protocol": Protocol.DEBEZIUM, "resolve_when_idle": idle})
    warnings = protocol_warnings(debezium)
    assert [w for w in warnings if "TICDC_SINK_RESOLVE_WHEN_IDLE" in w] == warnings
    assert len(warnings) == warned


@pytest.mark.parametrize("protocol", list(Protocol))
def test_canal_json_and_avro_alone_need_the_tidb_extension(
    settings: Any, protocol: Protocol
) -> None:
    warnings = protocol_warnings(settings.updated({"protocol": protocol, "resolve_when_idle": 1}))
    assert [w for w in warnings if "enable-tidb-extension" in w] == warnings
    assert len(warnings) == (protocol in (Protocol.CANAL_JSON, Protocol.AVRO))
