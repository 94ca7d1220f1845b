"""The member layout: commit-ts order, and what a member gives back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streams.model import DDLEvent
from streams.staging import layout


@given(
    ts=st.integers(0, (1 << 64) - 1),
    offset=st.integers(0, (1 << 63) - 1),
    index=st.integers(0, 0xFFFF),
    body=st.binary(max_size=20),
)
def test_a_row_member_orders_by_commit_ts_and_gives_it_back(
    ts: int, offset: int, index: int, body: bytes
) -> None:
    member = layout.row_member(ts, offset, index, body)
    assert len(member) == layout.ROW_PREFIX + len(body)
    assert layout.member_ts(member) == ts
    assert member[layout.ROW_PREFIX :] == body
    assert (layout.row_member(ts + 1, 0, 0, b"") > member) is True


def test_a_ddl_member_gives_back_its_ddl() -> None:
    ddl = DDLEvent(449_000_000_000_000_001, "db", "t", "ALTER TABLE t ADD c INT", 5)
    ts, digest, body = layout.ddl_args(ddl)
    member = ts + b"%08x" % 1 + body
    assert layout.unpack_ddl_member(member) == ddl
    assert layout.ddl_id(member) == ts + digest
