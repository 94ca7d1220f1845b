"""Craft in the structural fuzz. Craft is binary: a message is generated as a tree (the shape
streams/codecs/craft_grammar.py describes: events, their headers, column groups, columns), the
tree's structure mutated like any JSON-like tree (mutate.py: counts, types, headers and groups
dropped, emptied, retyped, duplicated), then written by :func:`encode`, which writes whatever it
is given (a retyped number as its size, a retyped name as a raw term id); a share of the messages
then has bytes flipped, cut or inserted. :func:`oracle` reads the bytes on its own (only the
frame, ``craft._Message``, and the varint reader are the codec's) and judges them by the rules."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from config.errors import DecodeError
from core.model import integer_range
from streams.codecs import craft_grammar as grammar
from streams.codecs.craft import CraftCodec, _Message
from streams.codecs.craft_wire import FLOAT64, MASK64, Reader, Writer, uvarint, varint, wrap64
from tests.streams.codecs.structure.judge import NOT_JSON, Decode, Subject
from tests.streams.codecs.structure.mutate import ALL, ALPHABET, NAMES, Mutations, mutated

# Column types generated, with values the oracle judges: integers signed and unsigned, DOUBLE,
# DECIMAL (text), VARCHAR (text or bytes), NULL and a code the model does not know.
TYPES = [1, 3, 8, 5, 246, 15, 6, 200]
FLAGS = [0, 1, 2, 11, 128, 4096]
_KNOWN = {"events", "tables", "ts", "type", "partition", "schema", "table", "body"}
_KNOWN |= {"columns", "count", "name", "flags", "value", "action", "query", "after"}
_TEXT_TYPES = {7, 10, 11, 12, 14, 245, 246}
_INTEGERS = {1, 2, 3, 8, 9}


# --- generation -------------------------------------------------------------------------------


@st.composite
def _value(draw: Any, kind: int, flags: int) -> bytes | None:
    if draw(st.integers(0, 5)) == 0:
        return None
    allowed = integer_range(kind, bool(flags & 0x80))
    if allowed is not None:
        number = draw(st.integers(allowed.start, allowed.stop - 1))
        return uvarint(number) if flags & 0x80 and kind != 13 else varint(number)
    if kind == 5:
        return FLOAT64.pack(draw(st.floats(allow_nan=False)))
    if kind in (246, 15):
        return str(draw(st.text(ALPHABET, max_size=8))).encode()
    return bytes(draw(st.binary(max_size=4)))


@st.composite
def _columns(draw: Any) -> list[dict[str, Any]]:
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    columns = []
    for name in names:
        kind, flags = draw(st.sampled_from(TYPES)), draw(st.sampled_from(FLAGS))
        value = draw(_value(kind, flags))
        columns.append({"name": name, "type": kind, "flags": flags, "value": value})
    return columns


@st.composite
def _row(draw: Any) -> dict[str, Any]:
    shape = draw(st.sampled_from(grammar.GROUPS))
    new = draw(_columns())
    groups = [{"type": grammar.GROUP_NEW, "columns": new}] if grammar.GROUP_NEW in shape else []
    if grammar.GROUP_OLD in shape:
        old = new if groups else draw(_columns())
        values = [draw(_value(c["type"], c["flags"])) for c in old]
        old = [c | {"value": v} for c, v in zip(old, values, strict=True)]
        groups.append({"type": grammar.GROUP_OLD, "columns": old})
    partition = draw(st.sampled_from([-1, -1, 0, 70]))
    schema, table = draw(NAMES), draw(NAMES)
    ts = draw(st.integers(0, MASK64))
    return grammar.row(*groups, ts=ts, partition=partition, schema=schema, table=table)


@st.composite
def trees(draw: Any) -> dict[str, Any]:
    """A valid message: one to three rows, a DDL or a resolved event."""
    kind = draw(st.sampled_from([grammar.ROW] * 3 + [grammar.DDL, grammar.RESOLVED]))
    ts = draw(st.integers(0, MASK64))
    if kind == grammar.RESOLVED:
        return grammar.message(grammar.resolved(ts=ts))
    if kind == grammar.DDL:
        query = "CREATE TABLE t" + draw(st.text(ALPHABET, max_size=8))
        table = draw(st.none() | NAMES)
        action = draw(st.integers(0, 70))
        return grammar.message(grammar.ddl(query, action, ts=ts, table=table))
    return grammar.message(*draw(st.lists(_row(), min_size=1, max_size=3)))


def _combine(draw: Any, node: Any) -> bool:
    """Groups TiCDC never writes together, or events it never batches."""
    if isinstance(node, dict) and isinstance(node.get("events"), list):
        node["events"].append(draw(st.sampled_from([grammar.ddl(), grammar.resolved()])))
        return True
    if isinstance(node, list) and node and isinstance(node[0], dict) and "columns" in node[0]:
        node.append(grammar.group(draw(st.sampled_from([1, 2]))))
        return True
    return False


# Numbers just past what a header or column field holds.
MUTATIONS = Mutations(frozenset(_KNOWN), _combine, ALL, (-2, 3, 256, 1 << 16, b"\x02\x00"))


@st.composite
def _bytes_mutated(draw: Any, data: bytes) -> bytes:
    """``data`` with one to three bytes flipped, cut or inserted."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(out)))
        op = draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip" and at < len(out):
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut" and at < len(out):
            del out[at]
        else:
            out.insert(at, draw(st.integers(0, 255)))
    return bytes(out)


