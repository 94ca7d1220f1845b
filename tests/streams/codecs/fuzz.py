"""The differential fuzzer of the codecs: seeded mutations of the real TiCDC-encoded messages
(../shared/conformance/ticdc_encoded), each decoded by the Python codec (the reference) and, for
a protocol with a native decoder, natively, then compared.

A mutation passes when the Python codec decodes it or refuses it with one of the project's own
errors (config/errors.py), and the native side agrees: the codec as the worker runs it (native
first, then Python) gives Python's answer, the native decoder alone either hands the message back
(None) or gives Python's events, and its packed rows (Open Protocol, Craft) are Python's rows
packed. Anything else is counted: an exception of another type, a disagreement, a message that
took longer than :data:`HANG_S`. The test runs a short budget (tests/streams/codecs/test_fuzz.py);
``make fuzz`` runs ``python -m tests.streams.codecs.fuzz --mutations N`` and prints the table.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import gzip
import random
import re
import struct
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from config.errors import NotYetDecodableError, TicdcSinkError
from core.model import Event, Resolved, RowChange
from core.packed import pack_rows
from streams.codecs import Codec, codec_for
from streams.codecs.craft import CraftCodec
from streams.codecs.open_protocol import OpenProtocolCodec, split_frames
from streams.codecs.simple import SimpleJSONCodec
from tests.streams.codecs.fuzz_values import past_limits, swap_key_and_value

PROTOCOLS = ["open", "craft", "canal-json", "simple", "simple-avro", "debezium"]
# The protocols with a native decoder, and how to make their Python-only reference.
PYTHON_ONLY: dict[str, Callable[[], Codec]] = {
    "open": lambda: OpenProtocolCodec(native=False),
    "craft": lambda: CraftCodec(native=False),
    "simple": lambda: SimpleJSONCodec(native=False),
}
# The native decoders that also pack rows for staging.
PACKED = frozenset({"open", "craft"})
# A message taking longer than this to decode counts as a hang: TiCDC's largest messages decode
# in milliseconds.
HANG_S = 1.0
# A decode over the guard is timed this many times more; its fastest counts (:func:`fastest`).
RETIMES = 3
# JSON nested past what any TiCDC message holds, below orjson's limit of 1,024.
DEEP = 1_000
# Numbers a JSON value may be swapped for: past 64 bits either way, past a double, edges.
_NUMBERS = [
    b"18446744073709551616",
    b"-9223372036854775809",
    b"36893488147419103232",
    b"1e400",
    b"-1e400",
    b"-0",
    b"18446744073709551615",
    b"-9223372036854775808",
    b"256",
    b"-129",
    b"65536",
    b"2156",
    b"0.5",
    b"1" * 400,
]
# What a JSON value may be swapped for: other types, empty values, deep nesting.
_VALUES = [
    b"null",
    b"true",
    b'""',
    b"{}",
    b"[]",
    b"[{}]",
    b'"x"',
    b'{"a":1}',
    b"[" * DEEP + b"]" * DEEP,
    b'{"a":' * DEEP + b"1" + b"}" * DEEP,
    b'"\\ud800"',
    b'"\xff\xfe"',
    *_NUMBERS,
]
# A JSON scalar value after a colon or a comma or bracket, and a number anywhere.
_JSON_VALUE = re.compile(rb'(?<=[:\[,])\s*(?:"(?:[^"\\]|\\.)*"|-?\d[\d.eE+-]*|true|false|null)')
_JSON_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_JSON_KEY = re.compile(rb'"(?:[^"\\]|\\.)*"(?=\s*:)')

Message = tuple[bytes | None, bytes]


def conformance() -> Path:
    """The conformance folder: beside the checkout, or where TICDC_SINK_SHARED points."""
    import os

    shared = Path(os.environ.get("TICDC_SINK_SHARED", Path(__file__).parents[3].parent / "shared"))
    return shared / "conformance"


def seeds(protocol: str, folder: Path | None = None) -> list[Message]:
    """Every message of ``protocol``'s TiCDC-encoded stream, in stream order."""
    path = (folder or conformance()) / "ticdc_encoded" / f"{protocol}.jsonl.gz"
    messages: list[Message] = []
    with gzip.open(path) as lines:
        for line in lines:
            item = orjson.loads(line)
            key = base64.b64decode(item["k"]) if item["k"] is not None else None
            messages.append((key, base64.b64decode(item["v"])))
    return messages


def _bytes_mutation(rng: random.Random, data: bytes) -> bytes:
    """``data`` with one byte-level change: a flipped bit, cut short, bytes inserted or deleted,
    invalid UTF-8, or a length-sized field overwritten."""
    buf = bytearray(data)
    if not buf:
        return rng.randbytes(rng.randint(1, 16))
    at = rng.randrange(len(buf))
    choice = rng.randrange(6)
    if choice == 0:
        buf[at] ^= 1 << rng.randrange(8)
    elif choice == 1:
        del buf[at:]
    elif choice == 2:
        buf[at:at] = rng.randbytes(rng.randint(1, 8))
    elif choice == 3:
        del buf[at : at + rng.randint(1, 8)]
    elif choice == 4:
        buf[at:at] = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x00"])
    else:
        buf[at : at + 8] = struct.pack(">Q", rng.choice([0, 1 << 62, (1 << 64) - 1, len(buf)]))
    return bytes(buf)


