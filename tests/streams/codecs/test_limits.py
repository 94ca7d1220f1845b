"""Declared lengths and ENUM/SET members (streams/codecs/limits.py): each rule at its bound and one
past it, then through every codec that reads declarations (Simple JSON native and Python, Simple
Avro, Debezium after its DDL)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from config.errors import DecodeError
from core.model import (
    Bootstrap,
    ColumnFlag,
    ColumnSchema,
    IndexSchema,
    MySQLType,
    Op,
    RowChange,
    TableSchema,
    Value,
    column_type,
)
from streams.codecs.debezium import DebeziumCodec
from streams.codecs.limits import Limit, Unit, limit
from streams.codecs.simple import SimpleJSONCodec
from streams.codecs.simple_avro import SimpleAvroCodec
from streams.codecs.simple_schema import column_types

_TEXT = column_type(MySQLType.VARCHAR)
_CHAR = column_type(MySQLType.STRING)
_BYTES = column_type(MySQLType.VARCHAR, ColumnFlag.BINARY)


def _refused(bound: Limit | None, value: Value) -> str | None:
    """The refusal's text, or None when ``value`` fits."""
    assert bound is not None
    try:
        bound.check(value)
    except ValueError as error:
        return str(error)
    return None


# --- the rules -------------------------------------------------------------------------------


@pytest.mark.parametrize("char", ["a", "ü", "中", "😀"])
@pytest.mark.parametrize(("kind", "name"), [(_CHAR, "char"), (_TEXT, "varchar")])
def test_char_and_varchar_count_characters(kind: Any, name: str, char: str) -> None:
    bound = limit(kind, name, 3, "utf8mb4", None)
    assert _refused(bound, char * 3) is None
    assert _refused(bound, char * 4) == f"4 characters, past the 3 a {name}(3) column holds"


@pytest.mark.parametrize("charset", ["utf8", "utf8mb3", "UTF8MB4"])
def test_every_utf8_charset_counts_characters(charset: str) -> None:
    bound = limit(_TEXT, "varchar", 2, charset, None)
    assert _refused(bound, "😀😀") is None
    assert _refused(bound, "😀😀😀") is not None


def test_binary_charset_counts_bytes() -> None:
    bound = limit(_TEXT, "varchar", 4, "binary", None)
    assert _refused(bound, "ü" * 2) is None  # 4 bytes
    assert _refused(bound, "ü" * 2 + "a") == "5 bytes, past the 4 a varchar(4) column holds"
    assert _refused(bound, "😀") is None
    assert _refused(bound, "😀a") is not None


@pytest.mark.parametrize("name", ["binary", "varbinary"])
def test_binary_and_varbinary_count_bytes(name: str) -> None:
    kind = column_type(
        MySQLType.STRING if name == "binary" else MySQLType.VARCHAR, ColumnFlag.BINARY
    )
    bound = limit(kind, name, 8, "binary", None)
    assert _refused(bound, b"\x00" * 8) is None
    assert _refused(bound, b"\xff" * 9) == f"9 bytes, past the 8 a {name}(8) column holds"


@pytest.mark.parametrize(
    ("mysql_type", "name", "maximum"),
    [
        (MySQLType.TINY_BLOB, "tinytext", 255),
        (MySQLType.BLOB, "text", 65_535),
        (MySQLType.MEDIUM_BLOB, "mediumtext", 16_777_215),
        (MySQLType.LONG_BLOB, "longtext", 4_294_967_295),
    ],
)
def test_text_and_blob_types_hold_their_fixed_bytes(
    mysql_type: int, name: str, maximum: int
) -> None:
    # The declared length does not matter: the type's own bound does.
    bound = limit(column_type(mysql_type), name, 7, "utf8mb4", None)
    assert bound == Limit(Unit.BYTES, maximum, name)
    if maximum > 16_777_215:
        return  # 4 GiB of text is past any message; the rule is the one tested below
    assert _refused(bound, "a" * maximum) is None
    assert _refused(bound, b"a" * maximum) is None
    assert (
        _refused(bound, "a" * (maximum + 1))
        == f"{maximum + 1} bytes, past the {maximum} a {name} column holds"
    )
    assert _refused(bound, b"a" * (maximum + 1)) is not None
    # Text counts its UTF-8 bytes: a 2-byte character at the bound, then one byte past it.
    assert _refused(bound, "a" * (maximum - 2) + "ü") is None
    assert _refused(bound, "a" * (maximum - 1) + "ü") == (
        f"{maximum + 1} bytes, past the {maximum} a {name} column holds"
    )


def test_enum_index_up_to_its_members() -> None:
    bound = limit(column_type(MySQLType.ENUM), "enum", 1, "utf8mb4", ("a", "b"))
    for index in (0, 1, 2):  # 0: MySQL's empty error member
        assert _refused(bound, index) is None
    assert _refused(bound, 3) == "member 3 is past the 2 members of this enum column"


