"""TiCDC's per-message ``large-message-handle-compression``: snappy (block) or lz4 (frame)."""

from __future__ import annotations

from enum import StrEnum

import cramjam

from config.errors import DecodeError
from streams.codecs.base import MAX_MESSAGE_BYTES


class Compression(StrEnum):
    NONE = "none"
    SNAPPY = "snappy"
    LZ4 = "lz4"


def _snappy_length(data: bytes) -> int:
    """The uncompressed length a snappy block announces in its leading uvarint."""
    result = shift = 0
    for byte in data[:5]:
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result
        shift += 7
    return -1


def decompress(method: Compression, data: bytes, protocol: str) -> bytes:
    """``data`` uncompressed; a bomb or corrupt input raises ``DecodeError``."""
    if method is Compression.NONE:
        return data
    try:
        if method is Compression.SNAPPY:
            size = _snappy_length(data)
            if not 0 <= size <= MAX_MESSAGE_BYTES:
                raise DecodeError(protocol, f"snappy block announces {size} bytes", where="byte 0")
            return bytes(cramjam.snappy.decompress_raw(data))
        result = bytes(cramjam.lz4.decompress(data))
    except cramjam.DecompressionError as exc:
        raise DecodeError(protocol, f"{method.value} decompression failed: {exc}") from None
    if len(result) > MAX_MESSAGE_BYTES:
        raise DecodeError(protocol, f"lz4 message inflates past {MAX_MESSAGE_BYTES} bytes")
    return result


def compress(method: Compression, data: bytes) -> bytes:
    if method is Compression.NONE:
        return data
    if method is Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    return bytes(cramjam.lz4.compress(data))
