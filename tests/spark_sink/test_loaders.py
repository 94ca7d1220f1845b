"""The policy that picks how a table's rows are loaded, and when they may replace in place
(pure: no server needed)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spark_sink.downstream import Column, TableFacts
from spark_sink.loaders import LoadPath, load_path, replaceable
from spark_sink.plan import TablePlan
from streams.model import ColumnFlag, column_type

PK = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
NULLABLE = int(ColumnFlag.NULLABLE)


def test_big_tables_go_to_spark_small_ones_to_load_data_or_insert() -> None:
    assert load_path(50_000, 50_000, load_data_local=True) is LoadPath.SPARK
    assert load_path(49_999, 50_000, load_data_local=True) is LoadPath.LOAD_DATA
    assert load_path(49_999, 50_000, load_data_local=True, in_place=True) is LoadPath.IN_PLACE
    assert load_path(49_999, 50_000, load_data_local=False) is LoadPath.INSERT
    assert load_path(49_999, 50_000, load_data_local=False, in_place=True) is LoadPath.INSERT
    # TICDC_SINK_SPARK_MIN_ROWS=0: always Spark.
    assert load_path(1, 0, load_data_local=True, in_place=True) is LoadPath.SPARK


@given(st.integers(0, 10**7), st.integers(0, 10**7), st.booleans(), st.booleans())
def test_the_policy_is_todays_rules(
    rows: int, spark_min_rows: int, allowed: bool, in_place: bool
) -> None:
    path = load_path(rows, spark_min_rows, allowed, in_place)
    assert (path is LoadPath.SPARK) == (rows >= spark_min_rows)
    if path is not LoadPath.SPARK:
        expected = LoadPath.IN_PLACE if in_place else LoadPath.LOAD_DATA
        assert path is (expected if allowed else LoadPath.INSERT)


def _plan(keyed: bool = True, columns: tuple[str, ...] = ("id", "v")) -> TablePlan:
    kinds = {name: column_type(3, PK if name == "id" and keyed else NULLABLE) for name in columns}
    keys = ("id",) if keyed else columns
    return TablePlan("db", "t", keys, kinds, keyless=not keyed)


TARGET = [Column("id", "int(11)", "int", False), Column("v", "int(11)", "int", False)]
PLAIN = TableFacts(frozenset({frozenset({"id"})}), referenced=False, triggers=False)


def test_a_plain_keyed_table_replaces_in_place() -> None:
    assert replaceable(_plan(), TARGET, PLAIN)
    # Another unique key besides the batch's is no obstacle (a replace frees its values).
    other = TableFacts(frozenset({frozenset({"id"}), frozenset({"v"})}), False, False)
    assert replaceable(_plan(), TARGET, other)


def test_what_makes_a_replace_differ_from_an_upsert_keeps_the_staging_table() -> None:
    assert not replaceable(_plan(keyed=False), TARGET, PLAIN)
    assert not replaceable(_plan(), TARGET, TableFacts(PLAIN.unique_keys, True, False))
    assert not replaceable(_plan(), TARGET, TableFacts(PLAIN.unique_keys, False, True))
    # The downstream's key is not the batch's: rows would not meet the ones they replace.
    other_key = TableFacts(frozenset({frozenset({"id", "v"})}), False, False)
    assert not replaceable(_plan(), TARGET, other_key)
    assert not replaceable(_plan(), TARGET, TableFacts(frozenset(), False, False))
    # A stored column the batch does not set would lose its value.
    assert not replaceable(_plan(columns=("id",)), TARGET, PLAIN)
