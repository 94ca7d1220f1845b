import time

from prometheus_client import REGISTRY

from core.tso import TSO_PHYSICAL_SHIFT
from spark_sink.metrics import lag_seconds, record_batch, record_checkpoint


def _sample(name: str, pipeline: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"pipeline": pipeline})


def test_the_lag_is_computed_when_scraped_so_it_grows_while_stalled() -> None:
    ten_seconds_ago = int((time.time() - 10) * 1000) << TSO_PHYSICAL_SHIFT
    record_batch("lagging", changes=7, seconds=0.1, checkpoint=ten_seconds_ago)
    first = _sample("ticdc_sink_replication_lag_seconds", "lagging")
    assert first is not None and 9.5 < first < 20
    time.sleep(0.3)
    later = _sample("ticdc_sink_replication_lag_seconds", "lagging")
    assert later is not None and later >= first + 0.25
    assert _sample("ticdc_sink_checkpoint_timestamp_seconds", "lagging") == (
        (ten_seconds_ago >> TSO_PHYSICAL_SHIFT) / 1000
    )
    # Counted as changes, not affected rows.
    assert _sample("ticdc_sink_changes_applied_total", "lagging") == 7
    assert _sample("ticdc_sink_batches_applied_total", "lagging") == 1


def test_the_lag_is_never_negative() -> None:
    assert lag_seconds(100.0, now=99.0) == 0.0
    assert lag_seconds(100.0, now=103.5) == 3.5


def test_no_lag_is_exported_before_anything_is_applied() -> None:
    record_checkpoint("fresh", 0)
    assert _sample("ticdc_sink_replication_lag_seconds", "fresh") is None
