"""Open Protocol's grammar: what TiCDC's encoder writes, as rules both decoders enforce.

Taken from tiflow's encoder: ``pkg/sink/codec/open/open_protocol_message.go`` (``rowChangeToMsg``:
a delete writes ``d`` alone, an insert ``u`` alone, an update ``u`` and, with old values on,
``p``; ``messageRow``'s images are ``omitempty`` maps, so an image is never empty;
``messageDDL``: ``q`` and ``t``), ``pkg/sink/codec/internal/message_key.go`` (the key: ``ts``
uint64, ``scm``/``tbl``/``rid``/``ptn`` ``omitempty``, ``t``) and
``pkg/sink/codec/internal/column.go`` (a column: ``t`` byte, ``h`` only when true, ``f``, ``v``).
The decoders (``streams/codecs/open_protocol.py``, ``native/src/open_protocol.rs``) refuse a
message that breaks a rule: Python raises :class:`~config.errors.GrammarError` naming it (the
message's dead letter), the native decoder hands the message to Python. docs/architecture.md
("Codec notes") shows :func:`markdown`'s table, and tests/streams/codecs/test_open_grammar.py
runs every example through both decoders.

Deviations that are harmless, and so accepted: a field the grammar does not name (in a key, a
row value, a column: TiCDC's ``checksum`` fields, whatever a later version adds), a type code or
flag bit the model does not know (0-255, 0-65535: values of unknown types are taken as JSON
scalars), ``h`` with any value where ``f`` is present (``f`` says it), a repeated member (the
last counts, as in Go's decoder). Refused are the shapes that would be applied as something
TiCDC never meant: an event without its table, a row value that is not an object, images TiCDC
never combines, an empty image or column name, a DDL without its statement.
"""

from __future__ import annotations

from streams.codecs import grammar
from streams.codecs.grammar import Rule

# The longest column name TiDB takes (MySQL's identifier limit), in characters.
MAX_NAME = 64


# A rule's examples are (key JSON, value JSON) of one event.
Example = tuple[str, str]


_ROW_KEY = '{"ts":5,"scm":"db","tbl":"t","t":1}'
_ROW = '{"u":{"id":{"t":3,"h":true,"f":11,"v":1}}}'
_COLUMN = '{"t":3,"f":11,"v":1}'

KEY_OBJECT = "key-object"
KEY_TS = "key-ts"
KEY_TYPE = "key-type"
KEY_NAMES = "key-names"
ROW_VALUE = "row-value-object"
ROW_IMAGES = "row-images"
IMAGE = "image-non-empty-object"
COLUMN_NAME = "column-name"
COLUMN = "column-object"
DDL_VALUE = "ddl-value"

