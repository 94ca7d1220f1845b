"""The policy that picks how a staging table is loaded (pure: no server needed)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spark_sink.loaders import LoadPath, load_path


def test_big_tables_go_to_spark_small_ones_to_load_data_or_insert() -> None:
    assert load_path(50_000, 50_000, load_data_local=True) is LoadPath.SPARK
    assert load_path(49_999, 50_000, load_data_local=True) is LoadPath.LOAD_DATA
    assert load_path(49_999, 50_000, load_data_local=False) is LoadPath.INSERT
    # TICDC_SINK_SPARK_MIN_ROWS=0: always Spark.
    assert load_path(1, 0, load_data_local=True) is LoadPath.SPARK


@given(st.integers(0, 10**7), st.integers(0, 10**7), st.booleans())
def test_the_policy_is_todays_rules(rows: int, spark_min_rows: int, allowed: bool) -> None:
    path = load_path(rows, spark_min_rows, allowed)
    assert (path is LoadPath.SPARK) == (rows >= spark_min_rows)
    if path is not LoadPath.SPARK:
        assert path is (LoadPath.LOAD_DATA if allowed else LoadPath.INSERT)
