from pathlib import Path

import pytest

from config.settings import Settings, load_settings
from tests.ticdc_sink.pipelines import ON_EVERY_SERVER, downstream_address
from ticdc_sink.demo import run_demo

pytestmark = pytest.mark.integration


@ON_EVERY_SERVER
def test_demo_replicates_and_verifies(
    downstream_settings: Settings,
    redis_client: object,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    # The server comes from a settings file, as `ticdc-sink demo --config FILE` takes it: the
    # demo's worker and sink must read the same file.
    config = tmp_path / "settings.toml"
    config.write_text(f'downstream = "{downstream_address(downstream_settings.downstream.url)}"\n')
    settings = load_settings(config)
    assert settings.downstream.url == downstream_settings.downstream.url
    assert run_demo(settings, str(config)) == 0
    out = capsys.readouterr().out
    assert f"replicating into {downstream_settings.downstream.url}" in out
    assert "verify: match" in out
    assert "DIFFER" not in out
