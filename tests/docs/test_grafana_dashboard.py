"""docs/grafana/ticdc-sink.json reads exactly the metrics ticdc-sink exports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import REGISTRY

import core.metrics
import spark_sink.metrics
import spark_sink.stage_timing
import streams.metrics

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "ticdc-sink.json"
METRIC = re.compile(r"\bticdc_sink_[a-z_]+\b")
# The series names each kind of metric family exposes.
SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
}


def _exported() -> dict[str, str]:
    """Every series name ticdc-sink's metric families expose -> its family."""
    assert (
        core.metrics and streams.metrics and spark_sink.metrics and spark_sink.stage_timing
    )  # imported for their registrations
    names = {}
    for family in REGISTRY.collect():
        if family.name.startswith("ticdc_sink_"):
            for suffix in SUFFIXES[family.type]:
                names[family.name + suffix] = family.name
    return names


def _expressions(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found.append(query["query"])
    return found


def test_every_expression_reads_an_exported_metric_and_every_metric_is_shown() -> None:
    dashboard = orjson.loads(DASHBOARD.read_bytes())
    exported = _exported()
    used = {name for expr in _expressions(dashboard) for name in METRIC.findall(expr)}
    assert used, "the dashboard reads no metric"
    assert used <= exported.keys(), f"not exported: {sorted(used - exported.keys())}"
    assert {exported[name] for name in used} == set(exported.values())


def test_panels_have_distinct_ids_and_titles() -> None:
    panels = orjson.loads(DASHBOARD.read_bytes())["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    assert len({p["title"] for p in panels}) == len(panels)
