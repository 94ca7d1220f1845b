"""The structural fuzzer of Open Protocol: messages generated from its grammar
(streams/codecs/open_grammar.py) by hypothesis strategies, their STRUCTURE mutated (a member
dropped, emptied or retyped to object/array/string/number/bool/null at any depth, fields TiCDC
never writes together combined, unknown fields added), each judged three ways: the grammar (the
oracle below, its own reading of the rules) says valid or which rule it breaks, the Python codec
must accept exactly the valid ones and refuse the rest with a ``GrammarError``, and the native
decoder must hand back every invalid one and decode a valid one as Python does. Byte mutations of
real messages (tests/streams/codecs/fuzz.py) almost never give well-formed JSON of the wrong shape:
this does nothing else. ``make fuzz`` runs ``python -m tests.streams.codecs.fuzz_structure``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from config.errors import GrammarError, TicdcSinkError
from core.model import integer_range
from streams.codecs import open_grammar as grammar
from streams.codecs.open_protocol import OpenProtocolCodec

# Column types whose values the oracle judges: integers signed and unsigned, VARCHAR, DOUBLE and
# a code the model does not know (TEXT/BLOB and binary CHAR carry encoded text: not generated).
TYPES = [1, 3, 8, 15, 5, 200]
FLAGS = [0, 2, 10, 64, 128, 4096]
# Known key fields whose absence or type the grammar leaves open (not added as unknown ones).
_KNOWN = {"ts", "t", "scm", "tbl", "rid", "ptn", "ohk", "ccl", "u", "p", "d", "q", "f", "h", "v"}
# Names and text from a small alphabet (ASCII, Latin-1, one CJK and one astral character, a
# control): generated fast, and all a decoder treats differently.
_ALPHABET = st.sampled_from('abcXYZ_09 \t\x01"\\éß名😀')
_NAMES = st.text(_ALPHABET, min_size=1, max_size=8)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 63), (1 << 64) - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(_ALPHABET, max_size=8),
)
_ANY = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_NAMES, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def columns(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(TYPES))
    flags = draw(st.sampled_from(FLAGS))
    allowed = integer_range(kind, bool(flags & 0x80))
    if allowed is not None:
        value: Any = draw(st.none() | st.integers(allowed.start, allowed.stop - 1))
    elif kind == 5:
        value = draw(st.none() | st.floats(allow_nan=False, allow_infinity=False))
    else:
        value = draw(st.none() | st.text(_ALPHABET, max_size=8))
    column: dict[str, Any] = {"t": kind}
    if flags & 2:
        column["h"] = True
    column["f"] = flags
    column["v"] = value
    return column


@st.composite
def column_names(draw: Any) -> str:
    """A column name; one in twenty about the longest TiDB takes, some past it."""
    if draw(st.integers(0, 19)):
        return str(draw(_NAMES))
    length = draw(st.integers(grammar.MAX_NAME - 1, grammar.MAX_NAME + 1))
    return str(draw(st.text(_ALPHABET, min_size=length, max_size=length)))


def images() -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(column_names(), columns(), min_size=1, max_size=4)


@st.composite
def events(draw: Any) -> tuple[dict[str, Any], Any]:
    """One valid event: its key and value as TiCDC writes them."""
    ts = draw(st.integers(0, (1 << 64) - 1))
    kind = draw(st.sampled_from([1, 1, 1, 2, 3]))
    if kind == 3:
        return {"ts": ts, "t": 3}, None
    schema, table = draw(_NAMES), draw(_NAMES)
    if kind == 2:
        key = {"ts": ts, "scm": schema, "tbl": table, "t": 2}
        query = "CREATE TABLE t" + draw(st.text(_ALPHABET, max_size=8))
        return key, {"q": query, "t": draw(st.integers(0, 70))}
    key = {"ts": ts, "scm": schema, "tbl": table, "t": 1}
    shape = draw(st.sampled_from(["u", "up", "d"]))
    value = {side: draw(images()) for side in shape}
    return key, value


# The oracle's word for a message it leaves to other tests (a claim check, encoded text).
UNJUDGED = "unjudged"
# An event whose value frame is empty (a resolved event's, its key made another's): no JSON.
NOT_JSON = "not JSON"
# What a value may be retyped to, by kind.
_RETYPED = [{}, [], "", "x", 0, -1, 1 << 64, 1.5, True, None, [{}], {"x": 1}]


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(node, dict):
        for name, child in node.items():
            found += _paths(child, (*path, name))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += _paths(child, (*path, index))
    return found


def _parent(root: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        root = root[step]
    return root


@st.composite
def mutated(draw: Any, event: tuple[dict[str, Any], Any]) -> tuple[Any, Any]:
    """``event`` (key, value) with one to three structural mutations."""
    doc: list[Any] = copy.deepcopy(list(event))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)[1:]))
        parent = _parent(doc, path)
        step = path[-1]
        node = parent[step]
        op = draw(st.sampled_from(["drop", "empty", "retype", "unknown", "combine"]))
        if op == "drop" and isinstance(parent, dict):
            del parent[step]
        elif op == "empty":
            parent[step] = type(node)() if isinstance(node, dict | list | str) else None
        elif op == "unknown" and isinstance(node, dict):
            name = draw(_NAMES.filter(lambda n: n not in _KNOWN))
            node[name] = draw(_ANY)
        elif op == "combine" and isinstance(node, dict) and ({"u", "d", "p"} & set(node)):
            # A row value's image TiCDC never combines with the ones there.
            node[draw(st.sampled_from(["u", "p", "d"]))] = draw(images())
        else:
            parent[step] = copy.deepcopy(draw(st.sampled_from(_RETYPED) | _ANY))
    return doc[0], doc[1]


def verdict(key: Any, value: Any) -> str | None:
    """The grammar's judgement of one event: the rule it breaks, None when valid."""
    if not isinstance(key, dict):
        return grammar.KEY_OBJECT
    ts = key.get("ts")
    if type(ts) is not int or not 0 <= ts < 1 << 64:
        return grammar.KEY_TS
    kind = key.get("t")
    if type(kind) is int and kind == 3:
        return None
    for name in ("scm", "tbl"):
        if key.get(name) is not None and type(key.get(name)) is not str:
            return grammar.KEY_NAMES
    if type(kind) is not int or kind not in (1, 2):
        return grammar.KEY_TYPE
    if value is None:
        return NOT_JSON
    if kind == 2:
        query = value.get("q") if isinstance(value, dict) else None
        ddl_type = value.get("t", 0) if isinstance(value, dict) else None
        if type(query) is not str or not query.strip() or type(ddl_type) is not int:
            return grammar.DDL_VALUE
        return None
    if not key.get("scm") or not key.get("tbl"):
        return grammar.KEY_NAMES
    if key.get("ccl"):
        return UNJUDGED
    if not isinstance(value, dict):
        return grammar.ROW_VALUE
    if "d" in value:
        if "u" in value or "p" in value:
            return grammar.ROW_IMAGES
        sides = ["d"]
    elif "u" in value:
        sides = ["u", "p"] if "p" in value else ["u"]
    else:
        return grammar.ROW_IMAGES
    for side in sides:
        broken = _image_verdict(value[side])
        if broken is not None:
            return broken
    return None


