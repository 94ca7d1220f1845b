"""Canal-JSON in the structural fuzz: one message at a time generated from its grammar
(streams/codecs/canal_grammar.py) as TiCDC's encoder writes it with the TiDB extension (rows,
DDL, watermarks, claim checks), its structure mutated (tests/streams/codecs/structure/mutate.py),
judged by :func:`verdict`, the fuzz's own reading of the rules in the order the decoder reads
them. Canal-JSON has no native decoder: the judge compares the Python codec with the grammar."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import strategies as st

from streams.codecs import canal_grammar as grammar
from streams.codecs.canal_json import CanalJSONCodec
from tests.streams.codecs.structure.judge import Decode, Subject
from tests.streams.codecs.structure.mutate import ALL, ALPHABET, NAMES, Mutations, dumps, mutated

_ROW_TYPES = ("INSERT", "UPDATE", "DELETE")
_WATERMARK = "TIDB_WATERMARK"
# The mysqlType names generated, and the integers each takes (None: any text; "float": a number
# Python reads; "latin-1": text of code points below 256, the bytes of a binary column).
_INTEGERS: dict[str, Any] = {
    "tinyint": range(-(1 << 7), 1 << 7),
    "int": range(-(1 << 31), 1 << 31),
    "int unsigned": range(0, 1 << 32),
    "bigint": range(-(1 << 63), 1 << 63),
    "bigint unsigned": range(0, 1 << 64),
}
_TEXT = {"varchar": None, "text": None, "decimal": None, "date": None}
_OTHER = {"double": "float", "blob": "latin-1", "varbinary": "latin-1"}
_TYPES = sorted([*_INTEGERS, *_TEXT, *_OTHER])
_DIGITS = re.compile(r"-?[0-9]+")
# The fields of _tidb and their JSON types (tiflow canal_json_message.go, tidbExtension).
_EXTENSION = {"commitTs": int, "watermarkTs": int, "onlyHandleKey": bool, "claimCheckLocation": str}
_KNOWN = {
    "id", "database", "table", "pkNames", "isDdl", "type", "es", "ts", "sql", "sqlType",
    "mysqlType", "data", "old", "_tidb", *_EXTENSION,
}  # fmt: skip
_TS = st.integers(0, (1 << 64) - 1)


@st.composite
def _value(draw: Any, kind: str) -> str:
    allowed = _INTEGERS.get(kind)
    if allowed is not None:
        return str(draw(st.integers(allowed.start, allowed.stop - 1)))
    if kind == "double":
        return repr(draw(st.floats(allow_nan=False, allow_infinity=False)))
    return str(draw(st.text(ALPHABET, max_size=8)))


@st.composite
def _row(draw: Any) -> dict[str, Any]:
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    types = {name: draw(st.sampled_from(_TYPES)) for name in names}
    keys = names[: draw(st.integers(0, len(names)))]
    op = draw(st.sampled_from(_ROW_TYPES))

    def image(partial: bool) -> dict[str, Any]:
        chosen = [n for n in names if not partial or draw(st.booleans())]
        return {
            n: draw(_value(types[n]) if n in keys else st.none() | _value(types[n])) for n in chosen
        }

    message: dict[str, Any] = {
        "id": 0,
        "database": draw(NAMES),
        "table": draw(NAMES),
        "pkNames": keys if keys or draw(st.booleans()) else None,
        "isDdl": False,
        "type": op,
        "es": draw(st.integers(0, 1 << 50)),
        "ts": draw(st.integers(0, 1 << 50)),
        "sql": "",
        "sqlType": {name: draw(st.integers(-7, 2005)) for name in names},
        "mysqlType": types,
        "data": [image(False)],
        "old": [image(True)] if op == "UPDATE" else None,
        "_tidb": {"commitTs": draw(_TS)},
    }
    if draw(st.booleans()):
        # Read by nothing here (rule-free): half the rows leave it out, so that mutations land
        # more often where the grammar has rules.
        del message["sqlType"]
    return message


@st.composite
def _other(draw: Any) -> dict[str, Any]:
    """A DDL, a watermark or a claim check."""
    kind = draw(st.sampled_from(["ddl", "watermark", "claim"]))
    if kind == "claim":
        return {"_tidb": {"claimCheckLocation": "file:///" + draw(NAMES)}}
    message: dict[str, Any] = {
        "id": 0,
        "database": "",
        "table": "",
        "pkNames": None,
        "isDdl": kind == "ddl",
        "type": _WATERMARK,
        "es": 0,
        "ts": 0,
        "sql": "",
        "sqlType": None,
        "mysqlType": None,
        "data": None,
        "old": None,
        "_tidb": {"watermarkTs": draw(_TS)},
    }
    if kind == "ddl":
        message.update(
            database=draw(NAMES),
            table=draw(st.just("") | NAMES),
            type=draw(st.sampled_from(["CREATE", "ALTER", "QUERY", "ERASE"])),
            sql="CREATE TABLE t" + draw(st.text(ALPHABET, max_size=8)),
            _tidb={"commitTs": draw(_TS)},
        )
    return message


def _combine(draw: Any, node: Any) -> bool:
    """Members TiCDC never writes with the ones there: an old image on any event, the other
    isDdl, a claim check's location beside an event, a second image."""
    if not isinstance(node, dict) or "type" not in node:
        return False
    choice = draw(st.sampled_from(["old", "isDdl", "claim", "data"]))
    if choice == "old":
        node["old"] = [{"x": "1"}]
    elif choice == "isDdl":
        node["isDdl"] = node.get("isDdl") is not True
    elif choice == "claim":
        extension = node.get("_tidb")
        node["_tidb"] = {
            **(extension if isinstance(extension, dict) else {}),
            "claimCheckLocation": "x",
        }
    else:
        data = node.get("data")
        node["data"] = [*(data if isinstance(data, list) else []), {"x": "1"}]
    return True


