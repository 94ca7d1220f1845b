"""Craft's grammar (streams/codecs/craft_grammar.py) as both decoders enforce it: every rule's
examples, written by the structural fuzz's writer, are refused by the Python codec naming that
rule and handed back by the native decoder; every accepted deviation decodes alike on both; the
docs show the module's table; TiCDC's own stream breaks no rule."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from config.errors import GrammarError
from streams.codecs import craft_grammar as grammar
from streams.codecs.craft import CraftCodec
from tests.conftest import shared_folder
from tests.streams.codecs.structure.craft import oracle, write

ARCHITECTURE = Path(__file__).parents[3] / "docs" / "architecture.md"

CASES = [
    pytest.param(r.name, example, id=f"{r.name}-{index}")
    for r in grammar.RULES
    for index, example in enumerate(r.examples)
]


@pytest.mark.parametrize(("rule", "example"), CASES)
def test_each_rule_is_enforced_by_both_decoders(native: Any, rule: str, example: Any) -> None:
    data = write(example)
    assert oracle(data) == rule
    with pytest.raises(GrammarError) as refused:
        CraftCodec(native=False).decode(None, data)
    assert refused.value.rule == rule
    assert f"breaks rule {rule}" in str(refused.value)
    decoder = CraftCodec()._native
    assert decoder is not None
    assert decoder.decode(None, data) is None
    assert decoder.decode_packed(None, data) is None
    with pytest.raises(GrammarError) as again:
        CraftCodec().decode(None, data)
    assert again.value.rule == rule


@pytest.mark.parametrize(("what", "example"), grammar.ACCEPTED)
def test_harmless_deviations_decode_alike_on_both(native: Any, what: str, example: Any) -> None:
    data = write(example)
    assert oracle(data) is None, what
    events = CraftCodec(native=False).decode(None, data)
    assert events, what
    decoder = CraftCodec()._native
    assert decoder is not None
    natively = decoder.decode(None, data)
    assert natively is None or natively == events, what
    assert CraftCodec().decode(None, data) == events


def test_ticdc_s_own_messages_break_no_rule(native: Any) -> None:
    """Every message TiCDC's encoder wrote for the conformance workload is valid, to the oracle
    and to both decoders (the native one decodes all but the DDL, which it hands back)."""
    path = shared_folder("conformance") / "ticdc_encoded" / "craft.jsonl.gz"
    decoder = CraftCodec()._native
    assert decoder is not None
    handed_back = 0
    with gzip.open(path) as lines:
        for line in lines:
            data = base64.b64decode(json.loads(line)["v"])
            assert oracle(data) is None
            events = CraftCodec(native=False).decode(None, data)
            natively = decoder.decode(None, data)
            handed_back += natively is None
            # repr: the stream's corrupt FLOATs are NaN, which equals nothing (README there).
            assert natively is None or repr(natively) == repr(events)
    assert handed_back == 30  # the workload's DDL


def test_every_rule_has_examples_and_a_unique_name() -> None:
    names = [r.name for r in grammar.RULES]
    assert len(set(names)) == len(names)
    assert all(r.examples for r in grammar.RULES)


def test_the_docs_show_the_grammar_the_decoders_enforce() -> None:
    assert grammar.markdown() in ARCHITECTURE.read_text()
