import pytest

from config.settings import Settings
from ticdc_sink.demo import run_demo

pytestmark = pytest.mark.integration


def test_demo_replicates_and_verifies(
    settings: Settings, redis_client: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_demo(settings) == 0
    out = capsys.readouterr().out
    assert "verify: match" in out
    assert "DIFFER" not in out