def messages() -> st.SearchStrategy[bytes]:
    """Valid messages, structurally mutated ones, and byte-mutated ones of both."""
    tree = trees().flatmap(lambda t: st.just(t) | mutated([t], MUTATIONS).map(lambda d: d[0]))
    data = tree.map(write)
    return data.flatmap(lambda d: st.just(d) | st.just(d) | _bytes_mutated(d))


# --- writing a tree, whatever it holds -------------------------------------------------------


def _int(node: Any) -> int:
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return int(node) if math.isfinite(node) else 0
    if isinstance(node, str | bytes | list | dict):
        return len(node)
    return 0


def _bytes(node: Any) -> bytes | None:
    if node is None or isinstance(node, bytes):
        return node
    if isinstance(node, str):
        return node.encode("utf-8", "surrogatepass")
    if isinstance(node, float):
        return FLOAT64.pack(node)
    if isinstance(node, int):
        return uvarint(node & MASK64)
    return repr(node).encode()


class _Dictionary:
    def __init__(self) -> None:
        self.terms: dict[str, int] = {}

    def id(self, node: Any) -> int:
        if node is None:
            return -1
        if isinstance(node, int):
            return wrap64(node)
        text = node if isinstance(node, str) else repr(node)
        return self.terms.setdefault(text, len(self.terms))


def _chunk(out: Writer, values: list[int], delta: bool, signed: bool) -> None:
    last = 0
    for index, value in enumerate(values):
        step = value - last if delta and index else value
        out.varint(wrap64(step)) if signed else out.uvarint(step & MASK64)
        last = value


def write(tree: Any) -> bytes:
    """The Craft message ``tree`` describes."""
    tree = tree if isinstance(tree, dict) else {}
    events = tree.get("events")
    events = [e if isinstance(e, dict) else {} for e in events] if isinstance(events, list) else []
    terms = _Dictionary()
    headers = Writer()
    _chunk(headers, [_int(e.get("ts")) & MASK64 for e in events], True, False)
    _chunk(headers, [_int(e.get("type")) & MASK64 for e in events], False, False)
    _chunk(headers, [wrap64(_int(e.get("partition"))) for e in events], True, True)
    _chunk(headers, [terms.id(e.get("schema")) for e in events], True, True)
    _chunk(headers, [terms.id(e.get("table")) for e in events], True, True)
    bodies, group_tables = [], []
    for event in events:
        body, sizes = _body(event.get("body"), terms)
        bodies.append(body)
        if sizes is not None:
            group_tables.append(sizes)
    if isinstance(tree.get("tables"), list):
        group_tables = [[_int(s) for s in t] if isinstance(t, list) else [] for t in tree["tables"]]
    out = Writer()
    out.uvarint(1)
    out.out += headers.out
    for body in bodies:
        out.out += body
    dictionary = Writer()
    if terms.terms:
        dictionary.uvarint(len(terms.terms))
        encoded = [term.encode("utf-8", "surrogatepass") for term in terms.terms]
        for term in encoded:
            dictionary.uvarint(len(term))
        for term in encoded:
            dictionary.out += term
    out.out += dictionary.out
    tables = [[len(headers.out), len(dictionary.out)], [len(b) for b in bodies], *group_tables]
    sizes = Writer()
    for table in tables:
        sizes.uvarint(len(table))
        _chunk(sizes, [wrap64(s) for s in table], True, True)
    out.out += sizes.out + uvarint(len(sizes.out))[::-1]
    return bytes(out.out)


