"""Avro's binary encoding of the records TiCDC writes, read straight into model values.

TiCDC's records are flat: every field a primitive (a DECIMAL ``bytes`` with its logical type),
maybe in a union with null. So a record schema from the registry is made once into one Python
function that reads its fields in order, the one-byte varints (nearly every int, length and
union branch) inline: fastavro's ``schemaless_reader`` reads any schema and pays for that on
every call, about twice this reader's cost per record here. fastavro stays the reference the
reader is tested against (tests/streams/codecs/test_avro.py, ``reference_reader``), and reads
any record this one does not take (:func:`record_reader` returns None).

The function is made from source text holding only the field names as Python string literals
(``repr``) and integers checked as such; each column's value conversion is passed in by name.
Whatever stops a read (input that ends early, a bad length, union branch or boolean, invalid
UTF-8, a value its column's conversion refuses) leaves the reader as one ``ValueError`` naming
the field; the codec words it as the message's ``DecodeError``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Container, Sequence
from typing import Any

from core.model import Value

# (data, pos) -> (the record's columns, the fields asked for apart, the position after it)
RecordReader = Callable[[bytes, int], tuple[dict[str, Any], tuple[Any, ...], int]]
# A column's conversion of its non-null values, or the range its integers must be in.
Converter = Callable[[Any], Value] | range
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# A long's varint is at most 10 bytes: 70 bits, of which a long uses 64.
_MAX_VARINT_BITS = 70


def decimal_text(unscaled: int, scale: int) -> str:
    """A decimal's text at ``scale`` digits after the point, as TiDB writes it (and as
    ``format(Decimal, "f")`` gives fastavro's value)."""
    digits = str(abs(unscaled))
    if scale:
        digits = digits.rjust(scale + 1, "0")
        digits = f"{digits[:-scale]}.{digits[-scale:]}"
    return "-" + digits if unscaled < 0 else digits


def _bad_varint(pos: int) -> ValueError:
    return ValueError(f"a varint longer than 10 bytes at byte {pos}")


def _bad_range(value: int, allowed: range) -> ValueError:
    return ValueError(f"{value} is out of its column's range {allowed.start}..{allowed.stop - 1}")


def _bad_length(size: int, pos: int) -> ValueError:
    return ValueError(f"a length of {size} bytes at byte {pos} runs past the end")


def _bad_branch(branch: int, pos: int) -> ValueError:
    return ValueError(f"union branch byte {branch} at byte {pos}, of a union of null and a value")


def _bad_boolean(byte: int, pos: int) -> ValueError:
    return ValueError(f"a boolean of byte {byte} at byte {pos}")


_HELPERS: dict[str, Any] = {
    "decimal_text": decimal_text,
    "unpack_float": struct.Struct("<f").unpack_from,
    "unpack_double": struct.Struct("<d").unpack_from,
    "bad_length": _bad_length,
    "bad_varint": _bad_varint,
    "bad_range": _bad_range,
    "bad_branch": _bad_branch,
    "bad_boolean": _bad_boolean,
    "struct_error": struct.error,
}


def _long(target: str) -> list[str]:
    """A zigzag varint (Avro's int and long) into ``target``, inline: a call costs more than
    most varints' bytes."""
    return [
        "b = data[pos]",
        "pos += 1",
        "if b < 0x80:",
        f"    {target} = (b >> 1) ^ -(b & 1)",
        "else:",
        "    n = b & 0x7F",
        "    s = 7",
        "    while b >= 0x80:",
        "        b = data[pos]",
        "        pos += 1",
        "        n |= (b & 0x7F) << s",
        "        s += 7",
        # Checked once at the end: a run of continuation bytes stops at the end of the data.
        f"    if s > {_MAX_VARINT_BITS}:",
        "        raise bad_varint(pos)",
        f"    {target} = (n >> 1) ^ -(n & 1)",
    ]


def _sized(target: str, convert: str) -> list[str]:
    """A length, then its bytes, as ``convert`` (a format with ``{}`` for the slice) makes them."""
    return [
        *_long("n"),
        "end = pos + n",
        "if n < 0 or end > size:",
        "    raise bad_length(n, pos)",
        f"{target} = {convert.format('data[pos:end]')}",
        "pos = end",
    ]


