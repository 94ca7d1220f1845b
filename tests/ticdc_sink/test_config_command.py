"""`ticdc-sink config describe`: every setting, its value here and its description."""

from __future__ import annotations

import orjson
import pytest

from config.settings import SETTINGS
from ticdc_sink.cli import main


def test_describe_shows_every_setting_with_the_models_description(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICDC_SINK_BATCH_ROWS", "1234")
    monkeypatch.setenv("TICDC_SINK_DOWNSTREAM", "mysql://app:s3cret@db:3307/")
    assert main(["config", "describe", "--json"]) == 0
    entries = orjson.loads(capsys.readouterr().out)
    assert [e["variable"] for e in entries] == [doc.variable for doc in SETTINGS]
    assert [e["description"] for e in entries] == [doc.description for doc in SETTINGS]
    shown = {e["variable"]: e for e in entries}
    assert (shown["TICDC_SINK_BATCH_ROWS"]["group"], shown["TICDC_SINK_BATCH_ROWS"]["key"]) == (
        "sink",
        "batch_rows",
    )
    assert shown["TICDC_SINK_BATCH_ROWS"]["value"] == "1234"
    assert shown["TICDC_SINK_DOWNSTREAM"]["value"] == "mysql://app:***@db:3307/"


def test_describe_as_text_groups_the_settings_and_masks_secrets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICDC_SINK_REDIS_PASSWORD", "hunter2")
    assert main(["config", "describe"]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out
    assert "  TICDC_SINK_REDIS_PASSWORD=***\n" in out
    headings = [line for line in out.splitlines() if line.startswith("[")]
    assert [h.split("]")[0] + "]" for h in headings] == [
        "[kafka]",
        "[redis]",
        "[downstream]",
        "[worker]",
        "[large_messages]",
        "[schema_registry]",
        "[sink]",
        "[spark]",
        "[logging]",
        "[metrics]",
    ]
    for doc in SETTINGS:
        assert f"      {doc.description}\n" in out