def _image_verdict(image: Any) -> str | None:
    if not isinstance(image, dict) or not image:
        return grammar.IMAGE
    for name, column in image.items():
        if not 0 < len(name) <= grammar.MAX_NAME:
            return grammar.COLUMN_NAME
        valid = _column_valid(column)
        if valid is None:
            return UNJUDGED
        if not valid:
            return grammar.COLUMN
    return None


def _column_valid(column: Any) -> bool | None:
    """Whether a column is as the grammar says; None: its value is encoded text (base64, Go
    quoting), which the codec's own tests judge."""
    if not isinstance(column, dict):
        return False
    kind, flags = column.get("t"), column.get("f")
    if flags is None:
        flags = 2 if column.get("h") is True else 0
    if type(kind) is not int or type(flags) is not int or not 0 <= kind < 256:
        return False
    if not 0 <= flags < 1 << 16:
        return False
    value = column.get("v")
    if value is not None and type(value) not in (str, int, float, bool):
        return False
    allowed = integer_range(kind, bool(flags & 0x80))
    if allowed is not None and value is not None and type(value) is not str:
        return type(value) is int and value in allowed
    if kind in (249, 250, 251, 252) or (kind in (15, 253, 254) and flags & 1):
        return None if type(value) is str else True
    return True


def frame(events: list[tuple[Any, Any]]) -> tuple[bytes, bytes]:
    """Events as one Open Protocol message (a resolved event's value empty)."""
    key = bytearray((1).to_bytes(8, "big"))
    value = bytearray()
    for event_key, event_value in events:
        data = _json(event_key)
        key += len(data).to_bytes(8, "big") + data
        body = b"" if event_value is None else _json(event_value)
        value += len(body).to_bytes(8, "big") + body
    return bytes(key), bytes(value)


