import pytest

from core.tso import describe_tso, format_age, tso_age, tso_fields, tso_seconds, tso_time

# 2024-04-11T01:31:12.265Z, logical part 1234.
TS = (1_712_799_072_265 << 18) + 1234


def test_the_physical_part_is_milliseconds_since_the_epoch() -> None:
    assert tso_seconds(TS) == 1_712_799_072.265
    assert tso_time(TS) == "2024-04-11T01:31:12.265Z"
    assert tso_age(TS, now=1_712_799_082.265) == pytest.approx(10.0)


def test_a_tso_is_described_with_its_time_and_age() -> None:
    now = 1_712_799_072.265 + 3.25
    assert describe_tso(TS, now) == f"{TS} (2024-04-11T01:31:12.265Z, 3.2 s ago)"
    assert describe_tso(None) == "unknown"
    assert describe_tso(0) == "0 (none yet)"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.04, "0.0 s ago"),
        (59.9, "59.9 s ago"),
        (250, "4 min 10 s ago"),
        (7_500, "2 h 5 min ago"),
        (90_000, "1 d 1 h ago"),
        (-2, "2.0 s ahead"),
    ],
)
def test_ages_read_as_people_say_them(seconds: float, text: str) -> None:
    assert format_age(seconds) == text


def test_json_fields_are_null_for_an_unknown_tso() -> None:
    assert tso_fields(None) == {"time": None, "age_seconds": None}
    assert tso_fields(TS, now=1_712_799_073.265) == {
        "time": "2024-04-11T01:31:12.265Z",
        "age_seconds": 1.0,
    }
