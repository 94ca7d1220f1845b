"""Refused rows: the column a server error names, the one-line message, dead letters, and taking
refused rows out of a batch's plans."""

from __future__ import annotations

import orjson

from core.model import ColumnFlag, Op, RowChange, column_type
from spark_sink.plan import plan_batch
from spark_sink.refused import RefusedRow, column_of, refused_error, without_refused

PK = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
COLUMNS = {"id": column_type(3, PK), "f": column_type(4, 64)}
NO_KEY = {"a": column_type(3, 64), "f": column_type(4, 64)}


def test_the_column_is_read_from_mariadb_and_mysql_errors() -> None:
    assert (
        column_of("1366 Incorrect double value: 'nan' for column `d`.`t`.`c_f` at row 1") == "c_f"
    )
    assert column_of("1264 Out of range value for column 'c_f' at row 1") == "c_f"
    assert column_of("1292 Incorrect date value: 'x' for column `d`.`t`.`we``ird` at row 1") == (
        "we`ird"
    )
    assert column_of("1062 Duplicate entry '1' for key 'PRIMARY'") is None


def test_one_message_names_table_key_column_commit_ts_and_the_error() -> None:
    row = RefusedRow("db", "t", {"id": 7}, "f", 42, "1264 Out of range value", {"id": 7, "f": 1e39})
    error = refused_error([row, row])
    assert str(error) == (
        "the downstream refuses a row of db.t (key id=7; column f; commit ts 42): "
        "1264 Out of range value (and 1 more rows of this batch)"
    )
    letter = row.dead_letter()
    assert letter["table"] == "db.t" and letter["commit_ts"] == "42"
    assert orjson.loads(letter["key"]) == {"id": 7}
    assert orjson.loads(letter["row"]) == {"id": 7, "f": 1e39}


def test_refused_rows_leave_the_plans_and_the_rest_stays() -> None:
    bad, good = {"id": 1, "f": float("nan")}, {"id": 2, "f": 0.5}
    keyless = {"a": 1, "f": 1e39}
    plans = plan_batch(
        [
            RowChange(5, "db", "t", Op.INSERT, COLUMNS, bad, None),
            RowChange(5, "db", "t", Op.INSERT, COLUMNS, good, None),
            RowChange(5, "db", "n", Op.INSERT, NO_KEY, keyless, None),
            RowChange(5, "db", "n", Op.INSERT, NO_KEY, keyless, None),
        ]
    )
    refused = [
        RefusedRow("db", "t", {"id": 1}, "f", 5, "e", bad),
        RefusedRow("db", "n", keyless, "f", 5, "e", keyless),
    ]
    without_refused(plans, refused)
    keyed, copies = plans
    assert list(keyed.upserts.values()) == [good]
    assert not copies.upserts and not copies.copies
