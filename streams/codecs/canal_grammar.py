"""Canal-JSON's grammar (with TiCDC's ``_tidb`` extension): what TiCDC's encoder writes, as rules
the decoder enforces.

Taken from tiflow's encoder: ``pkg/sink/codec/canal/canal_json_row_event_encoder.go``
(``newJSONMessageForDML``: ``isDdl`` false, ``type`` INSERT, UPDATE or DELETE by
``eventTypeString``, ``pkNames`` the primary key's columns or null, ``mysqlType`` and ``sqlType`` of
the very columns ``fillColumns`` writes, ``data`` always ``[{...}]``, ``old`` null but for an
UPDATE's ``[{...}]``, each value a JSON string or null, ``_tidb.commitTs`` with the extension;
``newJSONMessageForDDL``: ``isDdl`` true, ``sql`` the statement; ``newJSONMessage4CheckpointEvent``:
``type`` TIDB_WATERMARK with ``_tidb.watermarkTs``; ``NewClaimCheckMessage``: ``_tidb`` holding
the location alone) and ``pkg/sink/codec/canal/canal_json_message.go`` (``tidbExtension``: every
field ``omitempty``, so a zero ts is absent). The decoder (``streams/codecs/canal_json.py``; there
is no native one) raises :class:`~config.errors.GrammarError` naming the rule a message breaks
(the message's dead letter). docs/architecture.md shows :func:`markdown`'s table, and
tests/streams/codecs/test_canal_grammar.py runs every example through the decoder.

Deviations that are harmless, and so accepted: a field the grammar does not name (at the top, in
``_tidb``), ``id``, ``es``, ``ts`` and ``sqlType`` of any value (TiCDC writes them for Canal's
own consumers; nothing here reads them), a DDL ``type`` Canal does not name yet, an UPDATE's
``old`` holding only some columns (``only-output-updated-columns``: the rest are unchanged), a
repeated member (the last counts, as in Go's decoder). Refused are the shapes that would be
applied as something TiCDC never meant: ``isDdl`` that is not a boolean (``"false"`` would make a
row a DDL), a row without its table or types, an image missing a column its types name (a NULL
written where TiCDC sent none) or a key column's value, a batch of images where TiCDC writes one,
an ``old`` on an INSERT or DELETE, an UPDATE without one, a DDL without its statement, a type name
TiCDC does not write (Canal-JSON's values are all text: the name alone says how to read them).
"""

from __future__ import annotations

from streams.codecs import grammar
from streams.codecs.grammar import Rule
from streams.codecs.open_grammar import MAX_NAME as MAX_NAME

# Canal-JSON messages carry no Kafka key: each example's key is empty, its value the message.
Example = tuple[str, str]

_TYPES = '"mysqlType":{"id":"int","v":"varchar"}'
_HEAD = '"database":"db","table":"t","pkNames":["id"],"isDdl":false,'
_INSERT = "{" + _HEAD + '"type":"INSERT",' + _TYPES
_EXT = '"_tidb":{"commitTs":5}'
_DATA = '"data":[{"id":"1","v":"a"}]'
_ROW = _INSERT + "," + _DATA + ',"old":null,' + _EXT + "}"
_UPDATE = "{" + _HEAD + '"type":"UPDATE",' + _TYPES + "," + _DATA + ","
_DDL = '{"database":"db","table":"t","isDdl":true,"type":"CREATE",'

MESSAGE = "message-object"
EXTENSION = "tidb-extension"
CLAIM_CHECK = "claim-check"
IS_DDL = "is-ddl"
EVENT_TYPE = "event-type"
WATERMARK = "watermark"
NAMES = "names"
DDL_SQL = "ddl-sql"
ROW_TYPES = "row-types"
PK_NAMES = "pk-names"
ROW_DATA = "row-data"
ROW_OLD = "row-old"
IMAGE_COLUMNS = "image-columns"
COLUMN_VALUE = "column-value"

