"""The pure parts of topics matched by a pattern: matching, what staging lacks, the gate."""

from __future__ import annotations

from core.topics import gated_resolved, matching, topic_counts, unrecorded

TS = 449_000_000_000_000_100


def test_a_pattern_matches_whole_topic_names() -> None:
    counts = {"tidb_shop_orders": 3, "tidb_shop": 1, "x_tidb_shop_a": 2, "tidb_shop_a.b": 1}
    assert matching(r"tidb_shop_.*", counts) == {"tidb_shop_orders": 3, "tidb_shop_a.b": 1}
    assert matching(r"tidb_shop", counts) == {"tidb_shop": 1}
    # The changefeed's default topic, whether the pattern matches it or not.
    assert matching(r"tidb_shop_.*", counts, "tidb_shop") == {
        "tidb_shop_orders": 3,
        "tidb_shop_a.b": 1,
        "tidb_shop": 1,
    }
    assert matching(r"tidb_shop_.*", counts, "absent") == matching(r"tidb_shop_.*", counts)


def test_a_listed_topic_staging_lacks_or_counts_otherwise_is_unrecorded() -> None:
    recorded = {"a": 2, "b": 1}
    assert unrecorded(recorded, {"a": 2, "b": 1}) == []
    assert unrecorded(recorded, {"a": 2}) == []  # deleted from Kafka: nothing new to wait for
    assert unrecorded(recorded, {"a": 2, "b": 1, "c": 1}) == ["c"]
    assert unrecorded(recorded, {"a": 3, "b": 1}) == ["a"]  # partitions added


def test_the_gate_holds_while_kafka_has_a_topic_the_watermarks_were_not_read_over() -> None:
    recorded = {"a": 2}
    assert gated_resolved(TS, recorded, {"a": 2}) == TS
    assert gated_resolved(TS, recorded, {"a": 2, "b": 1}) is None
    assert gated_resolved(None, recorded, {"a": 2}) is None
    assert gated_resolved(TS, {"a": 2, "b": 1}, {"a": 2, "b": 1}) == TS


def test_internal_and_failing_topics_are_left_out_of_a_listing() -> None:
    described = [
        {"topic": "a", "error_code": 0, "is_internal": False, "partitions": [{}, {}]},
        {"topic": "__consumer_offsets", "error_code": 0, "is_internal": True, "partitions": [{}]},
        {"topic": "b", "error_code": 5, "is_internal": False, "partitions": []},
    ]
    assert topic_counts(described) == {"a": 2}
