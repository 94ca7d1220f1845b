"""Rows land in the partition TiCDC's dispatchers give them: TiCDC's consumer refuses another."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest

from core.model import ColumnFlag, Op, RowChange, column_type
from streams.codecs import codec_for
from ticdc_sink.dispatchers import Dispatcher, partition_of, value_bytes
from ticdc_sink.produce import scenario_messages
from ticdc_sink.scenario import Scenario

HANDLE = int(ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY)


def _row(
    table: str, values: dict[str, int], keys: tuple[str, ...], commit_ts: int = 1
) -> RowChange:
    columns = {name: column_type(3, HANDLE if name in keys else 0) for name in values}
    return RowChange(commit_ts, "test", table, Op.INSERT, columns, values, None)


# The expectations are those of tiflow's own tests of its dispatchers (partition/*_test.go).
@pytest.mark.parametrize(("table", "partition"), [("t1", 15), ("t2", 5), ("t3", 3)])
def test_table_dispatcher_hashes_schema_and_table(table: str, partition: int) -> None:
    for commit_ts in (1, 2, 3):
        row = _row(table, {"a": commit_ts}, ("a",), commit_ts)
        assert partition_of(row, 16, Dispatcher.TABLE) == partition


@pytest.mark.parametrize(
    ("table", "values", "keys", "partition"),
    [
        ("t1", {"a": 11, "b": 22}, ("a",), 2),
        ("t1", {"a": 22, "b": 22}, ("a",), 11),
        ("t1", {"a": 11, "b": 33}, ("a",), 2),
        ("t2", {"a": 11, "b": 22}, ("a", "b"), 5),
        ("t2", {"b": 22, "a": 11}, ("a", "b"), 5),
        ("t2", {"a": 11, "b": 0}, ("a", "b"), 14),
        ("t2", {"a": 11, "b": 33}, ("a", "b"), 2),
    ],
)
def test_index_value_dispatcher_hashes_the_handle_key(
    table: str, values: dict[str, int], keys: tuple[str, ...], partition: int
) -> None:
    assert partition_of(_row(table, values, keys), 16, Dispatcher.INDEX_VALUE) == partition


def test_index_value_reads_a_deletes_old_image() -> None:
    insert = _row("t1", {"a": 22, "b": 22}, ("a",))
    delete = RowChange(1, "test", "t1", Op.DELETE, insert.columns, None, insert.new)
    assert partition_of(delete, 16, Dispatcher.INDEX_VALUE) == 11


def test_default_dispatcher_is_the_table_dispatcher() -> None:
    # tiflow's default_test.go: one primary key, three partitions; by index value it would be 2.
    row = _row("t1", {"id": 1}, ("id",))
    assert partition_of(row, 3, Dispatcher.DEFAULT) == 0
    assert partition_of(row, 3, Dispatcher.INDEX_VALUE) == 2


def test_ts_dispatcher_takes_the_commit_ts_modulo_the_partitions() -> None:
    row = _row("t1", {"a": 1}, ("a",), commit_ts=450153676800524375)
    assert partition_of(row, 7, Dispatcher.TS) == 450153676800524375 % 7


@pytest.mark.parametrize(
    ("value", "mysql_type", "text"),
    [
        (None, 3, b"null"),
        (18446744073709551615, 8, b"18446744073709551615"),
        ("caf\u00e9", 15, "caf\u00e9".encode()),
        (b"\x00\xff", 15, b"\x00\xff"),
        (1.0, 5, b"1"),
        (1e20, 5, b"100000000000000000000"),
        (1.5e-7, 5, b"0.00000015"),
        (0.1, 4, b"0.1"),
    ],
)
def test_values_are_written_as_go_formats_them(
    value: int | float | str | bytes | None, mysql_type: int, text: bytes
) -> None:
    assert value_bytes(value, mysql_type) == text


@pytest.mark.parametrize("name", ["open", "craft", "simple"])
def test_every_row_of_ticdcs_own_streams_is_where_index_value_put_it(
    conformance: Path, name: str
) -> None:
    # These streams were dispatched by index-value over 3 partitions (the folder's README);
    # Canal-JSON is left out: it names the primary key, not the handle key TiCDC hashed.
    codec = codec_for(name)
    rows = 0
    with gzip.open(conformance / "ticdc_encoded" / f"{name}.jsonl.gz") as stream:
        lines = stream.readlines()
    for line in lines:
        message = json.loads(line)
        key = base64.b64decode(message["k"]) if message["k"] else None
        for event in codec.decode(key, base64.b64decode(message["v"])):
            if isinstance(event, RowChange):
                rows += 1
                assert partition_of(event, 3, Dispatcher.INDEX_VALUE) == message["p"], event
    assert rows == 3263


@pytest.mark.parametrize("dispatcher", list(Dispatcher))
def test_produce_puts_every_row_where_the_dispatcher_does(dispatcher: Dispatcher) -> None:
    scenario = Scenario(seed=3, transactions=60)
    messages, _ = scenario_messages(scenario, "open", 4, dispatcher=dispatcher)
    codec = codec_for("open")
    placed: dict[str, set[int]] = {}
    for partition, message in messages:
        for event in codec.decode(message.key, message.value):
            if isinstance(event, RowChange):
                assert partition == partition_of(event, 4, dispatcher)
                placed.setdefault(event.table, set()).add(partition)
    if dispatcher in (Dispatcher.DEFAULT, Dispatcher.TABLE):
        # CRC-32 of "shopcustomers" 0x972bf1d7, "shoporders" 0xa8014b20, "shopevents" 0x1ea9e184.
        assert placed == {"customers": {3}, "orders": {0}, "events": {0}}
    if dispatcher is Dispatcher.INDEX_VALUE:
        assert len(placed["customers"]) > 1 and len(placed["orders"]) > 1
