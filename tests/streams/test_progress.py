from streams.progress import Progress

TS = 1_712_799_072_265 << 18


def test_each_line_counts_what_was_staged_since_the_last() -> None:
    progress = Progress()
    first = progress.line(100, 10, 4, None)
    assert first.startswith("staged 100 rows in 10 messages since the last report")
    assert "4 partitions assigned; global resolved ts unknown" in first
    second = progress.line(130, 12, 4, TS)
    assert second.startswith("staged 30 rows in 2 messages since the last report (130 rows,")
    assert f"global resolved ts {TS} (2024-04-11T01:31:12.265Z, " in second
