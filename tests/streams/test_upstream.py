"""The snapshot read of a handle-key-only row, and the image made of its answer."""

from __future__ import annotations

from streams.model import ColumnFlag, MySQLType, column_type
from streams.upstream import ENUM_FLAG, SET_FLAG, index_read, row_image, snapshot_read, wire_types

KEY = column_type(MySQLType.LONG, ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY)


def test_the_snapshot_read_is_tidbs_own_with_values_bound() -> None:
    # As TiCDC's consumer (pkg/sink/codec/common MustSnapshotQuery): set the snapshot, then
    # select the whole row by its key; here with quoted names and bound values.
    statements = snapshot_read("shop", "o`rders 100%", {"id": 7, "region": "eu"}, 449)
    assert statements == [
        ("SET @@tidb_snapshot = %s", (449,)),
        (
            "SELECT * FROM `shop`.`o``rders 100%%` WHERE `id` = %s AND `region` = %s LIMIT 2",
            (7, "eu"),
        ),
    ]


def test_a_row_read_as_text_becomes_the_models_values() -> None:
    names = ["id", "qty", "price", "ratio", "flags", "note", "blob", "at", "gone"]
    codes = [
        MySQLType.LONG, MySQLType.LONGLONG, MySQLType.NEWDECIMAL, MySQLType.DOUBLE,
        MySQLType.BIT, MySQLType.VAR_STRING, MySQLType.BLOB, MySQLType.DATETIME, MySQLType.LONG,
    ]  # fmt: skip
    values = ["7", "18446744073709551615", "1.50", "0.25", b"\x01\x02", "hé", b"\x00\xff",
              "2026-11-23 18:00:00", None]  # fmt: skip
    columns, image = row_image(names, codes, values, {"id": KEY})
    assert image == {
        "id": 7, "qty": 2**64 - 1, "price": "1.50", "ratio": 0.25, "flags": 258, "note": "hé",
        "blob": b"\x00\xff", "at": "2026-11-23 18:00:00", "gone": None,
    }  # fmt: skip
    assert columns["id"] is KEY
    assert columns["blob"].is_binary and not columns["note"].is_binary
    assert columns["flags"] == column_type(MySQLType.BIT)


def test_enum_and_set_columns_are_read_again_as_their_numbers() -> None:
    # As MySQL and TiDB describe them: strings, marked by a flag.
    fields = [(MySQLType.LONG, 0), (MySQLType.STRING, ENUM_FLAG), (MySQLType.STRING, SET_FLAG)]
    codes = wire_types(fields)
    assert codes == [MySQLType.LONG, MySQLType.ENUM, MySQLType.SET]
    assert index_read("shop", "docs", ["state", "tags"], {"id": 7}) == (
        "SELECT `state` + 0, `tags` + 0 FROM `shop`.`docs` WHERE `id` = %s",
        (7,),
    )
    columns, image = row_image(["id", "state", "tags"], codes, ["7", "2", "5"], {})
    assert image == {"id": 7, "state": 2, "tags": 5}
    assert columns["state"] == column_type(MySQLType.ENUM)
