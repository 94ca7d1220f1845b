"""Write sets: two batches meet exactly when they may touch a common row or unique value."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from config.settings import Route
from core.model import ColumnFlag, ColumnType
from spark_sink.plan import TablePlan
from spark_sink.routing import Router
from spark_sink.write_set import write_set

KEY = ColumnType(3, int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY))
UNIQUE = ColumnType(3, int(ColumnFlag.UNIQUE_KEY | ColumnFlag.NULLABLE))
PLAIN = ColumnType(3, int(ColumnFlag.NULLABLE))


def keyed(
    table: str, upserts: list[int], deletes: tuple[int, ...] = (), u: int | None = None
) -> TablePlan:
    plan = TablePlan("db", table, ("id",), {"id": KEY, "u": UNIQUE, "v": PLAIN})
    plan.upserts = {(k,): {"id": k, "u": u, "v": 1} for k in upserts}
    plan.deletes = {(k,): {"id": k, "u": None, "v": 1} for k in deletes}
    return plan


def keyless(table: str, added: int = 1, removed: int | None = None) -> TablePlan:
    plan = TablePlan("db", table, ("v",), {"v": PLAIN}, keyless=True)
    plan.upserts = {(added,): {"v": added}}
    if removed is not None:
        plan.deletes = {(removed,): {"v": removed}}
    return plan


ROUTER = Router()


@given(st.sets(st.integers(0, 30)), st.sets(st.integers(0, 30)), st.sets(st.integers(0, 30)))
def test_keyed_batches_meet_exactly_when_their_keys_meet(
    ours: set[int], theirs: set[int], deleted: set[int]
) -> None:
    a = write_set([keyed("t", sorted(ours), tuple(deleted))], ROUTER)
    b = write_set([keyed("t", sorted(theirs))], ROUTER)
    expected = not (ours | deleted).isdisjoint(theirs)
    assert a.meets(b) is expected
    assert b.meets(a) is expected


def test_other_tables_never_meet_and_a_keyless_table_meets_on_an_image() -> None:
    assert not write_set([keyed("t", [1])], ROUTER).meets(write_set([keyed("s", [1])], ROUTER))
    assert write_set([keyless("n", 1)], ROUTER).meets(write_set([keyless("n", 1)], ROUTER))
    # One batch adds a copy of the image the other removes one of: they meet.
    removing = write_set([keyless("n", 2, removed=1)], ROUTER)
    assert removing.meets(write_set([keyless("n", 1)], ROUTER))
    assert not write_set([keyless("n", 1)], ROUTER).meets(write_set([keyless("n", 3)], ROUTER))
    assert not write_set([keyless("n")], ROUTER).meets(write_set([keyed("t", [1])], ROUTER))


def test_a_unique_value_meets_across_keys_and_null_never_does() -> None:
    a = write_set([keyed("t", [1], u=7)], ROUTER)
    assert a.meets(write_set([keyed("t", [2], u=7)], ROUTER))
    assert not a.meets(write_set([keyed("t", [2], u=8)], ROUTER))
    nulls = write_set([keyed("t", [1], u=None)], ROUTER)
    assert not nulls.meets(write_set([keyed("t", [2], u=None)], ROUTER))


def test_tables_routed_to_one_downstream_table_meet() -> None:
    router = Router(routes=(Route("db.*", "merged.all"),))
    assert write_set([keyed("t", [1])], router).meets(write_set([keyed("s", [1])], router))
    skipped = Router(skips=("db.t",))
    assert write_set([keyed("t", [1])], skipped).keys == {}
