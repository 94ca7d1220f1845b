"""The three-way oracle of the structural fuzz, whatever the protocol: the protocol's own
reading of its grammar (``Subject.oracle``) says whether a generated message is valid or which
rule it breaks; the Python codec must accept exactly the valid ones and refuse each other one
with a ``GrammarError``; every native decoder must hand back each invalid one and decode a valid
one as Python does (or hand it back too)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from config.errors import GrammarError, TicdcSinkError
from tests.streams.codecs.fuzz import RETIMES, fastest
from tests.streams.codecs.structure.mutate import Tally

# The oracle's word for a message it leaves to other tests (a claim check, encoded text).
UNJUDGED = "unjudged"
# A message whose bytes are not the protocol's framing or JSON at all: refused, by any error.
NOT_JSON = "not JSON"
# A decode slower than this, timed again as the differential fuzz does (its ``fastest``), is
# counted a hang (ms).
HANG_MS = 1000

Decode = Callable[[bytes | None, bytes], Any]


@dataclass(frozen=True)
class Subject:
    """What each protocol module gives the judge: its generated messages (valid and mutated),
    the grammar's verdict on one, its bytes, the Python codec's decode and the native decoder's
    entry points (None when the native module is missing)."""

    name: str
    messages: Callable[[], st.SearchStrategy[Any]]
    oracle: Callable[[Any], str | None]
    encode: Callable[[Any], tuple[bytes | None, bytes]]
    python: Callable[[], Decode]
    native: Callable[[], list[Decode] | None]


class OutOfTime(BaseException):
    """The run's time budget is spent (a BaseException: hypothesis lets it through)."""


class Judge:
    """Both decoders and the oracle, over one message at a time."""

    def __init__(self, subject: Subject, until: float = math.inf) -> None:
        self.until = until
        self.subject = subject
        self.python = subject.python()
        self.native = subject.native() or []
        self.tally = Tally(subject.name)

    def check(self, message: Any) -> None:
        if time.monotonic() > self.until:
            raise OutOfTime
        tally = self.tally
        tally.cases += 1
        broken = self.subject.oracle(message)
        if broken == UNJUDGED:
            tally.unjudged += 1
            return
        wire = self.subject.encode(message)
        python, native, seconds = self._decode(wire)
        took = fastest(seconds, lambda: self._decode(wire), HANG_MS / 1000) * 1000
        tally.slowest_ms = max(tally.slowest_ms, took)
        if took > HANG_MS:
            tally.hangs += 1
            tally.fail(f"decode took {took:.0f} ms or more in each of {RETIMES + 1} tries", wire)
        if isinstance(python, Exception) and not isinstance(python, TicdcSinkError):
            tally.other_exceptions += 1
            tally.fail(f"python {type(python).__name__}: {python}", wire)
        elif isinstance(native, Exception):
            tally.other_exceptions += 1
            tally.fail(f"native {type(native).__name__}: {native}", wire)
        elif broken is None:
            self._valid(python, native[:1], wire)
        else:
            self._invalid(broken, python, native, wire)

    def _decode(self, wire: tuple[bytes | None, bytes]) -> tuple[Any, Any, float]:
        """Python's decode (or its error), the native decoders' (or the first error), and the
        seconds both took."""
        started = time.perf_counter()
        python: Any
        native: Any
        try:
            python = self.python(*wire)
        except Exception as error:  # the caller tells a project error from a finding
            python = error
        try:
            native = [decode(*wire) for decode in self.native]
        except Exception as error:
            native = error
        return python, native, time.perf_counter() - started

    def _valid(self, python: Any, native: list[Any], wire: tuple[bytes | None, bytes]) -> None:
        tally = self.tally
        tally.valid += 1
        tally.native_decoded += bool(native) and native[0] is not None
        if not isinstance(python, list):
            tally.valid_refused += 1
            tally.fail(f"valid refused by python: {python}", wire)
        elif any(n is not None and n != python and repr(n) != repr(python) for n in native):
            tally.disagreements += 1
            tally.fail("native decodes otherwise", wire)

    def _invalid(
        self, broken: str, python: Any, native: list[Any], wire: tuple[bytes | None, bytes]
    ) -> None:
        tally = self.tally
        tally.invalid += 1
        tally.rules[broken] = tally.rules.get(broken, 0) + 1
        if isinstance(python, list):
            tally.invalid_accepted += 1
            tally.fail(f"python accepts what breaks {broken}", wire)
        elif not isinstance(python, GrammarError) and broken != NOT_JSON:
            tally.invalid_accepted += 1
            tally.fail(f"python refuses {broken} without naming a rule: {python}", wire)
        elif isinstance(python, GrammarError) and python.rule != broken:
            tally.disagreements += 1
            tally.fail(f"python names {python.rule} where the grammar says {broken}", wire)
        if any(n is not None for n in native):
            tally.invalid_accepted += 1
            tally.disagreements += 1
            tally.fail(f"native accepts what breaks {broken}", wire)


def run(subject: Subject, cases: int, seed: int = 0, seconds: float = math.inf) -> Tally:
    """``cases`` generated messages of ``subject`` through the judge, or as many as ``seconds``
    allow (the tally says how many)."""
    judge = Judge(subject, time.monotonic() + seconds)

    @settings(
        max_examples=cases,
        deadline=None,
        database=None,
        derandomize=seed == 0,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(subject.messages())
    def each(message: Any) -> None:
        judge.check(message)

    with contextlib.suppress(OutOfTime):
        each()
    return judge.tally
