"""The normalized event model every codec decodes to and encodes from.

Values keep full fidelity: ``int`` for every integer type (unsigned BIGINT up to 2**64-1, BIT,
ENUM and SET indexes, YEAR), ``float`` for FLOAT/DOUBLE, exact ``str`` for DECIMAL, dates, times
and JSON, ``str`` for text and ``bytes`` for binary data. Commit timestamps are ``int`` TSOs and
never pass through a float.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, IntFlag, StrEnum
from functools import cache

Value = int | float | str | bytes | None


class Op(StrEnum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


class MySQLType(IntEnum):
    """MySQL column type codes, as TiCDC's Open Protocol and Craft carry them."""

    TINY = 1
    SHORT = 2
    LONG = 3
    FLOAT = 4
    DOUBLE = 5
    NULL = 6
    TIMESTAMP = 7
    LONGLONG = 8
    INT24 = 9
    DATE = 10
    DURATION = 11
    DATETIME = 12
    YEAR = 13
    NEWDATE = 14
    VARCHAR = 15
    BIT = 16
    JSON = 245
    NEWDECIMAL = 246
    ENUM = 247
    SET = 248
    TINY_BLOB = 249
    MEDIUM_BLOB = 250
    LONG_BLOB = 251
    BLOB = 252
    VAR_STRING = 253
    STRING = 254
    GEOMETRY = 255


class ColumnFlag(IntFlag):
    """TiCDC's column flag bits."""

    BINARY = 0x01
    HANDLE_KEY = 0x02
    GENERATED = 0x04
    PRIMARY_KEY = 0x08
    UNIQUE_KEY = 0x10
    MULTIPLE_KEY = 0x20
    NULLABLE = 0x40
    UNSIGNED = 0x80


INTEGER_TYPES = frozenset(
    {MySQLType.TINY, MySQLType.SHORT, MySQLType.LONG, MySQLType.LONGLONG, MySQLType.INT24}
)
# Types whose value is an integer in the model besides the plain integers.
INDEX_TYPES = frozenset({MySQLType.BIT, MySQLType.ENUM, MySQLType.SET, MySQLType.YEAR})
FLOAT_TYPES = frozenset({MySQLType.FLOAT, MySQLType.DOUBLE})
BLOB_TYPES = frozenset(
    {MySQLType.TINY_BLOB, MySQLType.MEDIUM_BLOB, MySQLType.LONG_BLOB, MySQLType.BLOB}
)
CHAR_TYPES = frozenset({MySQLType.VARCHAR, MySQLType.VAR_STRING, MySQLType.STRING})
# Carried as exact strings: DECIMAL, dates and times, JSON.
STRING_TYPES = frozenset(
    {
        MySQLType.TIMESTAMP,
        MySQLType.DATE,
        MySQLType.DURATION,
        MySQLType.DATETIME,
        MySQLType.NEWDATE,
        MySQLType.JSON,
        MySQLType.NEWDECIMAL,
    }
)
NULL_TYPES = frozenset({MySQLType.NULL, MySQLType.GEOMETRY})


# The values each integer type holds, signed and unsigned (MySQL's ranges); an index type's
# values are the same whatever its flags: YEAR 0 or 1901..2155 (0..2155 taken), ENUM's index
# (up to 65,535 members), SET's and BIT(64)'s bits. TiCDC sends nothing outside them, so a value
# outside is bad input, never converted.
_SIGNED_BITS: dict[int, int] = {
    MySQLType.TINY: 8,
    MySQLType.SHORT: 16,
    MySQLType.INT24: 24,
    MySQLType.LONG: 32,
    MySQLType.LONGLONG: 64,
}
_INDEX_RANGES: dict[int, range] = {
    MySQLType.YEAR: range(0, 2156),
    MySQLType.ENUM: range(0, 1 << 16),
    MySQLType.SET: range(0, 1 << 64),
    MySQLType.BIT: range(0, 1 << 64),
}


