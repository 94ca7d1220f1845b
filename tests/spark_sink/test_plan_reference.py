"""The planner against the per-row planner it replaced (the reference, kept here verbatim in
its logic): for any changes, the same TablePlans, down to the order of every dict."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import groupby
from operator import attrgetter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.model import ColumnFlag, ColumnType, Op, RowChange, Value, column_type
from spark_sink import plan as planner
from spark_sink.plan import Key, TablePlan, key_columns, plan_batch

PK = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
UNIQUE = int(ColumnFlag.UNIQUE_KEY)
NULLABLE = int(ColumnFlag.NULLABLE)
# Layouts a table's rows come in: a primary and NOT NULL unique key, a nullable unique key,
# fewer columns, no key at all.
LAYOUTS: list[dict[str, ColumnType]] = [
    {"id": column_type(3, PK), "u": column_type(3, UNIQUE), "v": column_type(15, NULLABLE)},
    {"id": column_type(3, PK), "u": column_type(3, UNIQUE | NULLABLE)},
    {"id": column_type(3, PK), "v": column_type(15, NULLABLE)},
    {"u": column_type(3, NULLABLE), "v": column_type(15, NULLABLE)},
]


def reference_plan_batch(
    changes: Iterable[RowChange], unplannable: list[planner.Unplannable]
) -> list[TablePlan]:
    """plan_batch as it was: a table's plan, key test and unique columns looked up per row;
    each unplannable change added to ``unplannable`` with its rule."""
    plans: dict[tuple[str, str], TablePlan] = {}

    def plan_for(change: RowChange) -> TablePlan:
        plan = plans.get((change.schema, change.table))
        if plan is None:
            keys = key_columns(change.columns)
            keyless = not any(kind.flags & PK for kind in change.columns.values())
            plan = plans[(change.schema, change.table)] = TablePlan(
                change.schema, change.table, keys, keyless=keyless
            )
        plan.columns.update(change.columns)
        return plan

    followed: dict[tuple[str, str], dict[Any, Any]] = {}
    for _, transaction in groupby(changes, key=attrgetter("commit_ts")):
        group = []
        for change in transaction:
            rule = _op_rule(change)
            if rule is None:
                rule = _key_rule(change, plan_for(change))
            if rule is None:
                group.append(change)
            else:
                unplannable.append((change, rule))
        identified: list[RowChange] = []
        for change in group:
            plan = plans[(change.schema, change.table)]
            if plan.keyless:
                if change.row_id is None:
                    planner._count_copies(plan, change)
                else:
                    identified.append(change)
                continue
            removed = _removed(change, plan.key_columns)
            if removed is not None:
                key, image = removed
                plan.upserts.pop(key, None)
                plan.deletes[key] = image
                plan.commit_ts[key] = change.commit_ts
        for change in group:
            if change.op is not Op.DELETE:
                plan = plans[(change.schema, change.table)]
                if plan.keyless:
                    continue
                new = change.new or {}
                key = tuple([new.get(name) for name in plan.key_columns])
                plan.upserts[key] = new
                plan.commit_ts[key] = change.commit_ts
        if identified:
            identified.sort(key=lambda change: planner._REMOVALS_FIRST[change.op])
            for change in identified:
                rows = followed.setdefault((change.schema, change.table), {})
                planner._follow(rows, change)
    for name, rows in followed.items():
        for row in rows.values():
            planner._count_net(plans[name], row)
    for plan in plans.values():
        if plan.keyless:
            planner._settle_copies(plan)
    return list(plans.values())


def _op_rule(change: RowChange) -> str | None:
    """The rule ``change`` breaks by its op, images and columns, if any."""
    if change.op is not Op.DELETE and not change.new:
        return planner.NO_NEW.format(op=change.op.value.upper())
    if change.op is Op.DELETE and not change.old:
        return planner.NO_OLD
    if change.op is Op.UPDATE and change.old == {}:
        return planner.EMPTY_OLD
    if not change.columns:
        return planner.NO_COLUMNS
    return None


def _key_rule(change: RowChange, plan: TablePlan) -> str | None:
    """The rule ``change`` breaks by a key value its keyed table's images lack, if any."""
    if plan.keyless:
        return None
    images = [change.old] if change.op is Op.DELETE else [change.new, change.old]
    for image in images:
        if image is not None and None in [image.get(name) for name in plan.key_columns]:
            return planner.NO_KEY.format(keys=", ".join(plan.key_columns))
    return None


def _removed(change: RowChange, names: tuple[str, ...]) -> tuple[Key, dict[str, Value]] | None:
    def key(image: dict[str, Value]) -> Key:
        return tuple([image.get(name) for name in names])

    if change.op is Op.DELETE:
        old = change.old or {}
        return key(old), old
    if change.op is Op.UPDATE and change.old is not None:
        new = change.new or {}
        uniques = [
            name
            for name, kind in change.columns.items()
            if kind.flags & UNIQUE and not kind.flags & NULLABLE
        ]
        if key(change.old) != key(new) or any(change.old.get(c) != new.get(c) for c in uniques):
            return key(change.old), change.old
    return None


@st.composite
def changes(draw: Any) -> list[RowChange]:
    """Any changes (valid histories or not) over a few tables, each in several layouts, a
    layout's dict shared by rows or a fresh equal one, with and without row ids; commit ts
    shared by several changes."""
    out = []
    ts = 0
    for _ in range(draw(st.integers(0, 30))):
        ts += draw(st.integers(0, 1))
        layout = draw(st.sampled_from(LAYOUTS))
        columns = dict(layout) if draw(st.integers(0, 3)) == 0 else layout
        op = draw(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]))
        new = None if op is Op.DELETE else _image(draw, columns)
        old = None if op is Op.INSERT else _image(draw, columns)
        row_id = draw(st.one_of(st.none(), st.integers(1, 3)))
        partition = draw(st.sampled_from([None, 7]))
        table = draw(st.sampled_from(["t", "n"]))
        out.append(RowChange(ts, "d", table, op, columns, new, old, partition, False, row_id))
    return out


def _image(draw: Any, columns: dict[str, ColumnType]) -> dict[str, Value] | None:
    """None, or an image of some or all of ``columns`` (a key-only or partial image)."""
    if draw(st.integers(0, 5)) == 0:
        return None
    names = list(columns)
    if draw(st.booleans()):
        names = names[: draw(st.integers(1, len(names)))]
    return {name: draw(st.one_of(st.none(), st.integers(0, 2))) for name in names}


def _exact(plans: list[TablePlan]) -> list[Any]:
    """Every field of every plan, each dict as its items in order."""
    return [
        (
            plan.schema,
            plan.table,
            plan.key_columns,
            plan.keyless,
            *(
                list(getattr(plan, name).items())
                for name in ("columns", "deletes", "upserts", "copies", "commit_ts")
            ),
        )
        for plan in plans
    ]


@settings(max_examples=1_000, deadline=None)
@given(changes())
def test_the_planner_plans_as_the_per_row_reference(batch: list[RowChange]) -> None:
    found: list[planner.Unplannable] = []
    expected: list[planner.Unplannable] = []
    assert _exact(plan_batch(iter(batch), found)) == _exact(reference_plan_batch(batch, expected))
    assert found == expected
