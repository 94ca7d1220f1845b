"""Batch planning: collapse a batch's changes to one final action per (table, key).

Pure functions over :class:`~core.model.RowChange`. After planning, a table's batch is a set of
keys to delete and a set of rows to upsert; the merge runs the deletes first, then the upserts.

- A key's final state is its last change in commit order.
- An update that changes the primary key, or a NOT NULL unique key, deletes the old key first:
  upserting in place could collide with another row's unique value (a swap inside one
  transaction), so such keys are deleted and inserted again.
- A table without a primary or NOT NULL unique key is keyed by all its columns, and its rows are
  a multiset (upstream, TiDB tells identical rows apart by a hidden row id): an insert adds one
  copy of its image, a delete removes one, an update removes one copy of the old image and adds
  one of the new. The plan holds each image's net change in copies.
- A key-less row that carries the upstream's row id (Open Protocol's ``rid``) is followed by that
  identity, as a keyed row by its key: its changes in the batch collapse to their net effect
  (one copy of the image it had before the batch out, one of its last image in), so a change
  TiCDC delivered twice counts once. Rows without a row id keep multiset semantics.
- A delete carrying only handle-key columns (TiCDC without old values) deletes by that key.
- A change that cannot be applied because of what it is (no columns, an op without the image it
  needs, a keyed table's image without a key value) is left out of every plan and handed back
  with the rule it broke (:mod:`spark_sink.unplannable` dead-letters it): applied, it would stop
  the sink or delete and upsert by NULL. The checks are a few truthiness tests per change, the
  key's on the key tuple planning builds anyway.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from core.model import ColumnFlag, ColumnType, Op, RowChange, Value

Key = tuple[Value, ...]
# A change left out of the plans, and the rule it broke.
Unplannable = tuple[RowChange, str]
# The rules, as a dead letter names them.
NO_COLUMNS = "a row change with no columns"
NO_NEW = "an {op} without its new image"
NO_OLD = "a DELETE without its old image"
EMPTY_OLD = "an UPDATE whose old image is empty"
NO_KEY = "an image without a value for every key column of a keyed table ({keys})"
# A key-less row's upstream identity: partition id (row ids are per physical table) and row id.
RowIdentity = tuple[int | None, int]
# Within one commit ts a followed row's removal comes before its new image (TiCDC may split an
# update into a delete and an insert), as for keyed rows.
_REMOVALS_FIRST = {Op.DELETE: 0, Op.UPDATE: 1, Op.INSERT: 2}
# Plain ints: IntFlag's ``&`` is a Python-level call, and planning tests flags per row.
_KEY_FLAGS = int(ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY)
_UNIQUE = int(ColumnFlag.UNIQUE_KEY)
_NULLABLE = int(ColumnFlag.NULLABLE)


@dataclass
class TablePlan:
    """The final actions for one table: keys to delete first, then rows to upsert."""

    schema: str
    table: str
    key_columns: tuple[str, ...]
    columns: dict[str, ColumnType] = field(default_factory=dict)
    deletes: dict[Key, dict[str, Value]] = field(default_factory=dict)
    upserts: dict[Key, dict[str, Value]] = field(default_factory=dict)
    # Key-less tables only: per image in ``deletes`` or ``upserts``, the copies to delete or add.
    copies: dict[Key, int] = field(default_factory=dict)
    # The commit ts of each key's last change (named when the downstream refuses a row).
    commit_ts: dict[Key, int] = field(default_factory=dict)
    keyless: bool = False

    @property
    def has_key(self) -> bool:
        """Whether the table has a primary or handle key (else it is keyed by all columns)."""
        return any(
            self.columns[c].flags & _KEY_FLAGS for c in self.key_columns if c in self.columns
        )


def renamed(plan: TablePlan, names: dict[str, str]) -> TablePlan:
    """``plan`` with its columns named as ``names`` maps them (the rest as they are): the
    downstream's names of columns a protocol carries under other names (Avro)."""

    def image(row: dict[str, Value]) -> dict[str, Value]:
        return {names.get(name, name): value for name, value in row.items()}

    return replace(
        plan,
        key_columns=tuple(names.get(name, name) for name in plan.key_columns),
        columns={names.get(name, name): kind for name, kind in plan.columns.items()},
        deletes={key: image(row) for key, row in plan.deletes.items()},
        upserts={key: image(row) for key, row in plan.upserts.items()},
    )


