"""The names TiCDC's Avro protocol gives tables and columns, and which downstream name each is."""

from __future__ import annotations

from core.avro_names import avro_renames, sanitize_name


def test_an_avro_name_keeps_letters_digits_and_underscores() -> None:
    assert sanitize_name("we`ird tab") == "we_ird_tab"
    assert sanitize_name("ÜniCode") == "_niCode"
    assert sanitize_name("1st") == "_1st"
    assert sanitize_name("plain_1") == "plain_1"


def test_a_carried_name_is_the_one_downstream_name_whose_avro_name_it_is() -> None:
    downstream = ["id", "col`umn", "sp ace", "ÜniCode", "a-b", "a b"]
    carried = ["id", "col_umn", "sp_ace", "_niCode", "a_b", "gone"]
    # a_b is the Avro name of two downstream columns: neither is guessed.
    assert avro_renames(carried, downstream) == {
        "col_umn": "col`umn",
        "sp_ace": "sp ace",
        "_niCode": "ÜniCode",
    }
