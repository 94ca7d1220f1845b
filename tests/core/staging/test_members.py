"""Release's merge and member reading against the reference they replaced: one ``heapq.merge``
keyed by the commit-ts prefix of one-row members, then per row a copy check and the row
unpacked in Python. Members here hold runs of rows, some of one row each."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.model import ColumnFlag, Op, RowChange
from core.packed import pack_row, unpack_row
from core.staging.layout import TS_DIGITS, member_rows, row_member, row_members
from core.staging.members import Copies, MemberReader, member_reader, merge_by_ts
from tests.core.staging.changes import BIG_TS, COLUMNS, NO_KEY

_KEY_FLAGS = int(ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY)
# A packed row the native reader refuses (a bytes image key) and Python reads.
REFUSED = msgpack.packb([0, "db", "t", [["id", 8, 10]], {b"id": 1}, None, None, False])


def reference_rows(partitions: list[list[bytes]]) -> list[RowChange]:
    """The release before windows and runs: each member's rows as one-row members, merged by
    their commit-ts prefix, copies of a keyed table's row version at one commit ts collapsed,
    key-less rows kept apart."""
    one_row = [
        [(m[:TS_DIGITS], row) for m in members for row in member_rows(m)] for members in partitions
    ]
    merged = heapq.merge(*one_row, key=lambda pair: pair[0])
    seen: set[bytes] = set()
    current = b""
    rows = []
    for ts, body in merged:
        if ts != current:
            current = ts
            seen.clear()
        if body in seen:
            continue
        row = unpack_row(int(ts, 16), body)
        if any(kind.flags & _KEY_FLAGS for kind in row.columns.values()):
            seen.add(body)
        rows.append(row)
    return rows


def _body(draw: Any) -> bytes:
    if draw(st.integers(0, 20)) == 0:
        return REFUSED
    keyed = draw(st.booleans())
    op = draw(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]))
    if keyed:
        image: dict[str, Any] = {"id": draw(st.integers(0, 2)), "v": draw(st.sampled_from("xy"))}
        columns, table = COLUMNS, "t"
    else:
        image = {"a": draw(st.integers(0, 1)), "b": draw(st.sampled_from("xy"))}
        columns, table = NO_KEY, "n"
    new = None if op is Op.DELETE else image
    old = None if op is Op.INSERT else image
    return pack_row(RowChange(0, "db", table, op, columns, new, old))


@st.composite
def staged_partitions(draw: Any) -> list[list[bytes]]:
    """Partitions of row members in lexicographic order, as ZRANGEBYLEX reads them: messages of
    a few rows at one or two commit ts (runs of rows, some staged a row a member), few commit ts,
    so that partitions share them, and few distinct bodies, so that copies abound (within a
    member too)."""
    partitions = []
    for _ in range(draw(st.integers(0, 4))):
        members: set[bytes] = set()
        for offset in range(draw(st.integers(0, 10))):
            ts = BIG_TS + draw(st.integers(0, 5))
            rows = [
                (ts + draw(st.integers(0, 1)), _body(draw)) for _ in range(draw(st.integers(1, 6)))
            ]
            rows.sort(key=lambda pair: pair[0])
            if draw(st.integers(0, 4)) == 0:
                members.update(row_member(t, offset, i, [body]) for i, (t, body) in enumerate(rows))
            else:
                members.update(row_members(offset, rows))
        partitions.append(sorted(members))
    return partitions


def paged(members: list[bytes], size: int) -> Iterator[list[bytes]]:
    return (members[at : at + size] for at in range(0, len(members), size))


@settings(max_examples=300, deadline=None)
@given(staged_partitions(), st.lists(st.integers(1, 4), min_size=4, max_size=4))
def test_the_windows_merge_as_heapq_merge_keyed_by_the_commit_ts(
    partitions: list[list[bytes]], sizes: list[int]
) -> None:
    pages = [paged(members, size) for members, size in zip(partitions, sizes, strict=False)]
    windows = list(merge_by_ts(pages))
    assert all(windows)
    merged = heapq.merge(*partitions, key=lambda member: member[:TS_DIGITS])
    assert [member for window in windows for member in window] == list(merged)


def test_one_commit_ts_over_many_pages_comes_a_page_at_a_time() -> None:
    """One transaction staged over many pages of every partition is never buffered whole: the
    sink's memory is a page per partition, not the transaction."""
    body = pack_row(RowChange(0, "db", "t", Op.INSERT, COLUMNS, {"id": 1, "v": "x"}, None))
    partitions = [
        sorted(row_member(BIG_TS, offset, p, [body]) for offset in range(40)) for p in range(3)
    ]
    windows = list(merge_by_ts([paged(members, 4) for members in partitions]))
    assert max(len(window) for window in windows) <= 4
    merged = heapq.merge(*partitions, key=lambda member: member[:TS_DIGITS])
    assert [member for window in windows for member in window] == list(merged)


