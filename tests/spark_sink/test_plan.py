"""Planning against a model database: applying the plan equals replaying every change."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.model import ColumnFlag, ColumnType, Op, RowChange, Value, column_type
from spark_sink.plan import Key, TablePlan, plan_batch

PK = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
UNIQUE = int(ColumnFlag.UNIQUE_KEY)
COLUMNS = {"id": column_type(3, PK), "u": column_type(3, UNIQUE), "v": column_type(15, 64)}
NO_KEY = {"a": column_type(3, 64), "b": column_type(15, 64)}


def replay(
    state: dict[Key, dict[str, Any]], changes: list[RowChange], names: tuple[str, ...]
) -> None:
    """The reference: apply every change one by one."""
    for change in changes:
        if change.old is not None and change.op is not Op.INSERT:
            state.pop(tuple(change.old[n] for n in names), None)
        if change.new is not None:
            state[tuple(change.new[n] for n in names)] = change.new


def apply_plan(state: dict[Key, dict[str, Any]], plan: TablePlan) -> None:
    """What the merge does: deletes first, then upserts; a unique value may not be duplicated."""
    for key in plan.deletes:
        state.pop(key, None)
    for key, row in plan.upserts.items():
        if "u" in row:
            clash = [k for k, r in state.items() if r["u"] == row["u"] and k != key]
            assert not clash, f"upsert {row} collides on the unique key with {clash}"
        state[key] = row


@st.composite
def histories(draw: Any) -> tuple[dict[Key, dict[str, Any]], list[RowChange]]:
    """A valid sequence of changes over a table with a primary and a unique key."""
    state: dict[int, dict[str, Any]] = {}
    ids = st.integers(0, 6)
    changes: list[RowChange] = []
    for ts in range(draw(st.integers(0, 30))):
        free_u = [u for u in range(8) if all(r["u"] != u for r in state.values())]
        choice = draw(st.sampled_from(["insert", "update", "delete", "swap"]))
        if choice == "insert" or not state:
            key = draw(ids)
            if key in state or not free_u:
                continue
            row = {"id": key, "u": draw(st.sampled_from(free_u)), "v": draw(st.text(max_size=3))}
            state[key] = row
            changes.append(RowChange(ts, "d", "t", Op.INSERT, COLUMNS, row, None))
        elif choice == "delete":
            key = draw(st.sampled_from(sorted(state)))
            old = state.pop(key)
            image = {"id": key} if draw(st.booleans()) else old  # handle-key-only deletes
            changes.append(RowChange(ts, "d", "t", Op.DELETE, COLUMNS, None, image))
        elif choice == "swap" and len(state) >= 2:
            a, b = draw(
                st.lists(st.sampled_from(sorted(state)), min_size=2, max_size=2, unique=True)
            )
            new_a, new_b = dict(state[a], u=state[b]["u"]), dict(state[b], u=state[a]["u"])
            changes += [
                RowChange(ts, "d", "t", Op.UPDATE, COLUMNS, new_a, state[a]),
                RowChange(ts, "d", "t", Op.UPDATE, COLUMNS, new_b, state[b]),
            ]
            state[a], state[b] = new_a, new_b
        else:
            key = draw(st.sampled_from(sorted(state)))
            new_key = draw(ids)
            if new_key != key and new_key in state:
                continue
            new = dict(state.pop(key), id=new_key, v=draw(st.text(max_size=3)))
            changes.append(
                RowChange(
                    ts,
                    "d",
                    "t",
                    Op.UPDATE,
                    COLUMNS,
                    new,
                    state.get(key) or {**new, "id": key, "u": new["u"]},
                )
            )
            state[new_key] = new
    return {(k,): v for k, v in state.items()}, changes


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_plan_applied_equals_every_change_replayed(data: st.DataObject) -> None:
    final, changes = data.draw(histories())
    # The downstream already holds an earlier batch; this batch is the rest.
    cut = data.draw(st.integers(0, len(changes)))
    downstream: dict[Key, dict[str, Any]] = {}
    replay(downstream, changes[:cut], ("id",))
    expected = dict(downstream)
    replay(expected, changes[cut:], ("id",))
    assert expected == final
    (plan,) = plan_batch(changes[cut:]) or [TablePlan("d", "t", ("id",))]
    apply_plan(downstream, plan)
    assert downstream == expected


def test_a_table_without_a_key_is_keyed_by_all_columns() -> None:
    row = {"a": 1, "b": "x"}
    changes = [
        RowChange(1, "d", "n", Op.INSERT, NO_KEY, row, None),
        RowChange(2, "d", "n", Op.UPDATE, NO_KEY, {"a": 1, "b": "y"}, row),
        RowChange(2, "d", "n", Op.DELETE, NO_KEY, None, {"a": 2, "b": "z"}),
    ]
    (plan,) = plan_batch(changes)
    assert plan.key_columns == ("a", "b")
    # The inserted (1, x) never reached the downstream: nothing to delete there.
    assert list(plan.deletes) == [(2, "z")]
    assert list(plan.upserts.values()) == [{"a": 1, "b": "y"}]
    assert plan.copies == {(2, "z"): 1, (1, "y"): 1}


Multiset = dict[Key, int]


def replay_copies(state: Multiset, changes: list[RowChange]) -> None:
    """The reference for a key-less table: every change one by one on a multiset of images."""
    for change in changes:
        if change.old is not None and change.op is not Op.INSERT:
            key = (change.old["a"], change.old["b"])
            assert state.get(key, 0) > 0, f"{change} removes an image the table does not hold"
            state[key] -= 1
        if change.new is not None:
            key = (change.new["a"], change.new["b"])
            state[key] = state.get(key, 0) + 1


@st.composite
def keyless_histories(draw: Any) -> list[RowChange]:
    """Valid changes of a key-less table whose rows are often identical (few distinct images)."""
    images = st.tuples(st.integers(0, 2), st.sampled_from(["x", "y"]))
    held: list[tuple[int, str]] = []
    changes = []
    ts = 0
    for _ in range(draw(st.integers(0, 40))):
        ts += draw(st.integers(0, 1))  # several changes share a commit ts
        choice = draw(st.sampled_from(["insert", "update", "delete"]))
        if choice == "insert" or not held:
            a, b = draw(images)
            held.append((a, b))
            changes.append(RowChange(ts, "d", "n", Op.INSERT, NO_KEY, {"a": a, "b": b}, None))
            continue
        old = held.pop(draw(st.integers(0, len(held) - 1)))
        old_image = {"a": old[0], "b": old[1]}
        if choice == "delete":
            changes.append(RowChange(ts, "d", "n", Op.DELETE, NO_KEY, None, old_image))
        else:
            new = draw(images)
            held.append(new)
            new_image = {"a": new[0], "b": new[1]}
            changes.append(RowChange(ts, "d", "n", Op.UPDATE, NO_KEY, new_image, old_image))
    return changes


@settings(max_examples=400, deadline=None)
def _merge_keyless(downstream: Multiset, plans: list[TablePlan]) -> None:
    """What the merge does to a key-less table: delete that many copies of each image, then add
    copies; never more deleted than the table holds."""
    for plan in plans:
        assert plan.keyless
        for key in plan.deletes:
            assert downstream.get(key, 0) >= plan.copies[key]
            downstream[key] -= plan.copies[key]
        for key in plan.upserts:
            downstream[key] = downstream.get(key, 0) + plan.copies[key]


def _rows(table: Multiset) -> Multiset:
    """The rows a multiset holds (images counted 0 times left out)."""
    return {key: count for key, count in table.items() if count}


@given(data=st.data())
def test_a_keyless_plan_applied_equals_every_change_replayed_on_a_multiset(
    data: st.DataObject,
) -> None:
    changes = data.draw(keyless_histories())
    cut = data.draw(st.integers(0, len(changes)))
    downstream: Multiset = {}
    replay_copies(downstream, changes[:cut])
    expected = dict(downstream)
    replay_copies(expected, changes[cut:])
    _merge_keyless(downstream, plan_batch(changes[cut:]))
    assert _rows(downstream) == _rows(expected)


def test_a_primary_key_change_deletes_the_old_key() -> None:
    old = {"id": 1, "u": 5, "v": "a"}
    new = {"id": 2, "u": 5, "v": "a"}
    (plan,) = plan_batch([RowChange(1, "d", "t", Op.UPDATE, COLUMNS, new, old)])
    assert list(plan.deletes) == [(1,)]
    assert list(plan.upserts) == [(2,)]


def test_tables_are_planned_apart() -> None:
    a = RowChange(1, "d", "a", Op.INSERT, COLUMNS, {"id": 1, "u": 1, "v": ""}, None)
    b = RowChange(1, "d", "b", Op.INSERT, COLUMNS, {"id": 1, "u": 1, "v": ""}, None)
    assert [(p.table, len(p.upserts)) for p in plan_batch([a, b])] == [("a", 1), ("b", 1)]


Identity = tuple[int | None, int]


def table_of(rows: dict[Identity, Key], anonymous: list[Key]) -> Multiset:
    """What the table holds: every image, as many times as rows have it."""
    table: Multiset = {}
    for image in [*rows.values(), *anonymous]:
        table[image] = table.get(image, 0) + 1
    return table


@st.composite
def identified_histories(draw: Any) -> tuple[list[list[RowChange]], list[Multiset]]:
    """Transactions of a key-less table with identical images, rows mostly with a row id (in
    two partitions, where ids repeat): TiCDC's redelivered copies, updates split into a delete
    and an insert, and rows without an id among them; each transaction in any order. With the
    table upstream before each transaction and after the last."""
    images = st.tuples(st.integers(0, 2), st.sampled_from(["x", "y"]))
    held: dict[Identity, tuple[int, str]] = {}
    anonymous: list[tuple[int, str]] = []
    transactions = []
    tables = [table_of(held, anonymous)]
    next_id = 1

    def as_image(image: tuple[int, str] | None) -> dict[str, Any] | None:
        return None if image is None else {"a": image[0], "b": image[1]}

    def row(ts: int, op: Op, new: Any, old: Any, who: Any) -> RowChange:
        partition, row_id = who if who is not None else (None, None)
        return RowChange(
            ts, "d", "n", op, NO_KEY, as_image(new), as_image(old), partition, row_id=row_id
        )

    for ts in range(draw(st.integers(0, 12))):
        group: list[RowChange] = []
        touched: set[Any] = set()
        # A row lives at most one change per transaction: only rows from before it go.
        goners = list(anonymous)
        for _ in range(draw(st.integers(1, 4))):
            choice = draw(st.sampled_from(["insert", "update", "split", "delete", "anonymous"]))
            free = [who for who in held if who not in touched]
            if choice == "anonymous":
                if goners and draw(st.booleans()):
                    old = goners.pop(draw(st.integers(0, len(goners) - 1)))
                    anonymous.remove(old)
                    group.append(row(ts, Op.DELETE, None, old, None))
                else:
                    new = draw(images)
                    anonymous.append(new)
                    group.append(row(ts, Op.INSERT, new, None, None))
                continue
            if choice == "insert" or not free:
                who = (draw(st.sampled_from([None, 1])), next_id)
                next_id += draw(st.sampled_from([0, 1]))  # the other partition may reuse an id
                if who in held:
                    continue
                new = held[who] = draw(images)
                changes = [row(ts, Op.INSERT, new, None, who)]
            else:
                who = draw(st.sampled_from(free))
                old = held.pop(who)
                if choice == "delete":
                    changes = [row(ts, Op.DELETE, None, old, who)]
                else:
                    new = held[who] = draw(images)
                    if choice == "split":
                        changes = [
                            row(ts, Op.DELETE, None, old, who),
                            row(ts, Op.INSERT, new, None, who),
                        ]
                    else:
                        changes = [row(ts, Op.UPDATE, new, old, who)]
            touched.add(who)
            group += changes
            if draw(st.booleans()):
                group += changes  # delivered twice
        transactions.append(draw(st.permutations(group)))
        tables.append(table_of(held, anonymous))
    return transactions, tables


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_a_keyless_plan_with_row_ids_applied_equals_the_upstream_table(
    data: st.DataObject,
) -> None:
    transactions, tables = data.draw(identified_histories())
    # Batches are cut between transactions; the downstream holds what upstream held then.
    cut = data.draw(st.integers(0, len(transactions)))
    batch = [change for group in transactions[cut:] for change in group]
    downstream, expected = dict(tables[cut]), tables[-1]
    _merge_keyless(downstream, plan_batch(batch))
    assert _rows(downstream) == _rows(expected)


def test_the_changes_of_one_identified_row_collapse_to_nothing() -> None:
    # Insert, update and delete of row id 5 in one batch, the insert delivered twice: nothing
    # reaches the downstream, where multiset counting of the copy would insert one row.
    first, second = {"a": 1, "b": "x"}, {"a": 2, "b": "y"}
    insert = RowChange(1, "d", "n", Op.INSERT, NO_KEY, first, None, row_id=5)
    changes = [
        insert,
        insert,
        RowChange(2, "d", "n", Op.UPDATE, NO_KEY, second, first, row_id=5),
        RowChange(3, "d", "n", Op.DELETE, NO_KEY, None, second, row_id=5),
    ]
    (plan,) = plan_batch(changes)
    assert (plan.deletes, plan.upserts, plan.copies) == ({}, {}, {})
    (plan,) = plan_batch(changes[:2])
    assert plan.upserts == {(1, "x"): first} and plan.copies == {(1, "x"): 1}


def test_identical_rows_without_a_row_id_stay_as_many() -> None:
    image = {"a": 1, "b": "x"}
    insert = RowChange(1, "d", "n", Op.INSERT, NO_KEY, image, None)
    (plan,) = plan_batch([insert, insert])
    assert plan.copies == {(1, "x"): 2}


GOOD: dict[str, Value] = {"id": 1, "u": 1, "v": "a"}
MOVED: dict[str, Value] = {"id": 9, "u": 9, "v": "b"}
NO_ID: dict[str, Value] = {"u": 2, "v": "c"}
NULL_ID: dict[str, Value] = {"id": None, "u": 3, "v": "d"}
# Each change the planner cannot apply, and the rule it is refused by.
UNPLANNABLE: list[
    tuple[Op, dict[str, ColumnType], dict[str, Value] | None, dict[str, Value] | None, str]
] = [
    (Op.INSERT, COLUMNS, None, None, "an INSERT without its new image"),
    (Op.INSERT, COLUMNS, {}, None, "an INSERT without its new image"),
    (Op.DELETE, COLUMNS, None, None, "a DELETE without its old image"),
    (Op.DELETE, COLUMNS, None, {}, "a DELETE without its old image"),
    (Op.UPDATE, COLUMNS, None, GOOD, "an UPDATE without its new image"),
    (Op.UPDATE, COLUMNS, MOVED, {}, "an UPDATE whose old image is empty"),
    (Op.INSERT, {}, {"x": 1}, None, "a row change with no columns"),
    (Op.INSERT, COLUMNS, NO_ID, None, "an image without a value for every key column"),
    (Op.INSERT, COLUMNS, NULL_ID, None, "an image without a value for every key column"),
    (Op.DELETE, COLUMNS, None, NO_ID, "an image without a value for every key column"),
    # The old image without its key: the old row it would move must not be deleted by NULL.
    (Op.UPDATE, COLUMNS, MOVED, NO_ID, "an image without a value for every key column"),
    # The new image without its key: the old row must not be deleted for an image never written.
    (Op.UPDATE, COLUMNS, NO_ID, GOOD, "an image without a value for every key column"),
    (Op.INSERT, NO_KEY, {}, None, "an INSERT without its new image"),
    (Op.DELETE, NO_KEY, None, {}, "a DELETE without its old image"),
]


def test_an_unplannable_change_is_left_out_with_its_rule_and_the_rest_planned() -> None:
    """Each change of a class the planner cannot apply is handed back with the rule it broke;
    the batch's other changes plan as without it, and no key of it is deleted or upserted."""
    for op, columns, new, old, rule in UNPLANNABLE:
        bad = RowChange(5, "d", "t", op, columns, new, old)
        good = RowChange(5, "d", "t", Op.INSERT, COLUMNS, {"id": 7, "u": 7, "v": "x"}, None)
        unplannable: list[tuple[RowChange, str]] = []
        plans = plan_batch([bad, good], unplannable)
        assert [change for change, _ in unplannable] == [bad], (op, new, old)
        assert unplannable[0][1].startswith(rule)
        (plan,) = plans
        assert plan.upserts == {(7,): good.new} and not plan.deletes, (op, new, old)


def test_an_update_without_old_values_and_a_key_only_delete_stay_plannable() -> None:
    """TiCDC without old values: an UPDATE with no old image, a DELETE of the key alone."""
    unplannable: list[tuple[RowChange, str]] = []
    (plan,) = plan_batch(
        [
            RowChange(5, "d", "t", Op.UPDATE, COLUMNS, GOOD, None),
            RowChange(6, "d", "t", Op.DELETE, COLUMNS, None, {"id": 2}),
        ],
        unplannable,
    )
    assert not unplannable
    assert plan.upserts == {(1,): GOOD} and list(plan.deletes) == [(2,)]
