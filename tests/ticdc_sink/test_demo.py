import pytest

from config.settings import Settings
from ticdc_sink.demo import run_demo

pytestmark = pytest.mark.integration


def test_demo_round_trips_the_workload_in_commit_order(
    settings: Settings, redis_client: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_demo(settings) == 0
    out = capsys.readouterr().out
    assert "released 5000 of 5000 row changes" in out
    assert "commit-ts order across partitions: True" in out
