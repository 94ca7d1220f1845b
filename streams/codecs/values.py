"""Value encodings the protocols share: Go string escaping, base64, numbers as text."""

from __future__ import annotations

import base64
import binascii
import codecs
import math
import re
import struct
from decimal import Decimal

from config.errors import shown
from core.model import ColumnType, MySQLType, Value, integer_range

_GO_ESCAPES = {
    "a": b"\x07",
    "b": b"\x08",
    "f": b"\x0c",
    "n": b"\n",
    "r": b"\r",
    "t": b"\t",
    "v": b"\x0b",
    "\\": b"\\",
    "'": b"'",
    '"': b'"',
}
_GO_QUOTE = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x5C: "\\\\",
    0x22: '\\"',
}
# Octal escapes stop at \377 here: Python's decoder would take \400 and up, Go refuses them.
_ONLY_BYTE_ESCAPES = re.compile(r"(?:[^\\]|\\(?:x[0-9A-Fa-f]{2}|[0-3][0-7]{2}|[abfnrtv\\'\"]))*")
_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|[0-7]{3}|[abfnrtv\\'\"])")


def go_unquote(text: str) -> bytes:
    """The bytes of a Go ``strconv.Quote`` body (the string without its quotes).

    Raises ``ValueError`` on an escape Go would reject.
    """
    if "\\" not in text:
        return text.encode()
    if "\\u" not in text and "\\U" not in text and _ONLY_BYTE_ESCAPES.fullmatch(text):
        # Every escape is one Python's C bytes-escape decoder reads the same way Go does.
        return codecs.escape_decode(text.encode())[0]
    out = bytearray()
    pos = 0
    while (slash := text.find("\\", pos)) >= 0:
        out += text[pos:slash].encode()
        match = _ESCAPE.match(text, slash)
        if match is None:
            raise ValueError(f"invalid escape {text[slash : slash + 4]!r} at character {slash}")
        code = match.group(1)
        kind = code[0]
        if kind == "x":
            out.append(int(code[1:], 16))
        elif kind in "uU":
            out += chr(int(code[1:], 16)).encode("utf-8", "surrogatepass")
        elif kind.isdigit():
            number = int(code, 8)
            if number > 0xFF:
                raise ValueError(f"octal escape \\{code} is out of range")
            out.append(number)
        else:
            out += _GO_ESCAPES[kind]
        pos = match.end()
    out += text[pos:].encode()
    return bytes(out)


def go_quote(data: bytes) -> str:
    """Go's ``strconv.Quote`` of ``data`` without the surrounding quotes."""
    text = data.decode("utf-8", "surrogateescape")
    parts: list[str] = []
    for char in text:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # an invalid UTF-8 byte, kept by surrogateescape
            parts.append(f"\\x{code - 0xDC00:02x}")
        elif code in _GO_QUOTE:
            parts.append(_GO_QUOTE[code])
        elif char == " " or (char.isprintable() and code != 0x7F):
            parts.append(char)
        elif code < 0x80:
            parts.append(f"\\x{code:02x}")
        elif code < 0x10000:
            parts.append(f"\\u{code:04x}")
        else:
            parts.append(f"\\U{code:08x}")
    return "".join(parts)


def b64decode(text: str) -> bytes:
    """Strict standard base64 (``ValueError`` on anything else)."""
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64: {exc}") from None


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def text_or_bytes(data: bytes) -> str | bytes:
    """UTF-8 text where it is valid; the bytes otherwise (a TEXT column in another charset)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def as_bytes(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")


def format_float(value: float, single: bool = False) -> str:
    """Go's ``strconv.FormatFloat(v, 'f', -1, 64 or 32)``: shortest digits, never an exponent."""
    if math.isnan(value) or math.isinf(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    if single:
        shortest = _shortest_float32(struct.unpack("<f", struct.pack("<f", value))[0])
    else:
        shortest = repr(value)
    if "e" not in shortest and "E" not in shortest:
        return shortest.removesuffix(".0")
    return format(Decimal(shortest), "f")


def _shortest_float32(value: float) -> str:
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        try:
            if struct.unpack("<f", struct.pack("<f", float(text)))[0] == value:
                return repr(float(text)) if "e" not in text else text
        except OverflowError:  # rounding past FLT_MAX: more digits are needed
            continue
    return repr(value)


def checked_integer(kind: ColumnType, value: Value) -> Value:
    """``value`` when a column of ``kind`` can hold it: an integer type's value must be an int in
    its type's range (``ValueError`` otherwise, never a conversion); other types pass."""
    allowed = integer_range(kind.mysql_type, kind.is_unsigned)
    if allowed is None or value is None or (value.__class__ is int and value in allowed):
        return value
    return _refuse_integer(kind, value)


def _refuse_integer(kind: ColumnType, value: Value) -> Value:
    try:
        name = MySQLType(kind.mysql_type).name
    except ValueError:
        name = str(kind.mysql_type)
    unsigned = " unsigned" if kind.is_unsigned else ""
    if value.__class__ is not int:
        raise ValueError(f"{shown(value)} is not an integer, as a{unsigned} {name} column holds")
    raise ValueError(f"{shown(value)} is out of range for a{unsigned} {name} column")