RULES: tuple[Rule[Example], ...] = (
    Rule(MESSAGE, "message", "a JSON object", (("", "[]"), ("", '"x"'), ("", "null"))),
    Rule(
        EXTENSION,
        "`_tidb`",
        "an object where present: `commitTs` and `watermarkTs` integers 0..2^64-1, "
        "`onlyHandleKey` a boolean, `claimCheckLocation` a string, each where present (all "
        "`omitempty`: a zero ts is absent, read as 0)",
        (
            ("", _INSERT + "," + _DATA + ',"_tidb":[5]}'),
            ("", _INSERT + "," + _DATA + ',"_tidb":{"commitTs":"5"}}'),
            ("", _INSERT + "," + _DATA + ',"_tidb":{"commitTs":-1}}'),
            ("", _INSERT + "," + _DATA + ',"_tidb":{"commitTs":5,"onlyHandleKey":1}}'),
            ("", '{"_tidb":{"claimCheckLocation":7}}'),
        ),
    ),
    Rule(
        CLAIM_CHECK,
        "`_tidb.claimCheckLocation`",
        "a non-empty string, in a message holding no event of its own (no `isDdl`, `type`, "
        "`data`): TiCDC sends the location alone",
        (
            ("", '{"_tidb":{"claimCheckLocation":""}}'),
            ("", '{"isDdl":false,"_tidb":{"claimCheckLocation":"file:///x"}}'),
            ("", _INSERT + "," + _DATA + ',"_tidb":{"claimCheckLocation":"file:///x"}}'),
        ),
    ),
    Rule(
        IS_DDL,
        "`isDdl`",
        "true or false where present (absent: false)",
        (
            ("", '{"database":"db","isDdl":"true","type":"CREATE","sql":"CREATE TABLE t (a INT)"}'),
            ("", _ROW.replace('"isDdl":false', '"isDdl":0')),
        ),
    ),
    Rule(
        EVENT_TYPE,
        "`type`",
        "a string: INSERT, UPDATE or DELETE (a row) or TIDB_WATERMARK (a watermark) where "
        "`isDdl` is false, another non-empty name (Canal's CREATE, ALTER, QUERY, ...) where it "
        "is true",
        (
            ("", _ROW.replace('"INSERT"', '"UPSERT"')),
            ("", _ROW.replace('"INSERT"', "1")),
            ("", _ROW.replace('"type":"INSERT",', "")),
            ("", _DDL.replace('"CREATE"', '"INSERT"') + '"sql":"CREATE TABLE t (a INT)"}'),
            ("", _DDL.replace('"CREATE"', '""') + '"sql":"CREATE TABLE t (a INT)"}'),
        ),
    ),
    Rule(
        WATERMARK,
        "watermark",
        "`_tidb.watermarkTs` is there (a TIDB_WATERMARK is sent only with the extension)",
        (
            ("", '{"isDdl":false,"type":"TIDB_WATERMARK"}'),
            ("", '{"isDdl":false,"type":"TIDB_WATERMARK","_tidb":{"commitTs":5}}'),
        ),
    ),
    Rule(
        NAMES,
        "`database`, `table`",
        "strings where present; a row's are both there, non-empty (a row names its table)",
        (
            ("", _ROW.replace('"table":"t"', '"table":""')),
            ("", _ROW.replace('"database":"db",', "")),
            ("", _ROW.replace('"table":"t"', '"table":["t"]')),
            ("", _DDL.replace('"db"', "7") + '"sql":"CREATE TABLE t (a INT)"}'),
        ),
    ),
    Rule(
        DDL_SQL,
        "DDL `sql`",
        "the statement, a non-empty string",
        (("", _DDL + '"sql":""}'), ("", _DDL + '"sql":" "}'), ("", _DDL + '"sql":null}')),
    ),
    Rule(
        ROW_TYPES,
        "row `mysqlType`",
        f"a non-empty object naming each column (1 to {MAX_NAME} characters, TiDB's "
        "identifiers) by a type name TiCDC writes (`int unsigned`, `varchar`, `blob`, ...)",
        (
            ("", _ROW.replace(_TYPES, '"mysqlType":{}')),
            ("", _ROW.replace(_TYPES, '"mysqlType":null')),
            ("", _ROW.replace(_TYPES, '"mysqlType":{"id":"int","v":"varchar2"}')),
            ("", _ROW.replace(_TYPES, '"mysqlType":{"id":"int","v":3}')),
            ("", _ROW.replace(_TYPES, '"mysqlType":[["id","int"]]')),
            ("", _ROW.replace('"v"', '""')),
        ),
    ),
    Rule(
        PK_NAMES,
        "row `pkNames`",
        "null, absent or an array of strings, each a column `mysqlType` names",
        (
            ("", _ROW.replace('["id"]', '"id"')),
            ("", _ROW.replace('["id"]', '["id",1]')),
            ("", _ROW.replace('["id"]', '["k"]')),
        ),
    ),
    Rule(
        ROW_DATA,
        "row `data`",
        "an array of exactly one object, the row's image (new, or a DELETE's old)",
        (
            ("", _ROW.replace(_DATA, '"data":[]')),
            ("", _ROW.replace(_DATA, '"data":null')),
            ("", _ROW.replace(_DATA, '"data":{"id":"1","v":"a"}')),
            ("", _ROW.replace(_DATA, '"data":[{"id":"1","v":"a"},{"id":"2","v":"b"}]')),
            ("", _ROW.replace(_DATA, '"data":["1","a"]')),
        ),
    ),
    Rule(
        ROW_OLD,
        "row `old`",
        "null or absent for INSERT and DELETE; for UPDATE an array of exactly one object",
        (
            ("", _ROW.replace('"old":null', '"old":[{"id":"1","v":"a"}]')),
            ("", _UPDATE + '"old":null,' + _EXT + "}"),
            ("", _UPDATE + _EXT + "}"),
            ("", _UPDATE + '"old":[],' + _EXT + "}"),
            ("", _UPDATE + '"old":[{"v":"a"},{"v":"b"}],' + _EXT + "}"),
            ("", _UPDATE + '"old":{"v":"a"},' + _EXT + "}"),
        ),
    ),
    Rule(
        IMAGE_COLUMNS,
        "row images",
        "`data` names exactly the columns of `mysqlType`; `old` some of them",
        (
            ("", _ROW.replace(_DATA, '"data":[{"id":"1"}]')),
            ("", _ROW.replace(_DATA, '"data":[{}]')),
            ("", _ROW.replace(_DATA, '"data":[{"id":"1","v":"a","w":"b"}]')),
            ("", _UPDATE + '"old":[{"w":"a"}],' + _EXT + "}"),
        ),
    ),
    Rule(
        COLUMN_VALUE,
        "column value",
        "a string or null (an integer type's a decimal integer within its range, a float "
        "type's a number, a binary type's ISO-8859-1 text); a `pkNames` column's not null in "
        "`data`",
        (
            ("", _ROW.replace('"v":"a"', '"v":1')),
            ("", _ROW.replace('"v":"a"', '"v":["a"]')),
            ("", _ROW.replace('"id":"1"', '"id":"x"')),
            ("", _ROW.replace('"id":"1"', '"id":"2147483648"')),
            ("", _ROW.replace('"id":"1"', '"id":null')),
            ("", _UPDATE + '"old":[{"v":{}}],' + _EXT + "}"),
        ),
    ),
)

