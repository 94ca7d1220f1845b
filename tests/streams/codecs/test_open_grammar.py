"""Open Protocol's grammar (streams/codecs/open_grammar.py) as both decoders enforce it: every
rule's examples are refused by the Python codec naming that rule and handed back by the native
decoder; every accepted deviation decodes alike on both; the docs show the module's table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from config.errors import GrammarError
from streams.codecs import open_grammar as grammar
from streams.codecs.open_protocol import OpenProtocolCodec

ARCHITECTURE = Path(__file__).parents[3] / "docs" / "architecture.md"


def message(key: str, value: str) -> tuple[bytes, bytes]:
    """One event's key and value JSON as an Open Protocol message."""
    framed_key = (1).to_bytes(8, "big") + len(key.encode()).to_bytes(8, "big") + key.encode()
    return framed_key, len(value.encode()).to_bytes(8, "big") + value.encode()


CASES = [(r.name, key, value) for r in grammar.RULES for key, value in r.examples]


@pytest.mark.parametrize(("rule", "key", "value"), CASES)
def test_each_rule_is_enforced_by_both_decoders(
    native: Any, rule: str, key: str, value: str
) -> None:
    framed = message(key, value)
    with pytest.raises(GrammarError) as refused:
        OpenProtocolCodec(native=False).decode(*framed)
    assert refused.value.rule == rule
    assert f"breaks rule {rule}" in str(refused.value)
    decoder = OpenProtocolCodec()._native
    assert decoder is not None
    assert decoder.decode(*framed) is None
    assert decoder.decode_packed(*framed) is None
    # The codec as the worker runs it (native first) refuses it alike.
    with pytest.raises(GrammarError) as again:
        OpenProtocolCodec().decode(*framed)
    assert again.value.rule == rule


@pytest.mark.parametrize(("what", "key", "value"), grammar.ACCEPTED)
def test_harmless_deviations_decode_alike_on_both(
    native: Any, what: str, key: str, value: str
) -> None:
    framed = message(key, value)
    events = OpenProtocolCodec(native=False).decode(*framed)
    assert len(events) == 1, what
    decoder = OpenProtocolCodec()._native
    assert decoder is not None
    natively = decoder.decode(*framed)
    assert natively is None or natively == events, what
    assert OpenProtocolCodec().decode(*framed) == events


def test_every_rule_has_examples_and_a_unique_name() -> None:
    names = [r.name for r in grammar.RULES]
    assert len(set(names)) == len(names)
    assert all(r.examples for r in grammar.RULES)


def test_the_docs_show_the_grammar_the_decoders_enforce() -> None:
    assert grammar.markdown() in ARCHITECTURE.read_text()