def _body(node: Any, terms: _Dictionary) -> tuple[bytes, list[int] | None]:
    """An event's body and, for a row's (a list of groups), its groups' sizes."""
    if isinstance(node, list):
        groups = [_group(g if isinstance(g, dict) else {}, terms) for g in node]
        return b"".join(groups), [len(g) for g in groups]
    if isinstance(node, dict):
        out = Writer()
        out.uvarint(_int(node.get("action")) & MASK64)
        query = _bytes(node.get("query")) or b""
        out.uvarint(len(query))
        out.out += query + (_bytes(node.get("after")) or b"")
        return bytes(out.out), None
    return _bytes(node) or b"", None


def _group(node: dict[str, Any], terms: _Dictionary) -> bytes:
    columns = node.get("columns")
    columns = (
        [c if isinstance(c, dict) else {} for c in columns] if isinstance(columns, list) else []
    )
    out = Writer()
    out.out.append(_int(node.get("type")) & 0xFF)
    out.uvarint(_int(node["count"]) & MASK64 if "count" in node else len(columns))
    _chunk(out, [terms.id(c.get("name")) for c in columns], True, True)
    _chunk(out, [_int(c.get("type")) & MASK64 for c in columns], False, False)
    _chunk(out, [_int(c.get("flags")) & MASK64 for c in columns], False, False)
    values = [_bytes(c.get("value")) for c in columns]
    _chunk(out, [-1 if v is None else len(v) for v in values], False, True)
    for value in values:
        out.out += value or b""
    return bytes(out.out)


def encode(data: bytes) -> tuple[bytes | None, bytes]:
    return None, data


# --- the oracle: the bytes read on their own, judged by the rules ----------------------------


class _FramingError(Exception):
    """The bytes are no Craft message at all (a DecodeError, not a rule)."""


def oracle(data: bytes) -> str | None:
    try:
        return _verdict(data)
    except (_FramingError, DecodeError):
        return NOT_JSON


def _verdict(data: bytes) -> str | None:
    if not data:
        raise _FramingError
    frame = _Message(data)
    count = len(frame.tables[1])
    header = Reader(data, frame.header_start, frame.body_start)
    chunks = [header.uvarint_chunk(count) for _ in range(5)]
    if header.remaining():
        raise _FramingError
    types = chunks[1]
    signed = [[(r >> 1) ^ -(r & 1) for r in chunk] for chunk in chunks[2:]]
    partitions, schemas, tables = (_undelta(chunk) for chunk in signed)
    if not count or (count > 1 and set(types) != {grammar.ROW}):
        return grammar.MESSAGE_EVENTS
    rows = types.count(grammar.ROW)
    if len(frame.tables) != 2 + rows:
        return grammar.SIZE_TABLES
    row = 0
    for index, kind in enumerate(types):
        body = data[frame.body_offsets[index] : frame.body_offsets[index + 1]]
        if kind not in (grammar.ROW, grammar.DDL, grammar.RESOLVED):
            return grammar.EVENT_TYPE
        names = [_term(frame.terms, i) for i in (schemas[index], tables[index])]
        if False in names:
            return grammar.TERM_ID
        if kind == grammar.RESOLVED:
            broken = grammar.RESOLVED_BODY if body else None
        elif kind == grammar.DDL:
            broken = _ddl_verdict(body)
        elif not all(names):
            return grammar.ROW_TABLE
        elif partitions[index] < -1:
            return grammar.PARTITION
        else:
            broken = _row_verdict(body, frame.tables[2 + row], frame.terms)
            row += 1
        if broken is not None:
            return broken
    return None