def released(read: Any, windows: list[list[bytes]], chunk: int) -> list[RowChange]:
    copies = Copies()
    rows = []
    for window in windows:
        for start in range(0, len(window), chunk):
            rows += read(window, start, min(start + chunk, len(window)), copies)
    return rows


@settings(max_examples=300, deadline=None)
@given(staged_partitions(), st.integers(1, 4), st.integers(1, 7))
def test_the_python_reader_releases_what_the_reference_did(
    partitions: list[list[bytes]], page: int, chunk: int
) -> None:
    windows = list(merge_by_ts([paged(members, page) for members in partitions]))
    assert released(MemberReader().rows, windows, chunk) == reference_rows(partitions)


@pytest.fixture(scope="module")
def native_members(native: Any) -> Any:
    """The native reader: ``native`` is a wheel core/native.py takes (else the test fails under
    CI, skips elsewhere), so the reader is not the Python one alone."""
    return member_reader()


@settings(max_examples=300, deadline=None)
@given(staged_partitions(), st.integers(1, 4), st.integers(1, 7))
def test_the_native_reader_releases_what_the_reference_did(
    native_members: Any, partitions: list[list[bytes]], page: int, chunk: int
) -> None:
    windows = list(merge_by_ts([paged(members, page) for members in partitions]))
    assert released(native_members, windows, chunk) == reference_rows(partitions)


def test_natively_read_rows_of_one_table_layout_share_their_columns(native_members: Any) -> None:
    rows = [
        RowChange(BIG_TS, "db", "t", Op.INSERT, COLUMNS, {"id": n, "v": "x"}, None) for n in (1, 2)
    ]
    members = [row_member(BIG_TS, 0, 0, [pack_row(row) for row in rows])]
    one, two = native_members(members, 0, 1, Copies())
    assert one.columns is two.columns and one.columns == COLUMNS


def _keyed(key: int) -> bytes:
    return pack_row(RowChange(BIG_TS, "db", "t", Op.INSERT, COLUMNS, {"id": key, "v": "x"}, None))


def test_the_native_reader_leaves_what_it_refuses_to_python(native_members: Any) -> None:
    keyed = _keyed(1)
    members = [
        row_member(BIG_TS, 0, 0, [REFUSED]),
        row_member(BIG_TS, 0, 1, [keyed]),
        row_member(BIG_TS, 1, 0, [REFUSED, keyed]),
        row_member(BIG_TS + 1, 0, 0, [REFUSED]),
    ]
    copies = Copies()
    rows = native_members(members, 0, len(members), copies)
    # The refused row's copy at one commit ts collapses as the native row's does.
    assert [(row.commit_ts, row.new) for row in rows] == [
        (BIG_TS, {b"id": 1}),
        (BIG_TS, {"id": 1, "v": "x"}),
        (BIG_TS + 1, {b"id": 1}),
    ]
    assert (copies.ts, copies.commit_ts) == (b"%016x" % (BIG_TS + 1), BIG_TS + 1)


def test_a_member_refused_past_its_first_rows_is_read_once_whole(native_members: Any) -> None:
    # The native reader reads the first two rows of the middle member, then meets one it
    # refuses: Python reads that member whole, the native reader none of it, and what the
    # native reader had seen of it does not collapse Python's rows.
    members = [
        row_member(BIG_TS, 0, 0, [_keyed(1)]),
        row_member(BIG_TS, 1, 0, [_keyed(2), _keyed(3), REFUSED, _keyed(3), _keyed(1)]),
        row_member(BIG_TS, 2, 0, [_keyed(2), _keyed(4)]),
    ]
    rows = native_members(members, 0, len(members), Copies())
    assert [row.new for row in rows] == [
        {"id": 1, "v": "x"},
        {"id": 2, "v": "x"},
        {"id": 3, "v": "x"},
        {b"id": 1},
        {"id": 4, "v": "x"},
    ]
    assert rows == released(MemberReader().rows, [members], 3)


def test_identical_keyless_rows_of_one_member_are_two_rows(native_members: Any) -> None:
    same = pack_row(RowChange(BIG_TS, "db", "n", Op.INSERT, NO_KEY, {"a": 1, "b": "x"}, None))
    keyed = _keyed(1)
    members = [row_member(BIG_TS, 0, 0, [same, keyed, same, keyed])]
    for read in (native_members, MemberReader().rows):
        rows = read(members, 0, 1, Copies())
        assert [row.table for row in rows] == ["n", "t", "n"]
