"""The member layout: commit-ts order, runs of rows, and what a member gives back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from core.model import DDLEvent
from core.staging import layout

# A message's rows: few commit ts (runs form), sizes around the byte cap now and then.
message_rows = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.one_of(st.binary(max_size=20), st.binary(min_size=3_000, max_size=5_000)),
    ),
    max_size=150,
)


@given(
    ts=st.integers(0, (1 << 64) - 2),  # the test orders it against ts + 1
    offset=st.integers(0, (1 << 63) - 1),
    first=st.integers(0, 0xFFFF),
    rows=st.lists(st.binary(max_size=20), min_size=1, max_size=layout.MEMBER_ROWS),
)
def test_a_row_member_orders_by_commit_ts_and_gives_its_rows_back(
    ts: int, offset: int, first: int, rows: list[bytes]
) -> None:
    member = layout.row_member(ts, offset, first, rows)
    assert len(member) == layout.MEMBER_HEAD + sum(layout.LENGTH_BYTES + len(r) for r in rows)
    assert layout.member_ts(member) == ts
    assert layout.member_rows(member) == rows
    assert layout.member_row_count(member) == len(rows)
    assert (layout.row_member(ts + 1, 0, 0, [b""]) > member) is True


@given(rows=message_rows)
def test_a_message_splits_into_runs_of_one_commit_ts_within_the_caps(
    rows: list[tuple[int, bytes]],
) -> None:
    runs = layout.member_runs(rows)
    # The runs cover the rows in order.
    assert [i for first, stop in runs for i in range(first, stop)] == list(range(len(rows)))
    for first, stop in runs:
        run = rows[first:stop]
        assert len({ts for ts, _ in run}) == 1
        assert len(run) <= layout.MEMBER_ROWS
        size = sum(layout.LENGTH_BYTES + len(r) for _, r in run)
        assert len(run) == 1 or size <= layout.MEMBER_BYTES
        # A run ends only where the next row would break the commit ts or a cap.
        if stop < len(rows):
            ts, body = rows[stop]
            grown = size + layout.LENGTH_BYTES + len(body)
            assert ts != run[0][0] or len(run) == layout.MEMBER_ROWS or grown > layout.MEMBER_BYTES


@given(offset=st.integers(0, (1 << 63) - 1), rows=message_rows)
def test_a_message_stages_as_the_same_members_every_time(
    offset: int, rows: list[tuple[int, bytes]]
) -> None:
    members = layout.row_members(offset, rows)
    assert layout.row_members(offset, rows) == members
    assert [r for m in members for r in layout.member_rows(m)] == [r for _, r in rows]
    assert sum(map(layout.member_row_count, members)) == len(rows)
    # Ordered as the rows' (commit ts, event index): sorted, a ZRANGEBYLEX gives them back so.
    by_ts = sorted(members, key=lambda m: m[: layout.TS_DIGITS])
    assert sorted(members) == by_ts


def test_a_ddl_member_gives_back_its_ddl() -> None:
    ddl = DDLEvent(449_000_000_000_000_001, "db", "t", "ALTER TABLE t ADD c INT", 5)
    ts, digest, body = layout.ddl_args(ddl)
    member = ts + b"%08x" % 1 + body
    assert layout.unpack_ddl_member(member) == ddl
    assert layout.ddl_id(member) == ts + digest