def _undelta(values: list[int]) -> list[int]:
    out, last = [], 0
    for index, value in enumerate(values):
        last = wrap64(last + value) if index else value
        out.append(last)
    return out


def _term(terms: list[str], term_id: int) -> str | bool | None:
    """The term, None for the null id, False for an id outside the dictionary."""
    if term_id == -1:
        return None
    return terms[term_id] if 0 <= term_id < len(terms) else False


def _ddl_verdict(body: bytes) -> str | None:
    reader = Reader(body, 0, len(body))
    reader.uvarint()
    length = reader.uvarint()
    if length > reader.remaining():
        raise _FramingError
    query = reader.take(length)
    try:
        text = query.decode("utf-8")
    except UnicodeDecodeError:
        return grammar.DDL_BODY
    return grammar.DDL_BODY if not text.strip() or reader.remaining() else None


def _row_verdict(body: bytes, sizes: list[int], terms: list[str]) -> str | None:
    groups, at = [], 0
    for size in sizes:
        if not 0 <= size <= len(body) - at:
            raise _FramingError
        groups.append(_read_group(body[at : at + size]))
        at += size
    if at != len(body):
        raise _FramingError
    if tuple(g[0] for g in groups) not in grammar.GROUPS:
        return grammar.COLUMN_GROUPS
    images: list[dict[str, tuple[int, int]]] = []
    for _, columns in groups:
        if not columns:
            return grammar.GROUP_COLUMNS
        image: dict[str, tuple[int, int]] = {}
        for term_id, kind, flags, value in columns:
            name = _term(terms, term_id)
            if not isinstance(name, str):
                return grammar.TERM_ID
            if kind > 0xFF or flags >= 1 << 16:
                return grammar.COLUMN_TYPE
            if not 0 < len(name) <= grammar.MAX_NAME or name in image:
                return grammar.GROUP_COLUMNS
            if not _value_valid(kind, flags, value):
                return grammar.COLUMN_VALUE
            image[name] = (kind, flags)
        images.append(image)
    if len(images) == 2 and images[0] != images[1]:
        return grammar.UPDATE_IMAGES
    return None


def _read_group(data: bytes) -> tuple[int, list[tuple[int, int, int, bytes | None]]]:
    reader = Reader(data, 0, len(data))
    group_type = reader.byte()
    width = reader.uvarint()
    if width > reader.remaining():
        raise _FramingError
    ids = _undelta([(r >> 1) ^ -(r & 1) for r in reader.uvarint_chunk(width)])
    kinds = reader.uvarint_chunk(width)
    flags = reader.uvarint_chunk(width)
    lengths = [(r >> 1) ^ -(r & 1) for r in reader.uvarint_chunk(width)]
    values: list[bytes | None] = []
    for length in lengths:
        if length < -1 or length > reader.remaining():
            raise _FramingError
        values.append(None if length == -1 else reader.take(length))
    if reader.remaining():
        raise _FramingError
    return group_type, list(zip(ids, kinds, flags, values, strict=True))


def _value_valid(kind: int, flags: int, value: bytes | None) -> bool:
    if value is None:
        return True
    unsigned = bool(flags & 0x80)
    if kind in _INTEGERS or kind in (13, 16, 247, 248):
        reader = Reader(value, 0, len(value))
        try:
            raw = reader.uvarint()
        except DecodeError:
            return False
        if reader.remaining():
            return False
        number = raw if (unsigned and kind in _INTEGERS) or kind in (16, 247, 248) else None
        number = (raw >> 1) ^ -(raw & 1) if number is None else number
        allowed = integer_range(kind, unsigned)
        return allowed is None or number in allowed
    if kind in (4, 5):
        return len(value) == 8
    if kind in _TEXT_TYPES:
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


def _python() -> Decode:
    return CraftCodec(native=False).decode


def _native() -> list[Decode] | None:
    decoder = CraftCodec()._native
    return None if decoder is None else [decoder.decode, decoder.decode_packed]


SUBJECT = Subject("craft", messages, oracle, encode, _python, _native)
