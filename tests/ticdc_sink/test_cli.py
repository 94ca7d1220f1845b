import pytest

from ticdc_sink import __version__
from ticdc_sink.cli import main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"ticdc-sink {__version__}"


def test_help_lists_the_commands_and_no_secret(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICDC_SINK_DOWNSTREAM", "mysql://app:hunter2@db:3306/")
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "services" in out and "decode" in out
    assert "hunter2" not in out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["nonsense"])
    assert exited.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