MUTATIONS = Mutations(frozenset(_KNOWN), _combine, ALL)


def messages() -> st.SearchStrategy[Any]:
    """One message: a quarter as TiCDC writes it, the rest structurally mutated (many mutations
    touch what the grammar leaves open: id, es, ts, sqlType)."""
    valid = (_row() | _other()).map(lambda m: [m])
    return valid.flatmap(
        lambda m: st.sampled_from([0, 1, 2, 3]).flatmap(
            lambda n: st.just(m) if n == 0 else mutated(m, MUTATIONS)
        )
    ).map(lambda doc: doc[0])


def verdict(message: Any) -> str | None:
    """The rule ``message`` breaks, None when it is valid."""
    if not isinstance(message, dict):
        return grammar.MESSAGE
    extension = message.get("_tidb")
    if extension is None:
        extension = {}
    if not isinstance(extension, dict):
        return grammar.EXTENSION
    for field, kind in _EXTENSION.items():
        value = extension.get(field, kind())
        if type(value) is not kind or (kind is int and not 0 <= value < 1 << 64):
            return grammar.EXTENSION
    if "claimCheckLocation" in extension:
        if not extension["claimCheckLocation"] or {"isDdl", "type", "data"} & set(message):
            return grammar.CLAIM_CHECK
        return None
    is_ddl, kind = message.get("isDdl", False), message.get("type")
    if type(is_ddl) is not bool:
        return grammar.IS_DDL
    if type(kind) is not str or not kind or is_ddl == (kind in (*_ROW_TYPES, _WATERMARK)):
        return grammar.EVENT_TYPE
    if kind == _WATERMARK:
        return None if "watermarkTs" in extension else grammar.WATERMARK
    schema, table = message.get("database", ""), message.get("table", "")
    if type(schema) is not str or type(table) is not str:
        return grammar.NAMES
    if is_ddl:
        query = message.get("sql")
        return None if type(query) is str and query.strip() else grammar.DDL_SQL
    if not schema or not table:
        return grammar.NAMES
    return _row_verdict(message, kind)


def _row_verdict(message: dict[str, Any], kind: str) -> str | None:
    types, keys = message.get("mysqlType"), message.get("pkNames")
    if not isinstance(types, dict) or not types:
        return grammar.ROW_TYPES
    keys = [] if keys is None else keys
    if (
        type(keys) is not list
        or any(type(k) is not str for k in keys)
        or not set(keys) <= set(types)
    ):
        return grammar.PK_NAMES
    for name, text in types.items():
        if not 0 < len(name) <= grammar.MAX_NAME or type(text) is not str or text not in _TYPES:
            return grammar.ROW_TYPES
    data = _one(message.get("data"))
    if data is None:
        return grammar.ROW_DATA
    if set(data) != set(types):
        return grammar.IMAGE_COLUMNS
    if not all(_valid(types[n], v) for n, v in data.items()) or any(data[k] is None for k in keys):
        return grammar.COLUMN_VALUE
    olds = message.get("old")
    if kind != "UPDATE":
        return None if olds is None else grammar.ROW_OLD
    old = _one(olds)
    if old is None:
        return grammar.ROW_OLD
    if not set(old) <= set(types):
        return grammar.IMAGE_COLUMNS
    return None if all(_valid(types[n], v) for n, v in old.items()) else grammar.COLUMN_VALUE


def _one(images: Any) -> dict[str, Any] | None:
    if type(images) is not list or len(images) != 1 or not isinstance(images[0], dict):
        return None
    return images[0]  # type: ignore[no-any-return]


def _valid(kind: str, value: Any) -> bool:
    if value is None:
        return True
    if type(value) is not str:
        return False
    allowed = _INTEGERS.get(kind)
    if allowed is not None:
        return _DIGITS.fullmatch(value) is not None and int(value) in allowed
    if _OTHER.get(kind) == "latin-1":
        return all(ord(c) < 256 for c in value)
    if _OTHER.get(kind) == "float":
        try:
            float(value)
        except ValueError:
            return False
    return True


def encode(message: Any) -> tuple[bytes | None, bytes]:
    return None, dumps(message)


def _python() -> Decode:
    return CanalJSONCodec().decode


SUBJECT = Subject("canal", messages, verdict, encode, _python, lambda: None)
