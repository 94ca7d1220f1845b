"""TiCDC's Debezium grammar (streams/codecs/debezium_grammar.py) as the decoder enforces it: every
rule's examples are refused naming that rule, every accepted deviation decodes, TiCDC's own
messages break no rule, and the docs show the module's table."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest

from config.errors import GrammarError
from streams.codecs import debezium_grammar as grammar
from streams.codecs.debezium import DebeziumCodec

ARCHITECTURE = Path(__file__).parents[3] / "docs" / "architecture.md"

CASES = [(r.name, key, value) for r in grammar.RULES for key, value in r.examples]


def _bytes(key: str) -> bytes | None:
    return key.encode() if key else None


@pytest.mark.parametrize(("rule", "key", "value"), CASES)
def test_each_rule_is_enforced(rule: str, key: str, value: str) -> None:
    json.loads(value)  # well-formed JSON: only the grammar can refuse it
    with pytest.raises(GrammarError) as refused:
        DebeziumCodec().decode(_bytes(key), value.encode())
    assert refused.value.rule == rule
    assert f"breaks rule {rule}" in str(refused.value)


@pytest.mark.parametrize(("key", "value"), grammar.VALID)
def test_the_messages_the_examples_are_built_from_decode(key: str, value: str) -> None:
    assert len(DebeziumCodec().decode(_bytes(key), value.encode())) == 1


@pytest.mark.parametrize(("what", "key", "value"), grammar.ACCEPTED)
def test_harmless_deviations_are_accepted(what: str, key: str, value: str) -> None:
    assert len(DebeziumCodec().decode(_bytes(key), value.encode())) == 1, what


def test_every_rule_has_examples_and_a_unique_name() -> None:
    names = [r.name for r in grammar.RULES]
    assert len(set(names)) == len(names)
    assert all(r.examples for r in grammar.RULES)


def test_ticdc_encoded_messages_break_no_rule(conformance: Path) -> None:
    codec = DebeziumCodec()
    with gzip.open(conformance / "ticdc_encoded" / "debezium.jsonl.gz") as lines:
        for line in lines:
            record = json.loads(line)
            key = base64.b64decode(record["k"]) if record["k"] else None
            codec.decode(key, base64.b64decode(record["v"]))


def test_the_docs_show_the_grammar_the_decoder_enforces() -> None:
    assert grammar.markdown() in ARCHITECTURE.read_text()