RULES: tuple[Rule[Example], ...] = (
    Rule(
        KEY_OBJECT,
        "key",
        "each event's key is a JSON object",
        (("[5,1]", _ROW), ('"x"', _ROW)),
    ),
    Rule(
        KEY_TS,
        "key",
        "`ts` is an integer 0..2^64-1 (the commit ts, a uint64)",
        (('{"t":1,"scm":"db","tbl":"t"}', _ROW), ('{"ts":"5","scm":"db","tbl":"t","t":1}', _ROW)),
    ),
    Rule(
        KEY_TYPE,
        "key",
        "`t` is 1 (row), 2 (DDL) or 3 (resolved)",
        (('{"ts":5,"scm":"db","tbl":"t","t":4}', _ROW), ('{"ts":5,"scm":"db","tbl":"t"}', _ROW)),
    ),
    Rule(
        KEY_NAMES,
        "key",
        "`scm` and `tbl` are strings where present; a row's are both there, non-empty (a row "
        "names its table)",
        (
            ('{"ts":5,"tbl":"t","t":1}', _ROW),
            ('{"ts":5,"scm":"db","tbl":"","t":1}', _ROW),
            ('{"ts":5,"scm":"db","tbl":7,"t":1}', _ROW),
        ),
    ),
    Rule(
        ROW_VALUE,
        "row value",
        "a JSON object",
        ((_ROW_KEY, "[{}]"), (_ROW_KEY, '[{"id":' + _COLUMN + "}]"), (_ROW_KEY, "null")),
    ),
    Rule(
        ROW_IMAGES,
        "row value",
        "`d` alone (delete), `u` alone (insert, or update without old values) or `u` with `p` "
        "(update)",
        (
            (_ROW_KEY, "{}"),
            (_ROW_KEY, '{"p":{"id":' + _COLUMN + "}}"),
            (_ROW_KEY, '{"d":{"id":' + _COLUMN + '},"u":{"id":' + _COLUMN + "}}"),
            (_ROW_KEY, '{"d":{"id":' + _COLUMN + '},"p":{"id":' + _COLUMN + "}}"),
        ),
    ),
    Rule(
        IMAGE,
        "`u`, `p`, `d`",
        "a non-empty JSON object of columns by name",
        (
            (_ROW_KEY, '{"u":{}}'),
            (_ROW_KEY, '{"d":{}}'),
            (_ROW_KEY, '{"u":{"id":' + _COLUMN + '},"p":{}}'),
            (_ROW_KEY, '{"u":[{"id":' + _COLUMN + "}]}"),
            (_ROW_KEY, '{"u":null}'),
        ),
    ),
    Rule(
        COLUMN_NAME,
        "column name",
        f"1 to {MAX_NAME} characters (TiDB's identifiers)",
        (
            (_ROW_KEY, '{"u":{"":' + _COLUMN + "}}"),
            (_ROW_KEY, '{"u":{"' + "c" * (MAX_NAME + 1) + '":' + _COLUMN + "}}"),
        ),
    ),
    Rule(
        COLUMN,
        "column",
        "a JSON object: `t` an integer 0..255, `f` an integer 0..65535 (absent or null from "
        "encoders before it: `h` true then marks the handle), `v` a JSON scalar (an integer "
        "type's an integer within its range)",
        (
            (_ROW_KEY, '{"u":{"id":[3,11,null,1]}}'),
            (_ROW_KEY, '{"u":{"id":{"f":11,"v":1}}}'),
            (_ROW_KEY, '{"u":{"id":{"t":3,"f":"11","v":1}}}'),
            (_ROW_KEY, '{"u":{"id":{"t":15,"f":0,"v":[1]}}}'),
        ),
    ),
    Rule(
        DDL_VALUE,
        "DDL value",
        "a JSON object: `q` the statement, a non-empty string; `t` TiDB's action type, an integer "
        "(0 when absent)",
        (
            ('{"ts":5,"scm":"db","tbl":"t","t":2}', '{"q":"","t":3}'),
            ('{"ts":5,"scm":"db","tbl":"t","t":2}', '{"q":"  ","t":3}'),
            ('{"ts":5,"scm":"db","tbl":"t","t":2}', '{"t":3}'),
            ('{"ts":5,"scm":"db","tbl":"t","t":2}', '["CREATE TABLE t (a INT)",3]'),
        ),
    ),
)

# Deviations both decoders accept, and why (each decodes as the message without it would).
ACCEPTED: tuple[tuple[str, str, str], ...] = (
    (
        "an unknown field in a key",
        '{"ts":5,"scm":"db","tbl":"t","t":1,"checksum":"1","new":[1]}',
        _ROW,
    ),
    (
        "an unknown field in a row value",
        _ROW_KEY,
        '{"u":{"id":' + _COLUMN + '},"x":{"y":[]}}',
    ),
    ("an unknown field in a column", _ROW_KEY, '{"u":{"id":{"t":3,"f":11,"v":1,"z":{}}}}'),
    ("a type code the model does not know", _ROW_KEY, '{"u":{"id":{"t":200,"f":0,"v":"x"}}}'),
    ("a flag bit the model does not know", _ROW_KEY, '{"u":{"id":{"t":3,"f":4096,"v":1}}}'),
    ("`h` false where `f` says it", _ROW_KEY, '{"u":{"id":{"t":3,"h":false,"f":11,"v":1}}}'),
    ("a DDL without a table", '{"ts":5,"scm":"db","t":2}', '{"q":"CREATE DATABASE db","t":1}'),
)


def rule(name: str) -> Rule[Example]:
    """The rule of that name."""
    return grammar.find(RULES, name)


def markdown() -> str:
    """The rules as the Markdown table docs/architecture.md holds."""
    return grammar.markdown(RULES)