# Messages as TiCDC writes them, from which the examples above differ by one rule each.
VALID: tuple[str, ...] = (
    _ROW,
    _UPDATE + '"old":[{"id":"1","v":"b"}],' + _EXT + "}",
    _DDL + '"sql":"CREATE TABLE t (a INT)",' + _EXT + "}",
    '{"isDdl":false,"type":"TIDB_WATERMARK","_tidb":{"watermarkTs":5}}',
    '{"_tidb":{"claimCheckLocation":"file:///x"}}',
)

# Deviations the decoder accepts, and why (each decodes as the message without it would).
ACCEPTED: tuple[tuple[str, str, str], ...] = (
    ("an unknown field at the top", "", _ROW[:-1] + ',"checksum":{"a":[1]}}'),
    ("an unknown field in `_tidb`", "", _ROW.replace(_EXT, '"_tidb":{"commitTs":5,"new":[]}')),
    ("`id`, `es`, `ts`, `sqlType` of any value", "", _ROW[:-1] + ',"es":"x","sqlType":[1]}'),
    ("an UPDATE's `old` with some columns", "", _UPDATE + '"old":[{"v":"b"}],' + _EXT + "}"),
    ("a message without the extension", "", _ROW.replace("," + _EXT, "")),
    ("a DDL type Canal does not name yet", "", _DDL.replace("CREATE", "VECTOR") + '"sql":"X"}'),
    (
        "a DDL of a database",
        "",
        '{"database":"db","isDdl":true,"type":"QUERY","sql":"DROP DATABASE db"}',
    ),
    ("`isDdl` absent from a row", "", _ROW.replace('"isDdl":false,', "")),
)


def rule(name: str) -> Rule[Example]:
    """The rule of that name."""
    return grammar.find(RULES, name)


def markdown() -> str:
    """The rules as the Markdown table docs/architecture.md holds."""
    return grammar.markdown(RULES)
