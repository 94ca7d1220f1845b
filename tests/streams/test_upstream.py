"""The snapshot read of a handle-key-only row, and the image made of its answer."""

from __future__ import annotations

from core.model import ColumnFlag, MySQLType, column_type
from streams.upstream import (
    BINARY_CHARSET,
    ENUM_FLAG,
    NOT_NULL_FLAG,
    SET_FLAG,
    UNSIGNED_FLAG,
    number_read,
    row_image,
    snapshot_read,
    wire_types,
)

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
    names = ["id", "qty", "price", "ratio", "flags", "note", "blob", "at", "gone", "weight"]
    codes = [
        MySQLType.LONG, MySQLType.LONGLONG, MySQLType.NEWDECIMAL, MySQLType.DOUBLE,
        MySQLType.BIT, MySQLType.VARCHAR, MySQLType.BLOB, MySQLType.DATETIME, MySQLType.LONG,
        MySQLType.FLOAT,
    ]  # fmt: skip
    kinds = [column_type(code) for code in codes]
    kinds[6] = column_type(MySQLType.BLOB, ColumnFlag.BINARY)
    values = ["7", "18446744073709551615", "1.50", "0.25", b"\x01\x02", "hé", b"\x00\xff",
              "2026-11-23 18:00:00", None, "0.10000000149011612"]  # fmt: skip
    columns, image = row_image(names, kinds, values, {"id": KEY})
    assert image == {
        "id": 7, "qty": 2**64 - 1, "price": "1.50", "ratio": 0.25, "flags": 258, "note": "hé",
        "blob": b"\x00\xff", "at": "2026-11-23 18:00:00", "gone": None,
        "weight": 0.1,  # a FLOAT read exactly (widened), kept as TiCDC writes it
    }  # fmt: skip
    assert columns["id"] is KEY
    assert columns["blob"].is_binary and not columns["note"].is_binary
    assert columns["flags"] == column_type(MySQLType.BIT)


def test_enum_set_and_float_columns_are_read_again_as_numbers() -> None:
    # As MySQL and TiDB describe them: strings, marked by a flag.
    fields = [
        (MySQLType.LONG, 0, 63),
        (MySQLType.STRING, ENUM_FLAG, 46),
        (MySQLType.STRING, SET_FLAG, 46),
    ]
    kinds = wire_types(fields)
    assert [kind.mysql_type for kind in kinds] == [MySQLType.LONG, MySQLType.ENUM, MySQLType.SET]
    assert number_read("shop", "docs", ["state", "tags"], {"id": 7}) == (
        "SELECT `state` + 0, `tags` + 0 FROM `shop`.`docs` WHERE `id` = %s",
        (7,),
    )
    columns, image = row_image(["id", "state", "tags"], kinds, ["7", "2", "5"], {})
    assert image == {"id": 7, "state": 2, "tags": 5}
    assert columns["state"] == column_type(MySQLType.ENUM, ColumnFlag.NULLABLE)


def test_wire_flags_become_ticdcs_flags_for_the_same_column() -> None:
    # As TiDB describes a column in a result set, and TiCDC the same column in a message.
    nullable = ColumnFlag.NULLABLE
    binary = ColumnFlag.BINARY | nullable
    kinds = wire_types(
        [
            (MySQLType.LONGLONG, UNSIGNED_FLAG, BINARY_CHARSET),  # BIGINT UNSIGNED
            (MySQLType.VAR_STRING, 0, 46),  # VARCHAR utf8mb4
            (MySQLType.VAR_STRING, NOT_NULL_FLAG, BINARY_CHARSET),  # VARBINARY NOT NULL
            (MySQLType.YEAR, UNSIGNED_FLAG | 0x40, BINARY_CHARSET),  # YEAR (zerofill)
            (MySQLType.BLOB, 0x10, 46),  # TEXT
        ]
    )
    assert kinds == [
        column_type(MySQLType.LONGLONG, binary | ColumnFlag.UNSIGNED),
        column_type(MySQLType.VARCHAR, nullable),
        column_type(MySQLType.VARCHAR, ColumnFlag.BINARY),
        column_type(MySQLType.YEAR, binary | ColumnFlag.UNSIGNED),
        column_type(MySQLType.BLOB, nullable),
    ]
