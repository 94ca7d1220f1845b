"""The differential fuzzer (tests/streams/codecs/fuzz.py) on a short budget: mutations of each
protocol's real TiCDC-encoded messages raise nothing but the project's own errors, take no
longer than the hang guard, and decode natively exactly as in Python (``make fuzz`` runs the
long budget)."""

from __future__ import annotations

import contextlib
import importlib
import random
import time

import pytest
from hypothesis import strategies as st

from config.errors import DecodeError, TicdcSinkError
from core.native import native_module
from streams.codecs.simple import SimpleJSONCodec
from tests.conftest import missing, shared_folder
from tests.streams.codecs.fuzz import (
    PROTOCOLS,
    PYTHON_ONLY,
    RETIMES,
    Sides,
    Tally,
    check,
    fuzz,
    seeds,
    table,
)
from tests.streams.codecs.fuzz_values import past_limits
from tests.streams.codecs.structure import PROTOCOLS as STRUCTURED
from tests.streams.codecs.structure import grammar, judge, subject
from tests.streams.codecs.structure.judge import run as run_structure
from tests.streams.codecs.structure.mutate import table as structure_table

MUTATIONS = 10_000


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_mutations_are_refused_by_project_errors_or_decoded_alike(protocol: str) -> None:
    if protocol in PYTHON_ONLY and native_module() is None:
        # Under CI a failure, as every test missing what it needs (make builds the wheel).
        missing("ticdc_sink_native is not installed: nothing to compare the Python codec with")
    folder = shared_folder("conformance")
    tally = fuzz(protocol, MUTATIONS, folder=folder)
    assert tally.clean, table([tally]) + "\n" + "\n".join(tally.failures)
    # A fuzzer whose mutations all decode, or none, is not exercising the codec.
    assert tally.refused > MUTATIONS // 10 and tally.accepted > MUTATIONS // 100


@pytest.mark.usefixtures("native")
def test_a_disagreement_and_a_foreign_exception_are_counted() -> None:
    sides = Sides("open")
    tally = Tally("open")

    class Broken:
        def decode(self, key: bytes | None, value: bytes) -> list[object]:
            raise OverflowError("not a project error")

    sides.python = Broken()  # type: ignore[assignment]
    check(sides, (b"", b""), tally)
    assert (tally.mutations, tally.other_exceptions) == (1, 1)
    sides = Sides("open")
    sides.python.decode = lambda key, value: []  # type: ignore[method-assign]
    resolved = (1).to_bytes(8, "big") + (14).to_bytes(8, "big") + b'{"ts":5,"t":3}'
    check(sides, (resolved, b""), tally)
    assert tally.disagreements == 1 and not tally.clean


def test_values_past_declared_bounds_reach_the_checks() -> None:
    """The fuzzer's bound mutations make Simple values the length and member checks refuse."""
    messages = seeds("simple", shared_folder("conformance"))
    codec = SimpleJSONCodec(native=False)
    rng = random.Random(0)
    reasons = []
    for key, value in messages:
        with contextlib.suppress(TicdcSinkError):
            codec.decode(key, value)
    for _ in range(2_000):
        key, value = rng.choice(messages)
        try:
            codec.decode(key, past_limits(rng, value) or value)
        except DecodeError as error:
            reasons.append(error.reason)
        except TicdcSinkError:
            pass
    assert any("characters, past the" in r for r in reasons)
    assert any("bytes, past the" in r for r in reasons)
    assert any("members of this enum" in r for r in reasons)
    assert any("members of this set" in r for r in reasons)


# Structural cases in the normal run (seconds); `make fuzz` runs 100,000 and more. Craft's
# binary trees break fewer rules per case: 300 of them break 7 of its 13, 600 break 11. Simple
# Avro's schema leaves fewer shapes to break (most of its mutations stay valid): 300 break 8 of
# the 9 rules an Avro record can, 600 all 9; its cases break something less often (30-36% of
# them, run to run), so a fifth is its floor, a third the others'.
STRUCTURAL_CASES = 300
MORE_CASES = {"craft": 600, "simple-avro": 600}
INVALID_FLOOR = {"simple-avro": 5}


@pytest.mark.usefixtures("native")
@pytest.mark.parametrize("protocol", STRUCTURED)
def test_structural_mutations_are_judged_by_the_grammar_alike_on_both_decoders(
    protocol: str,
) -> None:
    """Messages generated from the protocol's grammar, their structure mutated: the Python
    codec accepts exactly the valid ones and names the rule each other one breaks, the native
    decoder hands back every invalid one and decodes the valid ones as Python does."""
    cases = MORE_CASES.get(protocol, STRUCTURAL_CASES)
    tally = run_structure(subject(protocol), cases)
    assert tally.clean, structure_table([tally]) + "\n" + "\n".join(tally.failures)
    # Mutations that break nothing, or everything, would not exercise the grammar.
    assert tally.valid > cases // 10 and tally.invalid > cases // INVALID_FLOOR.get(protocol, 3)
    # Most of the protocol's rules broken (Avro has 7, the others more).
    rules = importlib.import_module(grammar(protocol)).RULES
    assert len(tally.rules) >= min(8, len(rules)), tally.rules


@pytest.mark.parametrize(("slow_calls", "hangs"), [(1, 0), (99, 1)])
def test_a_slow_decode_is_a_hang_only_when_it_is_slow_every_time(
    monkeypatch: pytest.MonkeyPatch, slow_calls: int, hangs: int
) -> None:
    """A machine's pause (one slow call) passes; a decoder slow on an input fails the fuzz."""
    monkeypatch.setattr(judge, "HANG_MS", 20)
    calls = []

    def decode(key: bytes | None, value: bytes) -> list[object]:
        calls.append(value)
        if len(calls) <= slow_calls:
            time.sleep(0.03)
        return []

    slow = judge.Subject(
        name="slow",
        messages=lambda: st.just(b"m"),
        oracle=lambda message: None,
        encode=lambda message: (None, message),
        python=lambda: decode,
        native=lambda: None,
    )
    judged = judge.Judge(slow)
    judged.check(b"m")
    assert (judged.tally.hangs, len(calls)) == (hangs, 1 + RETIMES)
