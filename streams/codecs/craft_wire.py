"""Craft's wire primitives: the reader of one region of a message (varints, chunks, strings) and
the writer the encoder fills, both bounds-checked so a corrupt message fails as a DecodeError that
names where."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from config.errors import DecodeError

PROTOCOL = "craft"
# A uvarint of a uint64 takes at most 10 bytes.
MAX_VARINT_BYTES = 10
MASK64 = (1 << 64) - 1
FLOAT64 = struct.Struct("<d")


class Reader:
    """Cursor over one region of a message; every error names the absolute byte offset."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, start: int, end: int) -> None:
        self.data = data
        self.pos = start
        self.end = end

    def fail(self, reason: str, event: int | None = None) -> DecodeError:
        return DecodeError(PROTOCOL, reason, event_index=event, where=f"byte {self.pos}")

    def remaining(self) -> int:
        return self.end - self.pos

    def byte(self) -> int:
        if self.pos >= self.end:
            raise self.fail("buffer underflow reading a byte")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def uvarint(self) -> int:
        data, pos, end = self.data, self.pos, self.end
        if pos < end and data[pos] < 0x80:
            # Most varints (lengths, term ids, small numbers) are one byte.
            self.pos = pos + 1
            return data[pos]
        result = shift = 0
        for count in range(MAX_VARINT_BYTES):
            if pos >= end:
                raise self.fail("buffer underflow inside a varint")
            byte = data[pos]
            pos += 1
            if byte < 0x80:
                if count == MAX_VARINT_BYTES - 1 and byte > 1:
                    raise self.fail("varint overflows 64 bits")
                self.pos = pos
                return result | byte << shift
            result |= (byte & 0x7F) << shift
            shift += 7
        raise self.fail("varint longer than 10 bytes")

    def varint(self) -> int:
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)

    def length(self, what: str, nullable: bool = False) -> int:
        size = self.varint() if nullable else self.uvarint()
        if nullable and size == -1:
            return -1
        if size < 0 or size > self.remaining():
            raise self.fail(f"{what} length {size} runs past the end ({self.remaining()} left)")
        return size

    def count(self, what: str) -> int:
        """An element count: each element takes at least one byte, which bounds allocation."""
        size = self.uvarint()
        if size > self.remaining():
            raise self.fail(f"{what} count {size} exceeds the {self.remaining()} bytes left")
        return size

    def take(self, size: int) -> bytes:
        if size > self.remaining():
            raise self.fail(f"need {size} bytes, {self.remaining()} left")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def uvarint_chunk(self, size: int) -> list[int]:
        # Inlined one-byte fast path: chunks hold most of a message's varints.
        data, pos, end = self.data, self.pos, self.end
        values = []
        for _ in range(size):
            if pos < end and data[pos] < 0x80:
                values.append(data[pos])
                pos += 1
            else:
                self.pos = pos
                values.append(self.uvarint())
                pos = self.pos
        self.pos = pos
        return values

    def varint_chunk(self, size: int) -> list[int]:
        return [(raw >> 1) ^ -(raw & 1) for raw in self.uvarint_chunk(size)]

    def delta_uvarint_chunk(self, size: int) -> list[int]:
        values = []
        last = 0
        for index, delta in enumerate(self.uvarint_chunk(size)):
            last = delta if index == 0 else (last + delta) & MASK64
            values.append(last)
        return values

    def delta_varint_chunk(self, size: int) -> list[int]:
        values = []
        last = 0
        for index, delta in enumerate(self.varint_chunk(size)):
            last = delta if index == 0 else wrap64(last + delta)
            values.append(last)
        return values

    def nullable_bytes_chunk(self, size: int) -> list[bytes | None]:
        lengths = self.varint_chunk(size)
        data, pos, end = self.data, self.pos, self.end
        values: list[bytes | None] = []
        for length in lengths:
            if length == -1:
                values.append(None)
                continue
            if length < 0 or length > end - pos:
                self.pos = pos
                raise self.fail(f"value length {length} runs past the end ({end - pos} left)")
            values.append(data[pos : pos + length])
            pos += length
        self.pos = pos
        return values

    def string_chunk(self, size: int) -> list[str]:
        lengths = [self.length("term") for _ in range(size)]
        out = []
        for n in lengths:
            start = self.pos
            try:
                out.append(self.take(n).decode("utf-8"))
            except UnicodeDecodeError:
                self.pos = start
                raise self.fail("term is not UTF-8") from None
        return out


def wrap64(value: int) -> int:
    value &= MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def reversed_uvarint(data: bytes) -> tuple[int, int]:
    """The uvarint at the end of ``data`` written most significant group first; (value, bytes)."""
    result = shift = 0
    pos = len(data) - 1
    for count in range(MAX_VARINT_BYTES):
        if pos < 0:
            break
        byte = data[pos]
        if byte < 0x80:
            return result | byte << shift, count + 1
        result |= (byte & 0x7F) << shift
        shift += 7
        pos -= 1
    raise DecodeError(PROTOCOL, "bad size-table length at the end of the message", where="end")


def uvarint(value: int) -> bytes:
    if not 0 <= value <= MASK64:
        raise TypeError("out of uint64 range")
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value: int) -> bytes:
    if not -(1 << 63) <= value < 1 << 63:
        raise TypeError("out of int64 range")
    return uvarint(((value << 1) ^ (value >> 63)) & MASK64)


class Writer:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def uvarint(self, value: int) -> None:
        self.out += uvarint(value)

    def varint(self, value: int) -> None:
        self.out += varint(value)

    def delta_uvarint_chunk(self, values: Sequence[int]) -> None:
        last = values[0]
        self.uvarint(last)
        for value in values[1:]:
            self.uvarint((value - last) & MASK64)
            last = value

    def delta_varint_chunk(self, values: Sequence[int]) -> None:
        last = values[0]
        self.varint(last)
        for value in values[1:]:
            self.varint(wrap64(value - last))
            last = value