def _json(document: Any) -> bytes:
    """Compact JSON as Go writes it (integers past 64 bits too, which orjson does not write)."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass
class Tally:
    """The structural fuzz's figures."""

    cases: int = 0
    unjudged: int = 0
    valid: int = 0
    invalid: int = 0
    invalid_accepted: int = 0
    valid_refused: int = 0
    disagreements: int = 0
    other_exceptions: int = 0
    hangs: int = 0
    slowest_ms: float = 0.0
    rules: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def fail(self, what: str, message: tuple[bytes, bytes]) -> None:
        if len(self.failures) < 5:
            self.failures.append(f"{what}: key {message[0][8:]!r:.200} value {message[1]!r:.300}")

    @property
    def clean(self) -> bool:
        return not (
            self.invalid_accepted
            or self.valid_refused
            or self.disagreements
            or self.other_exceptions
            or self.hangs
        )


class Judge:
    """Both decoders and the oracle, over one message at a time."""

    def __init__(self) -> None:
        self.python = OpenProtocolCodec(native=False)
        self.native = OpenProtocolCodec()._native
        self.tally = Tally()

    def check(self, events: list[tuple[Any, Any]]) -> None:
        tally = self.tally
        tally.cases += 1
        message = frame(events)
        broken = next((r for r in (verdict(k, v) for k, v in events) if r is not None), None)
        if broken == UNJUDGED:
            tally.unjudged += 1
            return
        started = time.perf_counter()
        try:
            python: Any = self.python.decode(*message)
        except GrammarError as error:
            python = error
        except TicdcSinkError as error:
            python = error
        except Exception as error:  # not a project error: the fuzzer's finding
            tally.other_exceptions += 1
            tally.fail(f"python {type(error).__name__}: {error}", message)
            return
        try:
            native = None if self.native is None else self.native.decode(*message)
            packed = None if self.native is None else self.native.decode_packed(*message)
        except Exception as error:
            tally.other_exceptions += 1
            tally.fail(f"native {type(error).__name__}: {error}", message)
            return
        took = (time.perf_counter() - started) * 1000
        tally.slowest_ms = max(tally.slowest_ms, took)
        if took > 1000:
            tally.hangs += 1
        if broken is None:
            tally.valid += 1
            if not isinstance(python, list):
                tally.valid_refused += 1
                tally.fail(f"valid refused by python: {python}", message)
            elif native is not None and native != python and repr(native) != repr(python):
                tally.disagreements += 1
                tally.fail("native decodes otherwise", message)
            return
        tally.invalid += 1
        tally.rules[broken] = tally.rules.get(broken, 0) + 1
        if isinstance(python, list):
            tally.invalid_accepted += 1
            tally.fail(f"python accepts what breaks {broken}", message)
        elif not isinstance(python, GrammarError) and broken != NOT_JSON:
            tally.invalid_accepted += 1
            tally.fail(f"python refuses {broken} without naming a rule: {python}", message)
        if native is not None or packed is not None:
            tally.invalid_accepted += 1
            tally.disagreements += 1
            tally.fail(f"native accepts what breaks {broken}", message)


def messages() -> st.SearchStrategy[list[tuple[Any, Any]]]:
    """One to three events, each valid or structurally mutated."""
    event = events().flatmap(lambda e: st.just(e) | mutated(e))
    return st.lists(event, min_size=1, max_size=3)


def run(cases: int, seed: int = 0) -> Tally:
    """``cases`` generated messages through the judge."""
    judge = Judge()

    @settings(
        max_examples=cases,
        deadline=None,
        database=None,
        derandomize=seed == 0,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(messages())
    def each(events: list[tuple[Any, Any]]) -> None:
        judge.check(events)

    each()
    return judge.tally


def table(tally: Tally) -> str:
    return "\n".join(
        [
            "| protocol | cases | valid | invalid | invalid accepted | valid refused "
            "| disagreements | other exceptions | hangs | slowest ms |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| open (structure) | {tally.cases:,} | {tally.valid:,} | {tally.invalid:,} | "
            f"{tally.invalid_accepted} | {tally.valid_refused} | {tally.disagreements} | "
            f"{tally.other_exceptions} | {tally.hangs} | {tally.slowest_ms:.1f} |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.streams.codecs.fuzz_structure")
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args(sys.argv[1:] if argv is None else argv)
    tally = run(arguments.cases, arguments.seed)
    print(table(tally))
    print("invalid by rule: " + ", ".join(f"{k} {v:,}" for k, v in sorted(tally.rules.items())))
    for failure in tally.failures:
        print(failure)
    return 0 if tally.clean else 1


if __name__ == "__main__":
    sys.exit(main())
