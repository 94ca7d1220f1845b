"""TiCDC's Avro grammar (streams/codecs/avro_grammar.py) as the decoder enforces it: every rule's
examples, their schemas in a registry, are refused naming that rule by both readers (binary.py's
and fastavro's), every accepted deviation decodes, and the docs show the module's table."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.errors import GrammarError
from streams.codecs import avro_grammar as grammar
from streams.codecs.avro import AvroCodec, MemoryRegistry

ARCHITECTURE = Path(__file__).parents[3] / "docs" / "architecture.md"

CASES = [(r.name, example) for r in grammar.RULES for example in r.examples]
READERS = pytest.mark.parametrize("reference", [False, True], ids=["binary", "fastavro"])


def codec(schema: str | None, reference: bool) -> AvroCodec:
    """A codec whose registry holds the examples' schemas under the ids they name."""
    registry = MemoryRegistry()
    assert registry.register("t-key", grammar.KEY_SCHEMA) == grammar.KEY_ID
    assert registry.register("t-value", grammar.VALUE_SCHEMA) == grammar.VALUE_ID
    if schema is not None:
        assert registry.register("other", schema) == grammar.OTHER_ID
    return AvroCodec(registry, reference_reader=reference)


@READERS
@pytest.mark.parametrize(("rule", "example"), CASES)
def test_each_rule_is_enforced(rule: str, example: grammar.Example, reference: bool) -> None:
    key, value, schema = example
    with pytest.raises(GrammarError) as refused:
        codec(schema, reference).decode(key, value)
    assert refused.value.rule == rule
    assert f"breaks rule {rule}" in str(refused.value)


@READERS
@pytest.mark.parametrize("example", grammar.VALID)
def test_the_messages_the_examples_are_built_from_decode(
    example: grammar.Example, reference: bool
) -> None:
    key, value, schema = example
    assert len(codec(schema, reference).decode(key, value)) == 1


@READERS
@pytest.mark.parametrize(("what", "example"), grammar.ACCEPTED)
def test_harmless_deviations_are_accepted(
    what: str, example: grammar.Example, reference: bool
) -> None:
    key, value, schema = example
    assert len(codec(schema, reference).decode(key, value)) == 1, what


def test_every_rule_has_examples_and_a_unique_name() -> None:
    names = [r.name for r in grammar.RULES]
    assert len(set(names)) == len(names)
    assert all(r.examples for r in grammar.RULES)


def test_the_docs_show_the_grammar_the_decoder_enforces() -> None:
    assert grammar.markdown() in ARCHITECTURE.read_text()
