"""Structural mutations of an Avro datum, within its writer schema, whatever the protocol: the
Avro counterpart of mutate.py's JSON trees (used by simple_avro.py).

A datum is what fastavro writes: records as dicts, arrays as lists, maps as dicts, a union's
value either plain or, where its branch must be named, a :class:`Branch`. Every value of the
datum is a site typed by the schema; :func:`mutated` changes one to three sites, each only as the
schema still allows (the bytes must stay Avro of that schema: what is not is the byte fuzz's):

- ``drop``: a map's entry or an array's element removed; a union member with a null branch set
  to null (what an Avro record has for a field JSON would omit). A required field cannot go.
- ``empty``: a string, bytes, array or map emptied.
- ``retype``: a union member given another branch (a value of that branch), a value replaced by
  another of its own type that TiCDC never writes (0, -1, past 32 bits, the extremes of a long; a
  string named like other fields; an enum's other symbol; the other boolean).
- ``duplicate``: an array's element twice.
- ``unknown``: a map given a key it did not have. An unknown record field has no bytes in Avro
  (the writer drops it) and a repeated map key none through a writer: neither is generated.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from tests.streams.codecs.structure.mutate import ALPHABET, NAMES

OPS = ("drop", "empty", "retype", "duplicate", "unknown")
_LONGS = (0, 1, -1, 2, 3, (1 << 31) - 1, 1 << 32, (1 << 63) - 1, -(1 << 63))
_INTS = (0, 1, -1, 2, (1 << 31) - 1, -(1 << 31))
_FLOATS = (0.0, -1.5, 1e300, 5e-324)
_BYTES = (b"", b"7", b"\xff\xfe", "名".encode())
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


@dataclass
class Branch:
    """A union member whose branch is named (a record among several, a long among numbers)."""

    name: str
    value: Any


# A site: its schema type, its value and how to replace it.
Site = tuple[Any, Any, Callable[[Any], None]]


@dataclass(frozen=True)
class Schema:
    """A writer schema's named types (by full name) and, for each record the mutations may put
    where none was, a strategy of its valid values; ``strings`` are names a string may become."""

    named: dict[str, Any]
    records: dict[str, st.SearchStrategy[Any]]
    strings: tuple[str, ...] = ()

    def resolve(self, kind: Any) -> Any:
        return self.named.get(kind, kind) if isinstance(kind, str) else kind


def named_types(schemas: list[dict[str, Any]]) -> dict[str, Any]:
    """The named types of a list of schema JSON records, by full name (their fields' names of
    other types left as names)."""
    found: dict[str, Any] = {}

    def visit(kind: Any, namespace: str) -> None:
        if isinstance(kind, list):
            for branch in kind:
                visit(branch, namespace)
        elif isinstance(kind, dict):
            if kind.get("type") in ("record", "enum"):
                namespace = kind.get("namespace", namespace)
                found[f"{namespace}.{kind['name']}"] = kind
                for field in kind.get("fields", ()):
                    visit(field["type"], namespace)
            elif kind.get("type") == "array":
                visit(kind["items"], namespace)
            elif kind.get("type") == "map":
                visit(kind["values"], namespace)

    for schema in schemas:
        visit(schema, "")
    return found


def _kind(schema: Schema, kind: Any) -> str:
    kind = schema.resolve(kind)
    if isinstance(kind, list):
        return "union"
    return str(kind["type"]) if isinstance(kind, dict) else str(kind)


def _branch(schema: Schema, union: list[Any], value: Any) -> Any:
    """The branch of ``union`` a value is written as: its named one, null, else the first."""
    if isinstance(value, Branch):
        return next(b for b in union if _name(schema, b) == value.name)
    if value is None:
        return "null"
    return next(b for b in union if b != "null")


def _wrap(schema: Schema, union: list[Any], branch: Any, value: Any) -> Any:
    """``value`` as a member of ``union`` written as ``branch``: named where the union has more
    than one branch besides null."""
    if branch == "null" or len([b for b in union if b != "null"]) == 1:
        return value
    return Branch(_name(schema, branch), value)


def _name(schema: Schema, kind: Any) -> str:
    resolved = schema.resolve(kind)
    if isinstance(kind, str) and kind in schema.named:
        return kind
    return str(resolved) if isinstance(resolved, str) else str(resolved["type"])


def sites(schema: Schema, kind: Any, value: Any, put: Callable[[Any], None]) -> list[Site]:
    """Every value of ``value`` (of type ``kind``), its own first."""
    found: list[Site] = [(kind, value, put)]
    resolved = schema.resolve(kind)
    if isinstance(resolved, list):
        branch = _branch(schema, resolved, value)
        inner = value.value if isinstance(value, Branch) else value
        holder = value if isinstance(value, Branch) else None

        def put_inner(new: Any, holder: Branch | None = holder) -> None:
            if holder is None:
                put(new)
            else:
                holder.value = new

        return found + sites(schema, branch, inner, put_inner)
    if not isinstance(resolved, dict):
        return found
    if resolved["type"] == "record" and isinstance(value, dict):
        for field in resolved["fields"]:
            name = field["name"]
            found += sites(schema, field["type"], value.get(name), _setter(value, name))
    elif resolved["type"] == "array" and isinstance(value, list):
        for index, item in enumerate(value):
            found += sites(schema, resolved["items"], item, _setter(value, index))
    elif resolved["type"] == "map" and isinstance(value, dict):
        for key, item in value.items():
            found += sites(schema, resolved["values"], item, _setter(value, key))
    return found


def _setter(container: Any, step: Any) -> Callable[[Any], None]:
    def put(new: Any) -> None:
        container[step] = new

    return put


@st.composite
def value_of(draw: Any, schema: Schema, kind: Any) -> Any:
    """A value the schema lets ``kind`` hold (a named record: one of the subject's)."""
    if isinstance(kind, str) and kind in schema.records:
        return draw(schema.records[kind])
    resolved = schema.resolve(kind)
    if isinstance(resolved, list):
        branch = draw(st.sampled_from(resolved))
        return _wrap(schema, resolved, branch, draw(value_of(schema, branch)))
    name = resolved if isinstance(resolved, str) else resolved["type"]
    if name == "enum":
        return draw(st.sampled_from(resolved["symbols"]))
    if name == "array":
        return draw(st.lists(value_of(schema, resolved["items"]), max_size=2))
    if name == "map":
        return draw(st.dictionaries(NAMES, value_of(schema, resolved["values"]), max_size=2))
    return draw(_primitive(schema, name))


def _primitive(schema: Schema, name: str) -> st.SearchStrategy[Any]:
    if name == "null":
        return st.none()
    if name == "boolean":
        return st.booleans()
    if name == "int":
        return st.sampled_from(_INTS)
    if name == "long":
        return st.sampled_from(_LONGS)
    if name in ("float", "double"):
        return st.sampled_from(_FLOATS)
    if name == "bytes":
        return st.sampled_from(_BYTES)
    return st.sampled_from(("", *schema.strings)) | st.text(ALPHABET, max_size=12)


@st.composite
def mutated(draw: Any, schema: Schema, kind: Any, datum: Any, most: int = 3) -> Any:
    """``datum`` (of type ``kind``, not changed) after one to ``most`` mutations."""
    holder = [copy.deepcopy(datum)]
    for _ in range(draw(st.integers(1, most))):
        # A null's own site holds nothing to change (its union's site does). Drawn uniformly:
        # hypothesis's own draws favour the first of a list (here a record's first field).
        found = [s for s in sites(schema, kind, holder[0], _setter(holder, 0)) if s[0] != "null"]
        site_kind, value, put = draw(st.randoms(use_true_random=False)).choice(found[1:])
        _mutate(draw, schema, draw(st.sampled_from(OPS)), site_kind, value, put)
    return holder[0]


def _mutate(draw: Any, schema: Schema, op: str, kind: Any, value: Any, put: Any) -> None:
    resolved = schema.resolve(kind)
    what = _kind(schema, kind)
    if what == "union":
        others = [b for b in resolved if b != _branch(schema, resolved, value)]
        if op == "drop" and "null" in resolved:
            put(None)
        elif others:
            branch = draw(st.sampled_from(others))
            put(_wrap(schema, resolved, branch, draw(value_of(schema, branch))))
    elif what in ("array", "map") and value:
        keys = list(range(len(value))) if what == "array" else list(value)
        key = draw(st.sampled_from(keys))
        if op == "drop":
            del value[key]
        elif op == "duplicate" and what == "array":
            value.insert(key, copy.deepcopy(value[key]))
        elif op == "unknown" and what == "map":
            value[draw(NAMES.filter(lambda n: n not in value))] = copy.deepcopy(value[key])
        else:
            put(type(value)())
    elif what == "enum":
        put(draw(st.sampled_from([s for s in resolved["symbols"] if s != value] or [value])))
    elif what == "boolean":
        put(not value)
    elif op == "empty" and what in ("string", "bytes"):
        put(type(value)())
    elif what in _PRIMITIVES:
        put(draw(_primitive(schema, what)))


def native(datum: Any) -> Any:
    """``datum`` as fastavro's writer takes it: each :class:`Branch` a (name, value) tuple."""
    if isinstance(datum, Branch):
        return (datum.name, native(datum.value))
    if isinstance(datum, dict):
        return {key: native(value) for key, value in datum.items()}
    if isinstance(datum, list):
        return [native(item) for item in datum]
    return datum
