"""The one error hierarchy: where each error sits, and the hold signal that is no error of input."""

from __future__ import annotations

import pytest

from config.errors import (
    ApplyError,
    DecodeError,
    LostLeadershipError,
    MissingSchemaError,
    NotYetDecodableError,
    ReplayRefusedError,
    TicdcSinkError,
)
from streams.codecs.simple import SimpleJSONCodec

DML_BEFORE_ITS_SCHEMA = (
    b'{"version":1,"database":"d","table":"t","type":"INSERT","commitTs":5,"buildTs":5,'
    b'"schemaVersion":7,"data":{"a":"1"}}'
)


def test_a_dml_before_its_schema_is_a_hold_signal_no_handler_of_bad_input_catches() -> None:
    with pytest.raises(NotYetDecodableError) as caught:
        try:
            SimpleJSONCodec().decode(None, DML_BEFORE_ITS_SCHEMA)
        except DecodeError:  # what every path that dead-letters a message catches
            pytest.fail("a message waiting for its schema was taken for undecodable")
    held = caught.value
    assert isinstance(held, MissingSchemaError) and isinstance(held, TicdcSinkError)
    assert (held.schema, held.table, held.version, held.commit_ts) == ("d", "t", 7, 5)
    assert str(held) == "simple: no table schema yet for d.t at version 7, at schemaVersion"


def test_errors_defined_for_one_layer_live_in_the_hierarchy_and_are_re_exported() -> None:
    from spark_sink.db import checkpoint
    from streams.codecs import simple
    from ticdc_sink import deadletters_command

    assert issubclass(LostLeadershipError, ApplyError)
    assert issubclass(ReplayRefusedError, TicdcSinkError)
    assert checkpoint.LostLeadershipError is LostLeadershipError
    assert simple.MissingSchemaError is MissingSchemaError
    assert deadletters_command.ReplayRefusedError is ReplayRefusedError
