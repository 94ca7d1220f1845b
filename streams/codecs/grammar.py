"""What every protocol's grammar module (``streams/codecs/<protocol>_grammar.py``) is made of: named
rules, each with the part of a message it governs, what TiCDC's encoder writes there and
examples breaking it, and the Markdown table of them docs/architecture.md shows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

# An example message: JSON text for the JSON protocols, a description to encode for a binary one.
Example = TypeVar("Example")


@dataclass(frozen=True, slots=True)
class Rule(Generic[Example]):
    """One rule: its name (as dead letters say it), the part of a message it governs, what
    TiCDC writes there, and messages breaking it."""

    name: str
    part: str
    text: str
    examples: tuple[Example, ...]


def find(rules: Sequence[Rule[Example]], name: str) -> Rule[Example]:
    """The rule of that name."""
    return next(found for found in rules if found.name == name)


def markdown(rules: Sequence[Rule[Example]]) -> str:
    """The rules as the Markdown table docs/architecture.md holds."""
    lines = ["| rule | part | what TiCDC writes |", "|---|---|---|"]
    lines += [f"| `{r.name}` | {r.part} | {r.text} |" for r in rules]
    return "\n".join(lines)
