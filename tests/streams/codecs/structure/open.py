"""Open Protocol in the structural fuzz: messages of one to three events generated from its
grammar (streams/codecs/open_grammar.py), their structure mutated (tests/streams/codecs/structure/
mutate.py), judged by :func:`oracle`, the fuzz's own reading of the rules."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from core.model import integer_range
from streams.codecs import open_grammar as grammar
from streams.codecs.open_protocol import OpenProtocolCodec
from tests.streams.codecs.structure.judge import NOT_JSON, UNJUDGED, Decode, Subject
from tests.streams.codecs.structure.mutate import ALPHABET, NAMES, Mutations, dumps, mutated

# Column types whose values the oracle judges: integers signed and unsigned, VARCHAR, DOUBLE and
# a code the model does not know (TEXT/BLOB and binary CHAR carry encoded text: not generated).
TYPES = [1, 3, 8, 15, 5, 200]
FLAGS = [0, 2, 10, 64, 128, 4096]
# Known key fields whose absence or type the grammar leaves open (not added as unknown ones).
_KNOWN = {"ts", "t", "scm", "tbl", "rid", "ptn", "ohk", "ccl", "u", "p", "d", "q", "f", "h", "v"}


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
        value = draw(st.none() | st.text(ALPHABET, max_size=8))
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
        return str(draw(NAMES))
    length = draw(st.integers(grammar.MAX_NAME - 1, grammar.MAX_NAME + 1))
    return str(draw(st.text(ALPHABET, min_size=length, max_size=length)))


def images() -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(column_names(), columns(), min_size=1, max_size=4)


@st.composite
def events(draw: Any) -> tuple[dict[str, Any], Any]:
    """One valid event: its key and value as TiCDC writes them."""
    ts = draw(st.integers(0, (1 << 64) - 1))
    kind = draw(st.sampled_from([1, 1, 1, 2, 3]))
    if kind == 3:
        return {"ts": ts, "t": 3}, None
    schema, table = draw(NAMES), draw(NAMES)
    if kind == 2:
        key = {"ts": ts, "scm": schema, "tbl": table, "t": 2}
        query = "CREATE TABLE t" + draw(st.text(ALPHABET, max_size=8))
        return key, {"q": query, "t": draw(st.integers(0, 70))}
    key = {"ts": ts, "scm": schema, "tbl": table, "t": 1}
    shape = draw(st.sampled_from(["u", "up", "d"]))
    value = {side: draw(images()) for side in shape}
    return key, value


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
        # The decoder reads a row's key whole before its value: a row key without its names
        # breaks that rule first.
        if kind == 1 and not (key.get("scm") and key.get("tbl")):
            return grammar.KEY_NAMES
        return NOT_JSON
    if kind == 2:
        query = value.get("q") if isinstance(value, dict) else None
        ddl_type = value.get("t", 0) if isinstance(value, dict) else None
        # An integer past 64 bits is no JSON integer to the decoder (orjson reads it as a
        # float), nor an action type TiDB has (a byte).
        if type(query) is not str or not query.strip() or not _json_integer(ddl_type):
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


def _json_integer(value: Any) -> bool:
    return type(value) is int and -(1 << 63) <= value < 1 << 64


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


def _combine(draw: Any, node: Any) -> bool:
    """A row value's image TiCDC never combines with the ones there."""
    if not isinstance(node, dict) or not {"u", "d", "p"} & set(node):
        return False
    node[draw(st.sampled_from(["u", "p", "d"]))] = draw(images())
    return True


MUTATIONS = Mutations(frozenset(_KNOWN), _combine)

Event = tuple[Any, Any]


def messages() -> st.SearchStrategy[list[Event]]:
    """One to three events, each valid or structurally mutated."""
    event = events().flatmap(lambda e: st.just(e) | mutated(list(e), MUTATIONS).map(tuple))
    return st.lists(event, min_size=1, max_size=3)


def oracle(events: list[Event]) -> str | None:
    """The rule the first broken event breaks, None when every event is valid."""
    return next((r for r in (verdict(k, v) for k, v in events) if r is not None), None)


def encode(events: list[Event]) -> tuple[bytes | None, bytes]:
    """Events as one Open Protocol message (a resolved event's value empty)."""
    key = bytearray((1).to_bytes(8, "big"))
    value = bytearray()
    for event_key, event_value in events:
        data = dumps(event_key)
        key += len(data).to_bytes(8, "big") + data
        body = b"" if event_value is None else dumps(event_value)
        value += len(body).to_bytes(8, "big") + body
    return bytes(key), bytes(value)


def _python() -> Decode:
    return OpenProtocolCodec(native=False).decode


def _native() -> list[Decode] | None:
    decoder = OpenProtocolCodec()._native
    return None if decoder is None else [decoder.decode, decoder.decode_packed]


SUBJECT = Subject("open", messages, oracle, encode, _python, _native)