def key_columns(columns: dict[str, ColumnType]) -> tuple[str, ...]:
    """The handle or primary key columns; every column when the table has neither."""
    keys = tuple(name for name, kind in columns.items() if kind.flags & _KEY_FLAGS)
    return keys or tuple(columns)


def _unique_columns(columns: dict[str, ColumnType]) -> tuple[str, ...]:
    """Columns of NOT NULL unique keys besides the handle (a change to them needs delete+insert)."""
    return tuple(
        name
        for name, kind in columns.items()
        if kind.flags & _UNIQUE and not kind.flags & _NULLABLE
    )


def _key(image: dict[str, Value], names: tuple[str, ...]) -> Key:
    return tuple(map(image.get, names))


def plan_batch(
    changes: Iterable[RowChange], unplannable: list[Unplannable] | None = None
) -> list[TablePlan]:
    """Collapse ``changes`` (in commit order) into one :class:`TablePlan` per table.

    TiCDC emits at most one event per row and transaction, in no particular order within the
    transaction, and may split a key-changing update into a delete and an insert in different
    partitions. So within one commit ts every removal (deletes, and the old keys of updates that
    move a key) happens before every new row image. A change that cannot be applied is left
    out, added to ``unplannable`` with its rule (dropped when None).
    """
    plans: dict[tuple[str, str], TablePlan] = {}
    tables: dict[tuple[str, str], _Table] = {}
    followed: dict[tuple[str, str], dict[RowIdentity, _Followed]] = {}
    refused: list[Unplannable] = [] if unplannable is None else unplannable
    # The current commit ts's new images of keyed rows (with their keys), and its key-less rows
    # with a row id: both wait for the transaction's end, after every removal in it.
    images: list[tuple[TablePlan, RowChange, Key]] = []
    identified: list[RowChange] = []
    current: int | None = None
    for change in changes:
        if change.commit_ts != current:
            if images:
                _upsert(images)
                images = []
            if identified:
                _follow_all(followed, identified)
                identified = []
            current = change.commit_ts
        op = change.op
        new = change.new
        old = change.old
        if op is Op.INSERT:
            if not new:
                refused.append((change, NO_NEW.format(op="INSERT")))
                continue
        elif op is Op.DELETE:
            if not old:
                refused.append((change, NO_OLD))
                continue
        elif not new:
            refused.append((change, NO_NEW.format(op="UPDATE")))
            continue
        elif old is not None and not old:
            refused.append((change, EMPTY_OLD))
            continue
        columns = change.columns
        table = tables.get((change.schema, change.table))
        if table is None or table.columns is not columns:
            if not columns:
                refused.append((change, NO_COLUMNS))
                continue
            table = _table_for(plans, tables, change)
        plan = table.plan
        if plan.keyless:
            if change.row_id is None:
                _count_copies(plan, change)
            else:
                identified.append(change)
            continue
        names = plan.key_columns
        if op is Op.DELETE:
            assert old is not None
            key = tuple(map(old.get, names))
            if None in key:
                refused.append((change, NO_KEY.format(keys=", ".join(names))))
                continue
        else:
            assert new is not None
            new_key = tuple(map(new.get, names))
            if None in new_key:
                refused.append((change, NO_KEY.format(keys=", ".join(names))))
                continue
            if old is None:
                images.append((plan, change, new_key))
                continue
            key = tuple(map(old.get, names))
            if None in key:
                refused.append((change, NO_KEY.format(keys=", ".join(names))))
                continue
            images.append((plan, change, new_key))
            # Only an update that moves its key, or a NOT NULL unique value, removes one.
            if key == new_key and not any(old.get(c) != new.get(c) for c in table.uniques):
                continue
        # An earlier batch row of this key is void: its last state is gone.
        plan.upserts.pop(key, None)
        plan.deletes[key] = old
        plan.commit_ts[key] = change.commit_ts
    if images:
        _upsert(images)
    if identified:
        _follow_all(followed, identified)
    for name, rows in followed.items():
        for row in rows.values():
            _count_net(plans[name], row)
    for plan in plans.values():
        if plan.keyless:
            _settle_copies(plan)
    return list(plans.values())


def _upsert(images: list[tuple[TablePlan, RowChange, Key]]) -> None:
    """Each change's new image as its key's last state (in commit order)."""
    for plan, change, key in images:
        plan.upserts[key] = change.new or {}
        plan.commit_ts[key] = change.commit_ts


