"""The policy that picks how a table's rows are loaded, and when they may replace in place
(pure: no server needed)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from core.model import ColumnFlag, column_type
from spark_sink.db.tables import Column, TableFacts
from spark_sink.load.loaders import LoadPath, in_place, load_path, scripts
from spark_sink.plan import TablePlan

PK = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
NULLABLE = int(ColumnFlag.NULLABLE)


def test_big_tables_go_to_spark_small_ones_to_load_data_or_insert() -> None:
    assert load_path(50_000, 50_000, load_data_local=True) is LoadPath.SPARK
    assert load_path(49_999, 50_000, load_data_local=True) is LoadPath.LOAD_DATA
    assert load_path(49_999, 50_000, load_data_local=False) is LoadPath.INSERT
    # TICDC_SINK_SPARK_MIN_ROWS=0: every staging table through Spark.
    assert load_path(1, 0, load_data_local=True) is LoadPath.SPARK


def test_a_table_that_may_load_in_place_does_whatever_its_size() -> None:
    assert load_path(1, 50_000, load_data_local=True, in_place=True) is LoadPath.IN_PLACE
    assert load_path(10**6, 0, load_data_local=True, in_place=True) is LoadPath.IN_PLACE
    # In place is a LOAD DATA LOCAL: without it, the staging paths.
    assert load_path(1, 50_000, load_data_local=False, in_place=True) is LoadPath.INSERT
    assert load_path(10**6, 0, load_data_local=False, in_place=True) is LoadPath.SPARK


@given(st.integers(0, 10**7), st.integers(0, 10**7), st.booleans(), st.booleans())
def test_the_policy_is_todays_rules(
    rows: int, spark_min_rows: int, allowed: bool, in_place: bool
) -> None:
    path = load_path(rows, spark_min_rows, allowed, in_place)
    assert (path is LoadPath.IN_PLACE) == (allowed and in_place)
    if path is not LoadPath.IN_PLACE:
        assert (path is LoadPath.SPARK) == (rows >= spark_min_rows)
    if path not in (LoadPath.IN_PLACE, LoadPath.SPARK):
        assert path is (LoadPath.LOAD_DATA if allowed else LoadPath.INSERT)


def _plan(keyed: bool = True, columns: tuple[str, ...] = ("id", "v")) -> TablePlan:
    kinds = {name: column_type(3, PK if name == "id" and keyed else NULLABLE) for name in columns}
    keys = ("id",) if keyed else columns
    return TablePlan("db", "t", keys, kinds, keyless=not keyed)


TARGET = [Column("id", "int(11)", "int", False), Column("v", "int(11)", "int", False)]
PLAIN = TableFacts(frozenset({frozenset({"id"})}), referenced=False, triggers=False)


NO_KEY = TableFacts(frozenset(), referenced=False, triggers=False)


def test_a_plain_keyed_table_replaces_in_place() -> None:
    assert in_place(_plan(), True, TARGET, PLAIN)
    # Another unique key besides the batch's is no obstacle (a replace frees its values).
    other = TableFacts(frozenset({frozenset({"id"}), frozenset({"v"})}), False, False)
    assert in_place(_plan(), True, TARGET, other)


def test_a_keyless_table_without_unique_keys_appends_in_place() -> None:
    assert in_place(_plan(keyed=False), False, TARGET, NO_KEY)
    # Foreign keys and triggers see an append as the insert an upsert of it is.
    assert in_place(_plan(keyed=False), False, TARGET, TableFacts(frozenset(), True, True))


def test_what_makes_a_load_differ_from_an_upsert_keeps_the_staging_table() -> None:
    assert not in_place(_plan(), True, TARGET, TableFacts(PLAIN.unique_keys, True, False))
    assert not in_place(_plan(), True, TARGET, TableFacts(PLAIN.unique_keys, False, True))
    # The downstream's key is not the batch's: rows would not meet the ones they replace.
    other_key = TableFacts(frozenset({frozenset({"id", "v"})}), False, False)
    assert not in_place(_plan(), True, TARGET, other_key)
    assert not in_place(_plan(), True, TARGET, NO_KEY)
    # A stored column the batch does not set would lose its value, or not get its default.
    assert not in_place(_plan(columns=("id",)), True, TARGET, PLAIN)
    assert not in_place(_plan(keyed=False, columns=("id",)), False, TARGET, NO_KEY)
    # A key-less table with a unique key downstream: an upsert may update, an append would not.
    assert not in_place(_plan(keyed=False), False, TARGET, PLAIN)
    # Keyed upstream, its key missing downstream: neither replace nor append.
    assert not in_place(_plan(), False, TARGET, NO_KEY)


@given(st.lists(st.text(max_size=30)), st.integers(1, 60))
def test_statements_go_in_order_in_scripts_within_the_byte_limit(
    statements: list[str], limit: int
) -> None:
    runs = scripts(statements, limit)
    assert [s for run in runs for s in run] == statements
    for run in runs:
        # Joined by ";", a script passes the limit only when it is one longer statement.
        assert len(";".join(run)) <= limit or len(run) == 1
    # A run ends only where the next statement would not have fitted.
    for run, after in itertools.pairwise(runs):
        assert len(";".join([*run, after[0]])) > limit
