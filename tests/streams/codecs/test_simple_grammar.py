"""The Simple protocol's grammar (streams/codecs/simple_grammar.py) as the decoders enforce it:
every rule's examples are refused by the Python codec naming that rule and handed back by the
native decoder, once it holds the table's layout (a valid row decoded first, so that it is the
grammar that makes it hand them back); every accepted deviation decodes alike on both; the docs
show the module's table; TiCDC's own JSON and Avro streams break no rule."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from config.errors import GrammarError
from streams.codecs import simple_grammar as grammar
from streams.codecs.simple import SimpleJSONCodec
from streams.codecs.simple_avro import SimpleAvroCodec
from tests.conftest import shared_folder

ARCHITECTURE = Path(__file__).parents[3] / "docs" / "architecture.md"
VALID = grammar.dml("INSERT", '"data":{"id":"1","c":"x"}').encode()

CASES = [
    pytest.param(r.name, example, id=f"{r.name}-{index}")
    for r in grammar.RULES
    for index, example in enumerate(r.examples)
]


def announced(native: bool = True) -> SimpleJSONCodec:
    """A codec that knows the examples' table and, natively, its layout."""
    codec = SimpleJSONCodec(native=native)
    codec.decode(None, grammar.BOOTSTRAP.encode())
    codec.decode(None, VALID)
    return codec


@pytest.mark.parametrize(("rule", "example"), CASES)
def test_each_rule_is_enforced_by_both_decoders(native: Any, rule: str, example: str) -> None:
    with pytest.raises(GrammarError) as refused:
        announced(native=False).decode(None, example.encode())
    assert refused.value.rule == rule
    assert f"breaks rule {rule}" in str(refused.value)
    codec = announced()
    assert codec._native is not None
    assert codec._native.decode(None, VALID) is not None, "the native decoder holds the layout"
    assert codec._native.decode(None, example.encode()) is None
    with pytest.raises(GrammarError) as again:
        codec.decode(None, example.encode())
    assert again.value.rule == rule


@pytest.mark.parametrize(("what", "example"), grammar.ACCEPTED)
def test_harmless_deviations_decode_alike_on_both(native: Any, what: str, example: str) -> None:
    events = announced(native=False).decode(None, example.encode())
    assert len(events) == 1, what
    codec = announced()
    assert codec._native is not None
    natively = codec._native.decode(None, example.encode())
    assert natively is None or natively == events, what
    assert codec.decode(None, example.encode()) == events


@pytest.mark.parametrize("stream", ["simple", "simple-avro"])
def test_ticdc_s_own_messages_break_no_rule(stream: str) -> None:
    path = shared_folder("conformance") / "ticdc_encoded" / f"{stream}.jsonl.gz"
    codec = SimpleJSONCodec(native=False) if stream == "simple" else SimpleAvroCodec()
    with gzip.open(path) as lines:
        decoded = [codec.decode(None, base64.b64decode(json.loads(line)["v"])) for line in lines]
    assert len(decoded) == 3464


def test_every_rule_has_examples_and_a_unique_name() -> None:
    names = [r.name for r in grammar.RULES]
    assert len(set(names)) == len(names)
    assert all(r.examples for r in grammar.RULES)


def test_the_docs_show_the_grammar_the_decoders_enforce() -> None:
    assert grammar.markdown() in ARCHITECTURE.read_text()


def _avro_dml(**fields: Any) -> dict[str, Any]:
    row = {"id": ("long", 1), "c": ("string", "x")}
    message = {"version": 1, "database": "db", "table": "t", "tableID": 7, "type": "INSERT"}
    message |= {"commitTs": 5, "buildTs": 0, "schemaVersion": 1, "claimCheckLocation": None}
    message |= {"handleKeyOnly": None, "checksum": None, "data": row, "old": None}
    return message | fields


def _avro_bootstrap(**table: Any) -> dict[str, Any]:
    schema = json.loads(grammar.TABLE)
    schema = {"database": schema.pop("schema"), **schema} | table
    for column in schema["columns"]:
        column["dataType"] |= {"decimal": None, "elements": None, "unsigned": None}
        column["dataType"] |= {"zerofill": None}
        column["default"] = None
    return {"version": 1, "type": "BOOTSTRAP", "buildTs": 0, "tableSchema": schema}


_ROW = {"id": ("long", 1), "c": ("string", "x")}
AVRO_CASES = [
    (grammar.VERSION_RULE, _avro_dml(version=2)),
    (grammar.DML_FIELDS, _avro_dml(database="")),
    (grammar.ROW_IMAGES, _avro_dml(old=_ROW)),
    (grammar.ROW_IMAGES, _avro_dml(type="UPDATE")),
    (grammar.ROW_IMAGES, _avro_dml(data={})),
    (grammar.IMAGE_COLUMNS, _avro_dml(data=_ROW | {"nope": ("string", "x")})),
    (grammar.COLUMN_VALUE, _avro_dml(data={"id": ("string", "x")})),
    # A union branch TiCDC never writes for the column's type (a number in a VARCHAR).
    (grammar.COLUMN_VALUE, _avro_dml(data={"id": ("long", 1), "c": ("long", 5)})),
    (grammar.COLUMN_VALUE, _avro_dml(data={"id": ("long", 1), "c": ("double", 1.5)})),
    (grammar.HANDLE_KEY_ONLY, _avro_dml(handleKeyOnly=True)),
    (grammar.TABLE_SCHEMA, _avro_bootstrap(columns=[])),
    (grammar.TABLE_SCHEMA, _avro_bootstrap(table="")),
]


@pytest.mark.parametrize(("rule", "message"), AVRO_CASES)
def test_each_rule_an_avro_message_can_break_is_enforced(rule: str, message: Any) -> None:
    """Simple Avro shares the rules (its schema already rules out what it cannot carry): the
    ones an Avro record can break are refused naming the rule."""
    codec = SimpleAvroCodec()
    codec.decode(None, codec._dump(_avro_bootstrap()))
    with pytest.raises(GrammarError) as refused:
        codec.decode(None, codec._dump(message))
    assert refused.value.rule == rule
    assert codec.decode(None, codec._dump(_avro_dml()))


@pytest.mark.parametrize("kind", ["WATERMARK", "BOOTSTRAP", "DDL"])
def test_an_avro_message_s_type_is_its_payload_s_record(kind: str) -> None:
    """TiCDC writes each message type with its own payload record: a DML record under another
    type (which would have been read as a watermark, a bootstrap or a DDL) is refused."""
    import io

    import fastavro

    from streams.codecs.simple_avro import avro_schema

    codec = SimpleAvroCodec()
    codec.decode(None, codec._dump(_avro_bootstrap()))
    payload = ("com.pingcap.simple.avro.DML", _avro_dml())
    out = io.BytesIO()
    message = {"type": kind, "payload": payload}
    fastavro.schemaless_writer(out, avro_schema(), ("com.pingcap.simple.avro.Message", message))
    with pytest.raises(GrammarError) as refused:
        codec.decode(None, out.getvalue())
    assert refused.value.rule == grammar.MESSAGE_TYPE
