"""The benchmarks' ``--downstream`` option."""

from __future__ import annotations

import argparse
import os

import pytest

from benchmarks.downstream import DOWNSTREAM_ENV, add_downstream_option, settings_for
from config.errors import ConfigError
from config.settings import default_of


def test_a_given_downstream_reaches_the_settings_and_the_processes_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Recorded by monkeypatch, so what settings_for writes is undone after the test.
    monkeypatch.setenv(DOWNSTREAM_ENV, default_of("downstream"))
    parser = argparse.ArgumentParser()
    add_downstream_option(parser)
    args = parser.parse_args(["--downstream", "mysql://bench:s3cret@127.0.0.1:4000/"])
    settings = settings_for(args.downstream)
    assert (settings.downstream.url.user, settings.downstream.url.port) == ("bench", 4000)
    assert settings.downstream.url.password.get_secret_value() == "s3cret"
    assert os.environ[DOWNSTREAM_ENV] == "mysql://bench:s3cret@127.0.0.1:4000/"


def test_without_one_the_settings_downstream_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DOWNSTREAM_ENV, "mysql://root@127.0.0.1:3307/")
    assert settings_for(None).downstream.url.port == 3307


def test_a_bad_downstream_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DOWNSTREAM_ENV, default_of("downstream"))
    with pytest.raises(ConfigError, match=DOWNSTREAM_ENV):
        settings_for("postgres://127.0.0.1/")
