"""Value-level mutations of the differential fuzzer (tests/streams/codecs/fuzz.py): a JSON
message with one string value swapped for one past (or at) a declared bound, or a key and its
value swapped."""

from __future__ import annotations

import base64
import random
import re

import orjson

# A JSON string value after a colon (an object member's value).
_STRING_VALUE = re.compile(rb'(?<=:)\s*"(?:[^"\\]|\\.)*"')
# Characters of 1 to 4 UTF-8 bytes: a length in characters and one in bytes differ for most.
_CHARACTERS = ["x", "ü", "中", "😀"]
# Lengths at and around the declared ones of the conformance tables (CHAR(10), VARCHAR(255),
# BINARY(8), VARBINARY(64), TINYTEXT's 255 and TEXT's 65,535 bytes).
_LENGTHS = [1, 3, 7, 8, 9, 10, 11, 63, 64, 65, 127, 128, 254, 255, 256, 257, 16_383, 32_768, 65_535]
_LENGTHS_PAST_TEXT = [65_536, 65_537]
# ENUM indexes and SET bitmasks (Simple writes both as numbers in strings) around their members.
_INDEXES = [0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 63, 64, 65_535, 1 << 63]


def past_limits(rng: random.Random, text: bytes) -> bytes | None:
    """``text`` (JSON) with one string value swapped for text, base64 bytes or an ENUM/SET number
    at or just past a declared bound; None when it has no string value."""
    found = list(_STRING_VALUE.finditer(text))
    if not found:
        return None
    match = rng.choice(found)
    lengths = _LENGTHS + (_LENGTHS_PAST_TEXT if rng.random() < 0.05 else [])
    size = rng.choice(lengths) + rng.choice([-1, 0, 0, 1])
    choice = rng.randrange(4)
    if choice == 0:
        value: object = rng.choice(_CHARACTERS) * max(size, 0)
    elif choice == 1:
        # Mixed widths, so that characters and bytes cross a bound at different lengths.
        value = "".join(rng.choice(_CHARACTERS) for _ in range(min(max(size, 0), 4_096)))
    elif choice == 2:
        value = base64.b64encode(rng.randbytes(max(size, 0))).decode()
    else:
        value = str(rng.choice(_INDEXES) + rng.choice([-1, 0, 1]))
    return text[: match.start()] + orjson.dumps(value) + text[match.end() :]


def swap_key_and_value(text: bytes) -> bytes | None:
    """The first ``"name":value`` pair with name and value swapped (a scalar value)."""
    pair = re.search(rb'"((?:[^"\\]|\\.)*)"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d[\d.eE+-]*)', text)
    if pair is None:
        return None
    name, value = pair.group(1), pair.group(2)
    if not value.startswith(b'"'):
        value = b'"' + value + b'"'
    return text[: pair.start()] + value + b':"' + name + b'"' + text[pair.end() :]
