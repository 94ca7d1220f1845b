"""The README's settings tables and the settings model name the same variables, under the same
groups and TOML keys, and say the same of each: a setting's description is its README meaning."""

from __future__ import annotations

import re
from pathlib import Path

from config.settings import ENV_PREFIX, SETTINGS, load_settings
from core.native import NATIVE_ENV
from ticdc_sink.services.base import STATE_DIR_ENV

README = Path(__file__).parents[2] / "README.md"
# Read from the environment by the module that needs them, not settings of a pipeline.
PROCESS_VARIABLES = {NATIVE_ENV, STATE_DIR_ENV}
# A cell may name siblings: `TICDC_SINK_MAX_STAGED_ROWS` / `_BYTES`, or two full names.
_CELL_NAME = re.compile(r"`(TICDC_SINK_[A-Z0-9_]+|_[A-Z0-9_]+)`")


def documented_variables(readme: str) -> set[str]:
    """Every variable named in the first cell of a row of the README's Configuration table."""
    section = readme.split("\n## Configuration", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        first_cell = line.split("|")[1]
        found = _CELL_NAME.findall(first_cell)
        if not found:
            continue
        head = found[0]
        names.update(name if name.startswith(ENV_PREFIX) else sibling(head, name) for name in found)
    return names


def readme_rows(readme: str) -> dict[str, tuple[str, str, str]]:
    """Each setting row of the Configuration tables: variable -> (the group its heading names,
    its TOML key, its meaning)."""
    section = readme.split("\n## Configuration", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str, str]] = {}
    heading = ""
    for line in section.splitlines():
        if line.startswith("### "):
            heading = line.removeprefix("### ").split()[0].strip("[]:`")
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) == 4 and _CELL_NAME.fullmatch(cells[0]):
            rows[cells[0].strip("`")] = (heading, cells[1].strip("`"), cells[3])
    return rows


def sibling(head: str, suffix: str) -> str:
    """``head`` with as many of its last words as ``suffix`` has replaced by ``suffix``:
    `TICDC_SINK_DOWNSTREAM_SSL_MODE` and `_SSL_CA` make `TICDC_SINK_DOWNSTREAM_SSL_CA`."""
    words = suffix.count("_")
    return head.rsplit("_", words)[0] + suffix


def test_every_setting_is_in_the_readme_table_and_every_row_is_a_setting() -> None:
    documented = documented_variables(README.read_text())
    fields = {doc.variable for doc in SETTINGS}
    assert fields - documented == set(), "settings missing from the README's table"
    assert documented - fields - PROCESS_VARIABLES == set(), "README rows that are no setting"


def test_a_row_with_a_sibling_documents_both() -> None:
    table = (
        "\n## Configuration\n| `TICDC_SINK_MAX_STAGED_ROWS` / `_BYTES` | 1 | x |\n"
        "| `TICDC_SINK_ROUTES` / `TICDC_SINK_SKIP_TABLES` | | y |\n"
        "| `TICDC_SINK_DOWNSTREAM_SSL_MODE` / `_SSL_CA` | | z |\n## Next\n"
    )
    assert documented_variables(table) == {
        ENV_PREFIX + "MAX_STAGED_ROWS",
        ENV_PREFIX + "MAX_STAGED_BYTES",
        ENV_PREFIX + "ROUTES",
        ENV_PREFIX + "SKIP_TABLES",
        ENV_PREFIX + "DOWNSTREAM_SSL_MODE",
        ENV_PREFIX + "DOWNSTREAM_SSL_CA",
    }


def test_every_setting_is_described() -> None:
    undescribed = [doc.variable for doc in SETTINGS if len(doc.description.split()) < 2]
    assert undescribed == []


def test_the_readme_gives_each_setting_its_group_key_and_description() -> None:
    rows = readme_rows(README.read_text())
    for doc in SETTINGS:
        group, key, meaning = rows[doc.variable]
        assert group == (doc.group or "pipeline"), doc.variable
        assert key == ".".join(doc.path), doc.variable
        assert meaning == doc.description, doc.variable


def test_a_row_is_read_with_its_heading_key_and_meaning() -> None:
    table = (
        "\n## Configuration\n### [kafka] Kafka: x\n| variable | TOML key | default | meaning |\n"
        "|---|---|---|---|\n| `TICDC_SINK_KAFKA` | `kafka.bootstrap` | `h:1` | servers, a list |\n"
        "## Next\n"
    )
    assert readme_rows(table) == {
        ENV_PREFIX + "KAFKA": ("kafka", "kafka.bootstrap", "servers, a list")
    }


def test_the_readmes_toml_example_reads(tmp_path: Path) -> None:
    section = README.read_text().split("\n## Configuration", 1)[1].split("\n## ", 1)[0]
    example = tmp_path / "sink.toml"
    example.write_text(section.split("```toml\n", 1)[1].split("```", 1)[0])
    settings = load_settings(example, environ={})
    assert (settings.group, settings.kafka.bootstrap, settings.sink.batch_rows) == (
        "orders",
        "broker-1:9092",
        100_000,
    )