def _follow_all(
    followed: dict[tuple[str, str], dict[RowIdentity, _Followed]], changes: list[RowChange]
) -> None:
    """Follow one transaction's identified rows: every removal before every new image."""
    changes.sort(key=lambda change: _REMOVALS_FIRST[change.op])
    for change in changes:
        _follow(followed.setdefault((change.schema, change.table), {}), change)


@dataclass
class _Table:
    """A table's plan, and what planning reads off the columns dict it last merged into it
    (rows read from staging share one per table layout, so this is worked out once for each)."""

    plan: TablePlan
    columns: dict[str, ColumnType]
    uniques: tuple[str, ...]


def _table_for(
    plans: dict[tuple[str, str], TablePlan],
    tables: dict[tuple[str, str], _Table],
    change: RowChange,
) -> _Table:
    """The plan of ``change``'s table (its key columns decided by the table's first change),
    with ``change``'s columns merged in."""
    name = (change.schema, change.table)
    known = tables.get(name)
    if known is not None and known.columns == change.columns:
        # An equal dict (rows read one by one have one each): nothing new to merge.
        known.columns = change.columns
        return known
    plan = plans.get(name)
    if plan is None:
        keys = key_columns(change.columns)
        keyless = not any(kind.flags & _KEY_FLAGS for kind in change.columns.values())
        plan = plans[name] = TablePlan(change.schema, change.table, keys, keyless=keyless)
    plan.columns.update(change.columns)
    table = tables[name] = _Table(plan, change.columns, _unique_columns(change.columns))
    return table


@dataclass
class _Followed:
    """A key-less row followed by its upstream identity through a batch: the image it had
    before the batch (None: it did not exist, or its old image is unknown) and its last one
    (None: deleted), with the commit ts of its first and last change."""

    before: dict[str, Value] | None
    after: dict[str, Value] | None
    first_ts: int
    last_ts: int


def _follow(rows: dict[RowIdentity, _Followed], change: RowChange) -> None:
    """Move a followed row to its state after ``change`` (a repeated change moves it nowhere)."""
    assert change.row_id is not None
    identity = (change.partition_id, change.row_id)
    after = None if change.op is Op.DELETE else change.new
    row = rows.get(identity)
    if row is None:
        before = None if change.op is Op.INSERT else change.old
        rows[identity] = _Followed(before, after, change.commit_ts, change.commit_ts)
    else:
        row.after = after
        row.last_ts = change.commit_ts


def _count_net(plan: TablePlan, row: _Followed) -> None:
    """Count a followed row's net effect into a key-less plan: one copy of its image before the
    batch out, one of its last image in (the two cancel when they are equal)."""
    if row.before is not None:
        key = _key(row.before, plan.key_columns)
        plan.copies[key] = plan.copies.get(key, 0) - 1
        plan.deletes.setdefault(key, row.before)
        plan.commit_ts[key] = row.first_ts
    if row.after is not None:
        key = _key(row.after, plan.key_columns)
        plan.copies[key] = plan.copies.get(key, 0) + 1
        plan.deletes.setdefault(key, row.after)
        plan.commit_ts[key] = row.last_ts


def _count_copies(plan: TablePlan, change: RowChange) -> None:
    """Count ``change`` into a key-less plan: -1 copy of the image it removes, +1 of the image
    it adds (images collect in ``deletes`` until :func:`_settle_copies`)."""
    if change.op is not Op.INSERT and change.old is not None:
        key = _key(change.old, plan.key_columns)
        plan.copies[key] = plan.copies.get(key, 0) - 1
        plan.deletes.setdefault(key, change.old)
        plan.commit_ts[key] = change.commit_ts
    if change.op is not Op.DELETE and change.new is not None:
        key = _key(change.new, plan.key_columns)
        plan.copies[key] = plan.copies.get(key, 0) + 1
        plan.deletes.setdefault(key, change.new)
        plan.commit_ts[key] = change.commit_ts


def _settle_copies(plan: TablePlan) -> None:
    """Split a key-less plan's images by the sign of their net change in copies."""
    images, net = plan.deletes, plan.copies
    plan.deletes = {key: images[key] for key, count in net.items() if count < 0}
    plan.upserts = {key: images[key] for key, count in net.items() if count > 0}
    plan.copies = {key: abs(count) for key, count in net.items() if count}
