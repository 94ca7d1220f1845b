"""The docs name only files and tests that exist: the map is the code's, not a memory of it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "docs" / "architecture.md", ROOT / "docs" / "scaling.md", ROOT / "README.md"]
# A path under one of the project's own folders, optionally followed by ::name (a test, a class).
NAMED = re.compile(
    r"(?<![\w/.-])((?:config|core|streams|spark_sink|ticdc_sink|native|benchmarks|tests)"
    r"/[\w/.-]*\w)(?:::(\w+))?"
)
# The packages whose modules are held to "one idea, a size one can hold" (tests and benchmarks
# are not), the size past which a module says why in its docstring, and how it says so.
PACKAGES = ("config", "core", "streams", "spark_sink", "ticdc_sink", "workload")
MODULE_LINES = 400
SAYS_WHY = "on purpose"


def _named(text: str) -> set[tuple[str, str | None]]:
    return {(m.group(1), m.group(2)) for m in NAMED.finditer(text)}


def test_the_pattern_finds_paths_and_the_names_after_them() -> None:
    text = "`core/model.py`, tests/x/test_y.py::test_z[a], `spark_sink/load/` and config.settings"
    assert _named(text) == {
        ("core/model.py", None),
        ("tests/x/test_y.py", "test_z"),
        ("spark_sink/load", None),
    }


def _missing(path: str, name: str | None) -> bool:
    found = ROOT / path
    if not found.exists():
        return True
    if name is None or found.is_dir():
        return False
    return re.search(rf"\b(def|class|fn|struct)\s+{re.escape(name)}\b", found.read_text()) is None


def test_every_file_and_test_the_docs_name_exists() -> None:
    missing = sorted(
        f"{doc.name}: {path}" + (f"::{name}" if name else "")
        for doc in DOCS
        for path, name in _named(doc.read_text())
        if "*" not in path and _missing(path, name)
    )
    assert not missing, "named but missing:\n" + "\n".join(missing)


def test_a_module_past_the_usual_size_says_why_in_its_docstring() -> None:
    unexplained = sorted(
        f"{path.relative_to(ROOT)} ({lines} lines)"
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MODULE_LINES
        and SAYS_WHY not in (ast.get_docstring(ast.parse(path.read_text())) or "")
    )
    assert not unexplained, (
        f"over {MODULE_LINES} lines without saying why ({SAYS_WHY!r}) in the docstring:\n"
        + "\n".join(unexplained)
    )