@cache
def integer_range(mysql_type: int, unsigned: bool) -> range | None:
    """The integers a column of ``mysql_type`` holds (None: not an integer type)."""
    bits = _SIGNED_BITS.get(mysql_type)
    if bits is not None:
        return range(0, 1 << bits) if unsigned else range(-(1 << bits - 1), 1 << bits - 1)
    return _INDEX_RANGES.get(mysql_type)


# Plain ints: an IntFlag's ``&`` is a Python-level call, and these are tested per value.
_BINARY = int(ColumnFlag.BINARY)
_UNSIGNED = int(ColumnFlag.UNSIGNED)
_KEY = int(ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY)


@dataclass(frozen=True, slots=True)
class ColumnType:
    """A column's MySQL type code and TiCDC flags (shared between rows: see :func:`column_type`)."""

    mysql_type: int
    flags: int = 0

    @property
    def is_binary(self) -> bool:
        return bool(self.flags & _BINARY)

    @property
    def is_unsigned(self) -> bool:
        return bool(self.flags & _UNSIGNED)

    @property
    def is_key(self) -> bool:
        return bool(self.flags & _KEY)


@cache
def column_type(mysql_type: int, flags: int = 0) -> ColumnType:
    """The one shared :class:`ColumnType` for a (type, flags) pair: rows repeat them."""
    return ColumnType(mysql_type, flags)


@dataclass(slots=True)
class RowChange:
    """One row's change at one commit ts.

    ``columns`` names every column present in ``new`` or ``old`` with its type and flags. A delete
    has ``new=None`` and ``old`` the deleted image (possibly key columns only); an insert has
    ``old=None``; an update has both (``old`` is None when TiCDC ran without old values).
    ``row_id`` is the upstream's identity of the row where the protocol carries one (Open
    Protocol's ``rid``: TiDB's integer handle, a key-less table's hidden row id).
    """

    commit_ts: int
    schema: str
    table: str
    op: Op
    columns: dict[str, ColumnType]
    new: dict[str, Value] | None
    old: dict[str, Value] | None
    partition_id: int | None = None
    handle_key_only: bool = False
    row_id: int | None = None

    def key_names(self) -> list[str]:
        """The handle/primary key columns, or every column when the table has no such key."""
        keys = [name for name, kind in self.columns.items() if kind.is_key]
        return keys or list(self.columns)


@dataclass(slots=True)
class DDLEvent:
    """A schema change; ``ddl_type`` is TiDB's action code, or the Simple protocol's type name."""

    commit_ts: int
    schema: str | None
    table: str | None
    query: str
    ddl_type: int | str
    table_schema: TableSchema | None = None
    pre_table_schema: TableSchema | None = None


@dataclass(slots=True, frozen=True)
class Resolved:
    """Every event of this partition with a smaller commit ts has been sent."""

    commit_ts: int


@dataclass(slots=True, frozen=True)
class ColumnSchema:
    """A column as the Simple protocol's table schema describes it."""

    name: str
    mysql_type: str
    charset: str = "binary"
    collate: str = "binary"
    length: int = 0
    decimal: int | None = None
    elements: tuple[str, ...] | None = None
    unsigned: bool = False
    zerofill: bool = False
    nullable: bool = True
    default: str | None = None


@dataclass(slots=True, frozen=True)
class IndexSchema:
    name: str
    unique: bool
    primary: bool
    nullable: bool
    columns: tuple[str, ...]


@dataclass(slots=True, frozen=True)
class TableSchema:
    """A table's schema at one version (Simple protocol BOOTSTRAP and DDL messages)."""

    schema: str
    table: str
    table_id: int
    version: int
    columns: tuple[ColumnSchema, ...]
    indexes: tuple[IndexSchema, ...] = field(default=())


@dataclass(slots=True, frozen=True)
class Bootstrap:
    """The Simple protocol's periodic announcement of a table's schema."""

    table_schema: TableSchema
    build_ts: int = 0


@dataclass(slots=True, frozen=True)
class ClaimCheck:
    """A message TiCDC stored outside Kafka (``large-message-handle-option=claim-check``):
    the whole message, key and value, is the object at ``location``."""

    location: str


Event = RowChange | DDLEvent | Resolved | Bootstrap | ClaimCheck
