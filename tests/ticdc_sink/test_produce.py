"""`produce`'s Avro topics without a topic dispatcher: every table the history makes has one."""

from __future__ import annotations

from ticdc_sink.produce import avro_topics
from ticdc_sink.scenario import Scenario


def test_avro_topics_name_the_tables_the_history_creates_and_renames() -> None:
    scenario = Scenario(transactions=20, table_changes=True)
    before = set(avro_topics("p", scenario))
    assert before == {"p_shop_customers", "p_shop_orders"}  # the key-less table left out
    list(scenario.history())
    # Read before the history, a RENAME's and a second database's topics were never created.
    assert set(avro_topics("p", scenario)) - before == {
        "p_shop_clients",
        "p_shop_b_accounts",
        "p_shop_b_ledger",
    }
