"""Reading the settings: a name that is no setting is refused, in the environment as in a file."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from config.errors import ConfigError
from config.names import ENV_PREFIX, FILE_SUFFIX
from config.reading import NOT_SETTINGS
from config.settings import NAMES, SETTINGS, Settings, default_of, load_settings

ROOT = Path(__file__).parents[2]
# A whole variable: a name cut short before a wildcard (`TICDC_SINK_MAX_STAGED_*`) or a
# placeholder (`TICDC_SINK_{name}`) ends in "_" and is left out.
_VARIABLE = re.compile(r"TICDC_SINK_[A-Z0-9_]+")
# Where the project sets or documents variables.
_SCANNED = (".py", ".md", ".toml")
_SCANNED_NAMES = {"Makefile", "Procfile", "run"}
_SKIPPED_FOLDERS = {"target", "node_modules", "__pycache__"}


def test_a_misspelt_variable_is_refused_naming_the_setting_not_the_value() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={ENV_PREFIX + "REDIS_PASWORD": "hunter2"})
    message = str(caught.value)
    assert message == (
        "invalid settings: unknown variable TICDC_SINK_REDIS_PASWORD; "
        "did you mean TICDC_SINK_REDIS_PASSWORD?"
    )
    assert "\n" not in message


def test_every_unknown_variable_is_named_in_one_line() -> None:
    environ = {ENV_PREFIX + "BATCH_ROW": "5", ENV_PREFIX + "COLOUR": "blue", "OTHER": "x"}
    with pytest.raises(ConfigError) as caught:
        load_settings(environ=environ)
    assert str(caught.value) == (
        "invalid settings: unknown variable TICDC_SINK_BATCH_ROW; did you mean "
        "TICDC_SINK_BATCH_ROWS?; unknown variable TICDC_SINK_COLOUR; `ticdc-sink config "
        "describe` lists every setting"
    )


def test_a_misspelt_secret_file_variable_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"did you mean TICDC_SINK_REDIS_PASSWORD_FILE\?"):
        load_settings(environ={ENV_PREFIX + "REDIS_PASSWORD_FIL": "/run/secrets/redis"})


def test_a_variable_is_spelt_in_capitals() -> None:
    with pytest.raises(ConfigError, match=r"did you mean TICDC_SINK_BATCH_ROWS\?"):
        load_settings(environ={ENV_PREFIX + "batch_rows": "5"})


def test_the_variables_that_are_no_settings_are_let_through() -> None:
    assert load_settings(environ=dict.fromkeys(NOT_SETTINGS, "0")) == Settings()
    assert not set(NOT_SETTINGS) & {doc.variable for doc in SETTINGS}


def project_variables() -> set[str]:
    """Every whole ``TICDC_SINK_*`` name the project's code, docs and scripts spell out (but
    this file, which misspells them on purpose)."""
    found: set[str] = set()
    for folder, folders, files in os.walk(ROOT):
        folders[:] = [
            name
            for name in folders
            if (name == ".ci" or not name.startswith(".")) and name not in _SKIPPED_FOLDERS
        ]
        for name in files:
            path = Path(folder) / name
            if (name.endswith(_SCANNED) or name in _SCANNED_NAMES) and path != Path(__file__):
                text = path.read_text(errors="replace")
                found.update(v for v in _VARIABLE.findall(text) if not v.endswith("_"))
    return found


def test_every_variable_the_project_names_is_read() -> None:
    secret_files = {NAMES.setting(name).variable + FILE_SUFFIX for name in NAMES.secrets}
    known = {doc.variable for doc in SETTINGS} | secret_files | set(NOT_SETTINGS)
    assert project_variables() - known == set()


def test_an_unknown_file_key_names_the_closest_setting(tmp_path: Path) -> None:
    config = tmp_path / "sink.toml"
    config.write_text("batch_row = 5\n")
    with pytest.raises(ConfigError, match="unknown setting 'batch_row'; did you mean 'batch_rows'"):
        load_settings(config, environ={})
    config.write_text("[spark]\nmin_row = 5\n")
    with pytest.raises(ConfigError, match=r"'min_row' in \[spark\]; did you mean 'min_rows'"):
        load_settings(config, environ={})


def test_each_default_is_declared_as_a_value_of_its_setting() -> None:
    defaults = Settings()
    for doc in SETTINGS:
        assert defaults.updated({doc.name: default_of(doc.name)}) == defaults, doc.name
    assert default_of("downstream") == "mysql://root@127.0.0.1:3306/"
    assert default_of("web_port") == 6066