def test_set_bits_within_its_members() -> None:
    bound = limit(column_type(MySQLType.SET), "set", 1, "utf8mb4", ("x", "y", "z"))
    assert _refused(bound, 0) is None
    assert _refused(bound, 0b111) is None
    assert _refused(bound, 0b1000) == "bits 0x8 go past the 3 members of this set column"
    assert _refused(bound, 1 << 63) is not None


@pytest.mark.parametrize(
    ("kind", "name", "length", "charset", "elements"),
    [
        (_TEXT, "varchar", 0, "utf8mb4", None),  # no declared length (the project's encoder)
        (_TEXT, "varchar", -1, "utf8mb4", None),  # TiDB's unspecified length
        (_TEXT, "varchar", None, "utf8mb4", None),
        (_TEXT, "varchar", 3, "latin1", None),  # another charset: not counted
        (_TEXT, "varchar", 3, None, None),
        (column_type(MySQLType.ENUM), "enum", 1, "utf8mb4", None),
        (column_type(MySQLType.SET), "set", 1, "utf8mb4", ()),
        (column_type(MySQLType.BIT), "bit", 3, "binary", None),  # BIT widths are not checked
        (column_type(MySQLType.LONG), "int", 11, "binary", None),
    ],
)
def test_nothing_known_is_nothing_checked(
    kind: Any, name: str, length: int | None, charset: str | None, elements: Any
) -> None:
    assert limit(kind, name, length, charset, elements) is None


@given(st.text(max_size=40), st.integers(0, 60))
def test_characters_and_bytes_as_python_counts_them(text: str, maximum: int) -> None:
    characters = limit(_TEXT, "varchar", maximum or 1, "utf8mb4", None)
    in_bytes = limit(_TEXT, "varchar", maximum or 1, "binary", None)
    assert (_refused(characters, text) is None) == (len(text) <= (maximum or 1))
    size = len(text.encode("utf-8", "surrogatepass"))
    assert (_refused(in_bytes, text) is None) == (size <= (maximum or 1))


# --- Simple: JSON (native and Python) and Avro -----------------------------------------------

_COLUMNS = (
    ColumnSchema("id", "int", nullable=False),
    ColumnSchema("c", "char", "utf8mb4", "utf8mb4_bin", length=3),
    ColumnSchema("v", "varchar", "utf8mb4", "utf8mb4_bin", length=3),
    ColumnSchema("vb", "varchar", "binary", "binary", length=3),
    ColumnSchema("b", "binary", "binary", "binary", length=3),
    ColumnSchema("vbin", "varbinary", "binary", "binary", length=3),
    ColumnSchema("tt", "tinytext", "utf8mb4", "utf8mb4_bin", length=255),
    ColumnSchema("tb", "tinyblob", "binary", "binary", length=255),
    ColumnSchema("e", "enum", "utf8mb4", "utf8mb4_bin", length=1, elements=("a", "b")),
    ColumnSchema("s", "set", "utf8mb4", "utf8mb4_bin", length=3, elements=("x", "y")),
    ColumnSchema("l1", "varchar", "latin1", "latin1_bin", length=3),
)
TABLE = TableSchema("d", "t", 1, 7, _COLUMNS, (IndexSchema("primary", True, True, False, ("id",)),))
# Per column: a value at its bound, one past it, and what the refusal says of the second.
BOUNDS: dict[str, tuple[Value, Value, str]] = {
    "c": ("ü中😀", "ü中😀a", "4 characters, past the 3 a char(3)"),
    "v": ("😀😀😀", "abcd", "4 characters, past the 3 a varchar(3)"),
    "vb": ("abc", "ü中", "5 bytes, past the 3 a varchar(3)"),
    "b": (b"\x00\xff\x00", b"\x00\xff\x00\x01", "4 bytes, past the 3 a binary(3)"),
    "vbin": (b"abc", b"abcd", "4 bytes, past the 3 a varbinary(3)"),
    "tt": ("ü" * 127 + "a", "ü" * 128, "256 bytes, past the 255 a tinytext"),
    "tb": (b"\xff" * 255, b"\xff" * 256, "256 bytes, past the 255 a tinyblob"),
    "e": (2, 3, "member 3 is past the 2 members"),
    "s": (3, 4, "bits 0x4 go past the 2 members"),
}


def _simple_codecs(native: bool) -> list[Any]:
    return [SimpleJSONCodec(native=native), SimpleAvroCodec()]


def _row(values: dict[str, Value]) -> RowChange:
    types = column_types(TABLE)
    new = {"id": 1, **values}
    return RowChange(5, "d", "t", Op.INSERT, {n: types[n] for n in new}, new, None)


def _decoded(codec: Any, values: dict[str, Value]) -> RowChange:
    """``values`` of one row through ``codec``'s own encoder (lengths unchecked there) and back."""
    encoder = type(codec)() if isinstance(codec, SimpleAvroCodec) else SimpleJSONCodec(native=False)
    bootstrap, dml = encoder.encode([Bootstrap(TABLE), _row(values)])
    codec.decode(None, bootstrap.value)
    (event,) = codec.decode(None, dml.value)
    assert isinstance(event, RowChange)
    return event