def _json_mutation(rng: random.Random, text: bytes) -> bytes | None:
    """``text`` (JSON) with one value, number or key changed; None when it has none."""
    choice = rng.randrange(4)
    if choice == 0:
        found = list(_JSON_NUMBER.finditer(text))
        replacements = _NUMBERS
    elif choice == 1:
        found = list(_JSON_VALUE.finditer(text))
        replacements = _VALUES
    elif choice == 2:
        found = list(_JSON_KEY.finditer(text))
        replacements = [b'""', b'"u"', b'"d"', b'"p"', b'"t"', b'"v"', b'"ts"', b'"data"']
    else:
        # An object or array member's value swapped for a container of another shape.
        found = list(_JSON_VALUE.finditer(text))
        replacements = [b"[{}]", b"{}", b"[" * DEEP + b"]" * DEEP, b"[1,2]", b'{"t":1}']
    if not found:
        return None
    match = rng.choice(found)
    return text[: match.start()] + rng.choice(replacements) + text[match.end() :]


def _mutate_json(rng: random.Random, text: bytes) -> bytes:
    if rng.random() < 0.35:
        return _bytes_mutation(rng, text)
    if rng.random() < 0.1:
        swapped = swap_key_and_value(text)
        if swapped is not None:
            return swapped
    if rng.random() < 0.25:
        # A value at or past a declared length or ENUM/SET members.
        return past_limits(rng, text) or _bytes_mutation(rng, text)
    return _json_mutation(rng, text) or _bytes_mutation(rng, text)


def _frame(frames: list[bytes], prefix: bytes = b"") -> bytes:
    return prefix + b"".join(len(part).to_bytes(8, "big") + part for part in frames)


def _mutate_frames(rng: random.Random, data: bytes, skip: int) -> bytes:
    """An Open Protocol key or value: a JSON mutation inside one frame, framed again (so that
    it reaches the JSON reader), or a byte-level change of the whole."""
    try:
        frames = split_frames(data, skip, "fuzz")
    except TicdcSinkError:
        frames = []
    if not frames or rng.random() < 0.3:
        return _bytes_mutation(rng, data)
    at = rng.randrange(len(frames))
    frames[at] = _mutate_json(rng, frames[at])
    return _frame(frames, data[:skip])


def mutate(rng: random.Random, protocol: str, message: Message) -> Message:
    """One mutation of ``message`` (key or value) as ``protocol`` frames it."""
    key, value = message
    if rng.random() < 0.02:
        # Key and value swapped.
        return value, key or b""
    if rng.random() < 0.02:
        return key, b""
    if protocol == "open":
        if key is not None and rng.random() < 0.3:
            return _mutate_frames(rng, key, 8), value
        return key, _mutate_frames(rng, value, 0)
    if protocol in ("craft", "simple-avro"):
        return key, _bytes_mutation(rng, value)
    return key, _mutate_json(rng, value)


@dataclass
class Tally:
    """One protocol's fuzzing figures."""

    protocol: str
    mutations: int = 0
    refused: int = 0
    accepted: int = 0
    disagreements: int = 0
    other_exceptions: int = 0
    hangs: int = 0
    slowest_ms: float = 0.0
    # The first few failures, to show.
    failures: list[str] = field(default_factory=list)

    def fail(self, kind: str, message: Message, detail: str) -> None:
        if len(self.failures) < 5:
            key, value = message
            self.failures.append(f"{kind}: {detail[:300]} (key {key!r:.120}, value {value!r:.300})")

    @property
    def clean(self) -> bool:
        return not (self.disagreements or self.other_exceptions or self.hangs)


Answer = list[Event] | type[Exception]


class Sides:
    """A protocol's reference codec and, when it has one, its native codec, fed alike."""

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        make = PYTHON_ONLY.get(protocol)
        self.python: Codec = make() if make else codec_for(protocol)
        self.native: Any = codec_for(protocol) if make else None
        if self.native is not None and getattr(self.native, "_native", None) is None:
            self.native = None

    def prime(self, messages: list[Message]) -> None:
        """Feed the unmutated stream (Simple and Debezium learn table schemas from it)."""
        for key, value in messages:
            for codec in (self.python, self.native):
                if codec is not None:
                    with contextlib.suppress(TicdcSinkError):
                        codec.decode(key, value)


def _answer(codec: Codec, message: Message) -> Answer:
    """The events ``codec`` decodes, or the type of project error it refuses with; any other
    exception propagates."""
    try:
        return codec.decode(*message)
    except NotYetDecodableError:
        return NotYetDecodableError
    except TicdcSinkError as error:
        return type(error)


def _same(first: Answer, second: Answer) -> bool:
    # A fuzzed float may be NaN, which equals nothing: equal as text then.
    return first == second or repr(first) == repr(second)


