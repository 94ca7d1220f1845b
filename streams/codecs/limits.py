"""Declared lengths and ENUM/SET members: what a column's declaration lets one value hold.

A codec makes each column's :class:`Limit` once, when it reads the declaration (Simple's table
schema, Debezium's DDL ``tableChanges``), and checks every decoded value against it: a value past
its column's declaration is bad input (TiCDC sends none, the downstream would cut or refuse it),
never something to shorten. The rules, as MySQL declares them:

- CHAR/VARCHAR hold their declared length in characters (in bytes with the binary charset);
  BINARY/VARBINARY in bytes.
- The TEXT/BLOB family hold a fixed number of bytes whatever the declaration says.
- An ENUM value is a member's index, 1 up (0 is MySQL's empty error member); a SET value is a
  bitmask with one bit per member.

Only what a codec knows is checked: no declared length (or 0, what the project's own encoder
writes), no members, or a charset other than utf8/utf8mb4/binary leaves a column unchecked
(:func:`limit` returns None). The native Simple decoder mirrors ``Limit.check`` by ``unit``
and ``maximum``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from core.model import BLOB_TYPES, CHAR_TYPES, ColumnType, MySQLType, Value

# Bytes a TEXT/BLOB type holds, whatever length its declaration gives.
BLOB_BYTES: dict[int, int] = {
    MySQLType.TINY_BLOB: 255,
    MySQLType.BLOB: 65_535,
    MySQLType.MEDIUM_BLOB: 16_777_215,
    MySQLType.LONG_BLOB: 4_294_967_295,
}
# Charsets whose characters a decoded str counts one for one (utf8 is MySQL's utf8mb3).
_CHARACTER_CHARSETS = frozenset({"utf8", "utf8mb3", "utf8mb4"})
# A UTF-8 character is at most this many bytes: text this short cannot pass a limit in bytes.
_MAX_UTF8 = 4


class Unit(IntEnum):
    """What a limit counts (the native decoder reads these numbers)."""

    CHARACTERS = 0
    BYTES = 1
    ENUM_MEMBERS = 2
    SET_MEMBERS = 3


@dataclass(frozen=True, slots=True)
class Limit:
    """A column's declared bound: ``maximum`` characters, bytes or members.

    ``check(value)`` returns ``value`` when it fits and raises ``ValueError`` saying by how
    much it does not. A value of a class the unit does not count (bytes of a utf8 column,
    which Simple Avro hands over when they are not UTF-8) is the type check's to judge, not
    this one's. It is a function made for the unit once, so that a check per value is one
    call without dispatching on the unit."""

    unit: Unit
    maximum: int
    # The column's type as messages name it: ``varchar(3)``, ``text``, ``enum``.
    type_name: str
    check: Callable[[Value], Value] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "check", _CHECKS[self.unit](self.maximum, self.type_name))


def _characters(maximum: int, type_name: str) -> Callable[[Value], Value]:
    def check(value: Value) -> Value:
        if value.__class__ is str and len(value) > maximum:
            raise ValueError(_past(len(value), "characters", maximum, type_name))
        return value

    return check


def _bytes(maximum: int, type_name: str) -> Callable[[Value], Value]:
    def check(value: Value) -> Value:
        size = _byte_size(value, maximum)
        if size > maximum:
            raise ValueError(_past(size, "bytes", maximum, type_name))
        return value

    return check


def _enum_members(maximum: int, type_name: str) -> Callable[[Value], Value]:
    def check(value: Value) -> Value:
        if value.__class__ is int and value > maximum:
            raise ValueError(f"member {value} is past the {maximum} members of this enum column")
        return value

    return check


def _set_members(maximum: int, type_name: str) -> Callable[[Value], Value]:
    def check(value: Value) -> Value:
        if value.__class__ is int and value >> maximum:
            raise ValueError(f"bits {value:#x} go past the {maximum} members of this set column")
        return value

    return check


_CHECKS = {
    Unit.CHARACTERS: _characters,
    Unit.BYTES: _bytes,
    Unit.ENUM_MEMBERS: _enum_members,
    Unit.SET_MEMBERS: _set_members,
}


def _past(size: int, what: str, maximum: int, type_name: str) -> str:
    return f"{size} {what}, past the {maximum} a {type_name} column holds"


def _byte_size(value: Value, maximum: int) -> int:
    """The UTF-8 size of ``value`` (str or bytes), encoding it only when its length alone does
    not show that it fits ``maximum``; 0 for other classes."""
    if value.__class__ is bytes:
        return len(value)
    if value.__class__ is not str:
        return 0
    if len(value) * _MAX_UTF8 <= maximum:
        return len(value)
    return len(value.encode("utf-8", "surrogatepass"))


def limit(
    kind: ColumnType,
    type_name: str,
    length: int | None,
    charset: str | None,
    elements: Sequence[str] | None,
) -> Limit | None:
    """The bound of a column of ``kind`` declared with ``length``, ``charset`` and ENUM/SET
    ``elements`` (each None where the declaration does not say), or None if nothing is known."""
    mysql_type = kind.mysql_type
    name = type_name.lower().split("(", 1)[0].strip()
    if mysql_type in BLOB_TYPES:
        return Limit(Unit.BYTES, BLOB_BYTES[mysql_type], name)
    if mysql_type in CHAR_TYPES:
        if not length or length < 0:
            return None
        declared = f"{name}({length})"
        charset = (charset or "").lower()
        if kind.is_binary or charset == "binary":
            return Limit(Unit.BYTES, length, declared)
        if charset in _CHARACTER_CHARSETS:
            return Limit(Unit.CHARACTERS, length, declared)
        return None
    if mysql_type == MySQLType.ENUM and elements:
        return Limit(Unit.ENUM_MEMBERS, len(elements), name)
    if mysql_type == MySQLType.SET and elements:
        return Limit(Unit.SET_MEMBERS, len(elements), name)
    return None