@pytest.mark.parametrize("column", sorted(BOUNDS))
@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
def test_simple_refuses_one_past_each_bound(column: str, native: bool, request: Any) -> None:
    if native:
        request.getfixturevalue("native")
    at, past, reason = BOUNDS[column]
    for codec in _simple_codecs(native):
        if isinstance(codec, SimpleAvroCodec) and native:
            continue  # no native Simple Avro decoder
        assert _decoded(codec, {column: at}).new == {"id": 1, column: at}
        with pytest.raises(DecodeError) as refused:
            _decoded(codec, {column: past})
        assert reason in refused.value.reason
        assert refused.value.where == f"data.{column}"


@pytest.mark.usefixtures("native")
@pytest.mark.parametrize("column", sorted(BOUNDS))
def test_native_simple_takes_the_bound_and_hands_back_past_it(column: str) -> None:
    at, past, _ = BOUNDS[column]
    codec = SimpleJSONCodec()
    assert codec._native is not None
    encoder = SimpleJSONCodec(native=False)
    bootstrap, dml = encoder.encode([Bootstrap(TABLE), _row({column: at})])
    codec.decode(None, bootstrap.value)
    codec.decode(None, dml.value)  # the Python path makes the layout the native side reads
    (row,) = codec._native.decode(None, dml.value)
    assert row.new == {"id": 1, column: at}
    (past_dml,) = encoder.encode([_row({column: past})])
    assert codec._native.decode(None, past_dml.value) is None


def test_simple_other_charsets_are_not_counted() -> None:
    row = _decoded(SimpleJSONCodec(native=False), {"l1": "abcdef"})
    assert row.new == {"id": 1, "l1": "abcdef"}


def test_simple_error_cuts_the_value_short() -> None:
    with pytest.raises(DecodeError) as refused:
        _decoded(SimpleJSONCodec(native=False), {"tt": "x" * 100_000})
    assert len(str(refused.value)) < 400
    assert "100000 bytes, past the 255 a tinytext column holds" in str(refused.value)


# --- Debezium: after its DDL only ------------------------------------------------------------


def _ddl_message(columns: list[dict[str, Any]]) -> bytes:
    change = {"type": "CREATE", "id": '"d"."t"', "table": {"columns": columns}}
    payload = {
        "source": {"db": "d", "table": "t", "commit_ts": 1},
        "ddl": "CREATE TABLE t (...)",
        "tableChanges": [change],
    }
    return orjson.dumps({"payload": payload})


def _debezium_row(after: dict[str, Any]) -> bytes:
    source = {"db": "d", "table": "t", "commit_ts": 2}
    return orjson.dumps({"payload": {"source": source, "op": "c", "after": after}})


_DDL_COLUMNS = [
    {"name": "v", "typeName": "VARCHAR", "length": 3, "charsetName": "utf8mb4"},
    {"name": "vb", "typeName": "VARBINARY", "length": 3, "charsetName": None},
    {"name": "t", "typeName": "TINYTEXT", "length": None, "charsetName": "utf8mb4"},
    {"name": "e", "typeName": "ENUM", "enumValues": ["'a'", "'b'"], "charsetName": "utf8mb4"},
    {"name": "l", "typeName": "VARCHAR", "length": 3, "charsetName": "latin1"},
]


def test_debezium_checks_lengths_only_after_its_ddl() -> None:
    codec = DebeziumCodec()
    # Before the DDL nothing declares a length: the value is taken.
    (row,) = codec.decode(None, _debezium_row({"v": "abcdef"}))
    assert row.new == {"v": "abcdef"}
    codec.decode(None, _ddl_message(_DDL_COLUMNS))
    (row,) = codec.decode(None, _debezium_row({"v": "ü中😀", "vb": "AAEC", "t": "ü" * 127}))
    assert row.new == {"v": "ü中😀", "vb": b"\x00\x01\x02", "t": "ü" * 127}
    past = [
        ({"v": "abcd"}, "4 characters, past the 3 a varchar(3)"),
        ({"vb": "AAECAw=="}, "4 bytes, past the 3 a varbinary(3)"),
        ({"t": "ü" * 128}, "256 bytes, past the 255 a tinytext"),
    ]
    for after, reason in past:
        with pytest.raises(DecodeError) as refused:
            codec.decode(None, _debezium_row(after))
        assert reason in refused.value.reason
        assert refused.value.where == f"payload.{next(iter(after))}"
    # An ENUM names its member: one not among them is refused (as before this check).
    with pytest.raises(DecodeError):
        codec.decode(None, _debezium_row({"e": "c"}))
    (row,) = codec.decode(None, _debezium_row({"e": "b", "l": "abcdef"}))
    assert row.new == {"e": 2, "l": "abcdef"}
