"""Progress reads against the real Redis: watermarks, the global resolved ts, what is releasable."""

from __future__ import annotations

import pytest

from core.staging import Staging
from tests.core.staging.changes import BIG_TS, P0, P1, row

pytestmark = pytest.mark.integration


def test_watermarks_never_go_back_and_an_idle_partition_blocks(staging: Staging) -> None:
    assert staging.highest_watermark() is None
    staging.stage(P0, 0, [], watermark=BIG_TS + 10)
    assert staging.global_resolved_ts() is None  # partition 1 has said nothing yet
    staging.stage(P1, 0, [], watermark=BIG_TS + 20)
    assert staging.global_resolved_ts() == BIG_TS + 10
    assert staging.highest_watermark() == BIG_TS + 20  # exact above 2**53
    staging.stage(P0, 1, [], watermark=BIG_TS + 5)  # an older, replayed resolved event
    assert staging.watermarks()[P0] == BIG_TS + 10
    staging.stage(P0, 2, [], watermark=(1 << 64) - 1)
    assert staging.global_resolved_ts() == BIG_TS + 20


def test_staged_rows_are_releasable_only_past_the_last_trim(staging: Staging) -> None:
    staging.stage(P0, 0, [row(BIG_TS + 1, 1)], watermark=BIG_TS + 10)
    assert not staging.releasable()  # partition 1 has no watermark: the sink can apply nothing
    staging.stage(P1, 0, [row(BIG_TS + 2, 2)], watermark=BIG_TS + 5)
    assert staging.releasable()
    staging.trim(BIG_TS + 5)
    assert not staging.releasable()  # row 1 waits for partition 1's next watermark
    staging.stage(P1, 1, [], watermark=BIG_TS + 6)
    assert staging.releasable()


def test_staged_rows_count_the_rows_of_each_member_page_by_page(
    staging: Staging, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("core.staging.watermarks.COUNT_PAGE", 2)
    # Five members (runs of 2, 1, 3, 1 and 1 rows) over three pages of the count script.
    staging.stage(P0, 0, [row(BIG_TS + 1, 1), row(BIG_TS + 1, 2), row(BIG_TS + 2, 3)])
    staging.stage(P0, 1, [row(BIG_TS + 3, n) for n in range(3)] + [row(BIG_TS + 4, 9)])
    staging.stage(P0, 2, [row(BIG_TS + 5, 5)])
    assert staging.staged_rows(P0) == 8
    assert staging.staged_rows(P1) == 0
