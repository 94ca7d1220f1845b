"""Structural mutations of JSON-like trees, whatever the protocol, and the fuzz's report.

A protocol's module (``open.py``, ...) builds a valid message as a tree of dicts, lists and
scalars from its grammar; :func:`mutated` changes that tree's STRUCTURE at any depth: a member
dropped, emptied, retyped (object, array, string, number, bool, null), duplicated (an array's
element twice, an object's key repeated in the JSON text), an unknown field added, members
TiCDC never writes together combined (the protocol's own ``combine``). :func:`dumps` writes a
tree as compact JSON the way Go does, repeated keys included.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

# Names and text from a small alphabet (ASCII, Latin-1, one CJK and one astral character, a
# control): generated fast, and all a decoder treats differently.
ALPHABET = st.sampled_from('abcXYZ_09 \t\x01"\\éß名😀')
NAMES = st.text(ALPHABET, min_size=1, max_size=8)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 63), (1 << 64) - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(ALPHABET, max_size=8),
)
ANY = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=3),
    max_leaves=6,
)
# What a member may be retyped to.
RETYPED = [{}, [], "", "x", 0, -1, 1 << 64, 1.5, True, None, [{}], {"x": 1}]
# The mutations Open Protocol's fuzz began with; a protocol may add "duplicate".
BASIC = ("drop", "empty", "retype", "unknown", "combine")
ALL = (*BASIC, "duplicate")

# combine(draw, node): add to ``node`` members TiCDC never writes with the ones there; False
# when ``node`` is no place for that.
Combine = Callable[[Any, Any], bool]


class Repeated(dict[str, Any]):
    """An object whose ``repeated`` key :func:`dumps` writes twice (while the dict holds it):
    first with ``first``, then with the value the dict holds (the last counts in Go's and
    Python's decoders)."""

    def __init__(self, source: dict[str, Any], repeated: str, first: Any) -> None:
        super().__init__(source)
        self.repeated = repeated
        self.first = first


@dataclass(frozen=True)
class Mutations:
    """How a protocol's trees are mutated: the names it knows (not added as unknown ones), its
    ``combine``, which mutations it takes and values of its own a member may be retyped to
    (numbers just past a field's range)."""

    known: frozenset[str]
    combine: Combine = field(default=lambda draw, node: False)
    ops: tuple[str, ...] = BASIC
    retyped: tuple[Any, ...] = ()


def paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every member's path in ``node``, ``node``'s own (``()``) first."""
    found = [path]
    if isinstance(node, dict):
        for name, child in node.items():
            found += paths(child, (*path, name))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += paths(child, (*path, index))
    return found


def _parent(root: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        root = root[step]
    return root


@st.composite
def mutated(draw: Any, tree: Any, how: Mutations) -> Any:
    """``tree`` (a list: its members are what may change) after one to three mutations."""
    doc = copy.deepcopy(tree)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(doc)[1:]))
        parent = _parent(doc, path)
        step = path[-1]
        node = parent[step]
        op = draw(st.sampled_from(how.ops))
        if op == "drop" and isinstance(parent, dict):
            del parent[step]
        elif op == "empty":
            parent[step] = _emptied(node)
        elif op == "unknown" and isinstance(node, dict):
            name = draw(NAMES.filter(lambda n: n not in how.known))
            node[name] = draw(ANY)
        elif op == "combine" and how.combine(draw, node):
            pass
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(step, copy.deepcopy(node))
        elif op == "duplicate" and isinstance(parent, dict):
            first = draw(st.sampled_from([*RETYPED, *how.retyped]) | ANY)
            _parent(doc, path[:-1])[path[-2]] = Repeated(parent, step, copy.deepcopy(first))
        else:
            retyped = st.sampled_from([*RETYPED, *how.retyped]) | ANY
            parent[step] = copy.deepcopy(draw(retyped))
    return doc


def _emptied(node: Any) -> Any:
    """An empty value of ``node``'s kind: an object, array or string; null for a scalar."""
    return next((kind() for kind in (dict, list, str) if isinstance(node, kind)), None)


def dumps(document: Any) -> bytes:
    """Compact JSON as Go writes it (integers past 64 bits too, which orjson does not write), a
    :class:`Repeated` object's key twice."""
    return _text(document).encode()


def _text(node: Any) -> str:
    if isinstance(node, dict):
        members = []
        for name, value in node.items():
            key = json.dumps(name, ensure_ascii=False)
            if isinstance(node, Repeated) and name == node.repeated:
                # Right before the value that counts: a decoder keeps a key where it first saw
                # it, so the tree's order stays the message's.
                members.append(f"{key}:{_text(node.first)}")
            members.append(f"{key}:{_text(value)}")
        return "{" + ",".join(members) + "}"
    if isinstance(node, list):
        return "[" + ",".join(_text(item) for item in node) + "]"
    return json.dumps(node, ensure_ascii=False)


@dataclass
class Tally:
    """One protocol's structural fuzz figures."""

    protocol: str
    cases: int = 0
    unjudged: int = 0
    valid: int = 0
    native_decoded: int = 0
    invalid: int = 0
    invalid_accepted: int = 0
    valid_refused: int = 0
    disagreements: int = 0
    other_exceptions: int = 0
    hangs: int = 0
    slowest_ms: float = 0.0
    rules: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def fail(self, what: str, message: tuple[bytes | None, bytes]) -> None:
        if len(self.failures) < 5:
            key, value = message
            self.failures.append(f"{self.protocol}: {what}: key {key!r:.200} value {value!r:.300}")

    @property
    def clean(self) -> bool:
        return not (
            self.invalid_accepted
            or self.valid_refused
            or self.disagreements
            or self.other_exceptions
            or self.hangs
        )


def table(tallies: list[Tally]) -> str:
    """The figures as docs/benchmarks.md "Fuzzing" shows them."""
    lines = [
        "| protocol | cases | valid | natively decoded | invalid | invalid accepted "
        "| valid refused | disagreements | other exceptions | hangs | slowest ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {t.protocol} (structure) | {t.cases:,} | {t.valid:,} | {t.native_decoded:,} | "
        f"{t.invalid:,} | "
        f"{t.invalid_accepted} | {t.valid_refused} | {t.disagreements} | "
        f"{t.other_exceptions} | {t.hangs} | {t.slowest_ms:.1f} |"
        for t in tallies
    ]
    return "\n".join(lines)