def _value(primitive: str, scale: int | None) -> list[str]:
    """Statements reading one non-null value of ``primitive`` into ``v``."""
    if scale is not None:
        return _sized("v", f"decimal_text(int.from_bytes({{}}, 'big', signed=True), {scale})")
    if primitive in ("int", "long"):
        return _long("v")
    if primitive == "string":
        return _sized("v", "{}.decode('utf-8')")
    if primitive == "bytes":
        return _sized("v", "{}")
    if primitive == "float":
        return ["v = unpack_float(data, pos)[0]", "pos += 4"]
    if primitive == "double":
        return ["v = unpack_double(data, pos)[0]", "pos += 8"]
    if primitive == "boolean":
        return [
            "b = data[pos]",
            "if b > 1:",
            "    raise bad_boolean(b, pos)",
            "v = b == 1",
            "pos += 1",
        ]
    return ["v = None"]


def _shape(avro_type: Any) -> tuple[str, int | None] | None:
    """A non-union type's primitive and its decimal scale (None: not a decimal), or None when
    the reader does not take it."""
    if isinstance(avro_type, str):
        return (avro_type, None) if avro_type in _PRIMITIVES else None
    if not isinstance(avro_type, dict):
        return None
    primitive, logical = avro_type.get("type"), avro_type.get("logicalType")
    if logical == "decimal" and primitive == "bytes":
        scale = avro_type.get("scale", 0)
        valid = isinstance(scale, int) and not isinstance(scale, bool) and scale >= 0
        return ("bytes", scale) if valid else None
    if logical is not None:  # fastavro would give a date or a UUID: its reading decides
        return None
    return (primitive, None) if primitive in _PRIMITIVES else None


def _field(index: int, avro_type: Any, convert: Converter | None) -> list[str] | None:
    """Statements reading field ``index`` into ``f<index>``, or None for a type not taken."""
    null_branch = None
    if isinstance(avro_type, list):
        if len(avro_type) != 2 or "null" not in avro_type:
            return None
        null_branch = avro_type.index("null")
        avro_type = avro_type[1 - null_branch]
    shape = _shape(avro_type)
    if shape is None:
        return None
    primitive, scale = shape
    body = _value(primitive, scale)
    if isinstance(convert, range) and primitive in ("int", "long"):
        body += [
            f"if not {convert.start} <= v < {convert.stop}:",
            f"    raise bad_range(v, c{index})",
        ]
    # A decimal's text is the model's value already.
    called = convert is not None and not isinstance(convert, range) and scale is None
    body.append(f"f{index} = c{index}(v)" if called else f"f{index} = v")
    if null_branch is None:
        return body
    # The branch index is a one-byte zigzag varint: 0 for the first branch, 2 for the second.
    return [
        "b = data[pos]",
        "pos += 1",
        f"if b == {(1 - null_branch) * 2}:",
        *("    " + line for line in body),
        f"elif b == {null_branch * 2}:",
        f"    f{index} = None",
        "else:",
        "    raise bad_branch(b, pos - 1)",
    ]


def record_reader(
    fields: Sequence[tuple[str, Any, Converter | None]],
    apart: Sequence[str] = (),
    dropped: Container[str] = (),
) -> RecordReader | None:
    """The reader of a record of ``fields`` (name, Avro type, the conversion of its non-null
    values): ``(data, pos) -> (record, values of the fields named in apart (None for one the
    record lacks), position after it)``, the ``dropped`` fields read and let go; None when a
    field's type is one the reader does not take."""
    lines = ["def read(data, pos):", "    size = len(data)", "    field = 0", "    try:"]
    namespace = dict(_HELPERS)
    namespace["names"] = [name for name, _, _ in fields]
    for index, (name, avro_type, convert) in enumerate(fields):
        if not isinstance(name, str):
            return None
        body: list[str] | None
        if name in dropped and avro_type in ("int", "long"):
            # Read past, not decoded: the varint's last byte is the first below 0x80.
            body = ["while data[pos] >= 0x80:", "    pos += 1", "pos += 1"]
        else:
            body = _field(index, avro_type, convert)
        if body is None:
            return None
        if convert is not None:
            namespace[f"c{index}"] = convert
        lines += [f"        field = {index}", *("        " + line for line in body)]
    index_of = {name: index for index, (name, _, _) in enumerate(fields)}
    kept = [
        f"{name!r}: f{index}"
        for index, (name, _, _) in enumerate(fields)
        if name not in apart and name not in dropped
    ]
    items = ", ".join(kept)
    split = "".join(f"f{index_of[name]}, " if name in index_of else "None, " for name in apart)
    lines += [
        "    except (IndexError, struct_error):",
        "        raise ValueError(f'the record ends inside field {names[field]!r}') from None",
        "    except ValueError as exc:",
        "        raise ValueError(f'{exc}, at field {names[field]!r}') from None",
        f"    return {{{items}}}, ({split}), pos",
    ]
    exec(compile("\n".join(lines), "<avro record reader>", "exec"), namespace)
    reader: RecordReader = namespace["read"]
    return reader
