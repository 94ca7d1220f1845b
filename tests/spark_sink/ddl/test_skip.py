"""`skip-ddl` refuses a skip the sink could never meet, or one that would drop another."""

from __future__ import annotations

from spark_sink.db.checkpoint import Checkpoint
from spark_sink.ddl.skip import skip_refusal

TS = 449_100_000_000_000_000


def refusal(
    ts: int,
    found: Checkpoint | None,
    *,
    known: bool = True,
    staged: bool = True,
    replace: bool = False,
) -> str | None:
    return skip_refusal("p", ts, found, staging_known=known, staged=staged, replace=replace)


def test_an_unknown_pipeline_is_refused() -> None:
    assert refusal(TS, None, known=False, staged=False) == (
        f"--ts {TS}: no pipeline 'p': no checkpoint downstream and nothing staged in Redis "
        "(check TICDC_SINK_GROUP)"
    )
    # Staged but not applied yet (no checkpoint) is a pipeline all the same.
    assert refusal(TS, None, known=True) is None


def test_a_ts_without_a_staged_ddl_is_refused() -> None:
    said = refusal(TS, Checkpoint(TS - 10, TS - 10, 1, {}), staged=False)
    assert said is not None
    assert said.startswith(f"--ts {TS}: no DDL is staged at that commit ts in pipeline 'p'")


def test_a_pending_skip_is_replaced_only_on_purpose() -> None:
    pending = Checkpoint(TS - 10, TS - 20, 1, {}, skip_ddl_ts=TS - 5)
    assert refusal(TS, pending) == (
        f"--ts {TS}: pipeline p is already to skip the DDL at ts {TS - 5}, not reached yet; "
        "give --replace to skip this one instead"
    )
    assert refusal(TS, pending, replace=True) is None
    assert refusal(TS - 5, pending) is None


def test_a_skip_already_done_is_no_conflict() -> None:
    done = Checkpoint(TS - 10, TS - 5, 1, {}, skip_ddl_ts=TS - 5)
    assert refusal(TS, done) is None
