"""Canal-JSON's grammar (streams/codecs/canal_grammar.py) as the decoder enforces it: every rule's
examples are refused naming that rule, every accepted deviation decodes as the message without
it, TiCDC's own messages break no rule, and the docs show the module's table."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest

from config.errors import GrammarError
from streams.codecs import canal_grammar as grammar
from streams.codecs.canal_json import CanalJSONCodec

ROOT = Path(__file__).parents[3]
ARCHITECTURE = ROOT / "docs" / "architecture.md"

CASES = [(r.name, value) for r in grammar.RULES for _, value in r.examples]


@pytest.mark.parametrize(("rule", "value"), CASES)
def test_each_rule_is_enforced(rule: str, value: str) -> None:
    json.loads(value)  # well-formed JSON: only the grammar can refuse it
    with pytest.raises(GrammarError) as refused:
        CanalJSONCodec().decode(None, value.encode())
    assert refused.value.rule == rule
    assert f"breaks rule {rule}" in str(refused.value)


@pytest.mark.parametrize(("what", "key", "value"), grammar.ACCEPTED)
def test_harmless_deviations_are_accepted(what: str, key: str, value: str) -> None:
    (event,) = CanalJSONCodec().decode(None, value.encode())
    assert event is not None, what


@pytest.mark.parametrize("value", grammar.VALID)
def test_the_messages_the_examples_are_built_from_decode(value: str) -> None:
    assert len(CanalJSONCodec().decode(None, value.encode())) == 1


def test_every_rule_has_examples_and_a_unique_name() -> None:
    names = [r.name for r in grammar.RULES]
    assert len(set(names)) == len(names)
    assert all(r.examples for r in grammar.RULES)


def test_ticdc_encoded_messages_break_no_rule(conformance: Path) -> None:
    with gzip.open(conformance / "ticdc_encoded" / "canal-json.jsonl.gz") as lines:
        for line in lines:
            CanalJSONCodec().decode(None, base64.b64decode(json.loads(line)["v"]))


def test_the_docs_show_the_grammar_the_decoder_enforces() -> None:
    assert grammar.markdown() in ARCHITECTURE.read_text()