def check(sides: Sides, message: Message, tally: Tally) -> None:
    """Decode ``message`` on every side and count what happened."""
    tally.mutations += 1
    started = time.perf_counter()
    try:
        reference = _answer(sides.python, message)
    except Exception as error:  # not one of the project's errors: the fuzzer's finding
        tally.other_exceptions += 1
        tally.fail("exception (python)", message, f"{type(error).__name__}: {error}")
        return
    finally:
        _timed(tally, started, message, lambda: _answer(sides.python, message))
    if isinstance(reference, list):
        tally.accepted += 1
    else:
        tally.refused += 1
    if sides.native is None:
        return
    started = time.perf_counter()
    try:
        _compare_native(sides, message, reference, tally)
    except Exception as error:
        tally.other_exceptions += 1
        tally.fail("exception (native)", message, f"{type(error).__name__}: {error}")
    finally:
        _timed(
            tally,
            started,
            message,
            lambda: _compare_native(sides, message, reference, Tally(sides.protocol)),
        )


def _compare_native(sides: Sides, message: Message, reference: Answer, tally: Tally) -> None:
    native_only = sides.native._native.decode(*message)
    if native_only is not None and not _same(native_only, reference):
        tally.disagreements += 1
        tally.fail(
            "native took", message, f"native {native_only!r:.200} / python {reference!r:.200}"
        )
        return
    # The codec as the worker runs it: native first, Python for what it hands back.
    combined = _answer(sides.native, message)
    if not _same(combined, reference):
        tally.disagreements += 1
        tally.fail("codec", message, f"native-first {combined!r:.200} / python {reference!r:.200}")
        return
    if sides.protocol in PACKED:
        packed = sides.native.decode_packed(*message)
        if packed is None:
            return
        if not isinstance(reference, list):
            tally.disagreements += 1
            tally.fail("packed", message, f"packed what python refuses ({reference.__name__})")
            return
        rows = [e for e in reference if isinstance(e, RowChange)]
        marks = [e.commit_ts for e in reference if isinstance(e, Resolved)]
        if (packed.rows(), packed.resolved) != (pack_rows(rows), marks) and repr(
            packed.rows()
        ) != repr(pack_rows(rows)):
            tally.disagreements += 1
            tally.fail("packed", message, "packed rows differ from python's rows packed")


def fastest(took: float, again: Callable[[], object], guard: float = HANG_S) -> float:
    """``took`` (seconds), or when it is over ``guard`` the fastest of it and :data:`RETIMES` more
    runs of ``again``, the same work (its errors ignored): a pause of the machine passes, a
    decoder slow on this input is slow every time."""
    for _ in range(RETIMES if took > guard else 0):
        started = time.perf_counter()
        with contextlib.suppress(Exception):
            again()
        took = min(took, time.perf_counter() - started)
    return took


def _timed(tally: Tally, started: float, message: Message, again: Callable[[], object]) -> None:
    took = fastest(time.perf_counter() - started, again)
    tally.slowest_ms = max(tally.slowest_ms, took * 1000)
    if took > HANG_S:
        tally.hangs += 1
        tally.fail("hang", message, f"{took:.2f} s or more in each of {RETIMES + 1} tries")


def fuzz(protocol: str, mutations: int, seed: int = 0, folder: Path | None = None) -> Tally:
    """``mutations`` seeded mutations of ``protocol``'s stream, each checked on every side."""
    messages = seeds(protocol, folder)
    sides = Sides(protocol)
    sides.prime(messages)
    rng = random.Random(f"{protocol}-{seed}")
    tally = Tally(protocol)
    for _ in range(mutations):
        check(sides, mutate(rng, protocol, rng.choice(messages)), tally)
    return tally


def table(tallies: list[Tally]) -> str:
    """The figures as a Markdown table."""
    lines = [
        "| protocol | mutations | refused | accepted | disagreements | other exceptions | hangs "
        "| slowest ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in tallies:
        lines.append(
            f"| {t.protocol} | {t.mutations:,} | {t.refused:,} | {t.accepted:,} | "
            f"{t.disagreements} | {t.other_exceptions} | {t.hangs} | {t.slowest_ms:.1f} |"
        )
    return "\n".join(lines)


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.streams.codecs.fuzz")
    parser.add_argument("--mutations", type=int, default=100_000, help="per protocol")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--protocols", nargs="*", default=PROTOCOLS, choices=PROTOCOLS)
    return parser.parse_args(argv)


def _failures(tallies: list[Tally]) -> Iterator[str]:
    for t in tallies:
        for failure in t.failures:
            yield f"{t.protocol}: {failure}"


def main(argv: list[str] | None = None) -> int:
    """Fuzz each protocol, print the table (and the first failures); 1 if any failed."""
    arguments = _arguments(sys.argv[1:] if argv is None else argv)
    tallies = []
    for protocol in arguments.protocols:
        tallies.append(fuzz(protocol, arguments.mutations, arguments.seed))
        print(table(tallies[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(table(tallies))
    for line in _failures(tallies):
        print(line)
    return 0 if all(t.clean for t in tallies) else 1


if __name__ == "__main__":
    sys.exit(main())
