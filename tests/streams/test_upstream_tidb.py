"""Handle-key-only rows read back from a real upstream TiDB, by snapshot reads at real commit TSOs.

The table is the conformance workload's ``t_types`` (../shared/conformance/ticdc_encoded): every
column type TiCDC carries. The expected rows hold what TiCDC's own Open Protocol encoder sent for
that table (types and flags as in ``open.jsonl.gz``; values in the forms it writes them: DECIMAL
padded to its scale, FLOAT widened from single precision, BINARY padded, ENUM and SET as numbers,
BIT as an unsigned integer), so a row read upstream must equal the row TiCDC would have sent whole.
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pymysql
import pytest
import redis

from config.errors import LargeMessageError
from config.settings import Settings
from core.model import (
    FLOAT_TYPES,
    ColumnFlag,
    ColumnType,
    MySQLType,
    Op,
    Resolved,
    RowChange,
    Value,
)
from core.model import column_type as kind
from core.staging import Staging
from streams.codecs.open_protocol import OpenProtocolCodec
from streams.large_messages import LargeMessages
from streams.upstream import UpstreamReader
from tests.streams.codecs.large_messages import handle_key_only_message, key_only
from tests.streams.test_large_messages import topic  # noqa: F401
from tests.ticdc_sink.pipelines import run_worker_until_resolved
from ticdc_sink.produce import send
from ticdc_sink.services.tidb_server import TiDBService

pytestmark = pytest.mark.integration

DDL = """CREATE TABLE `{db}`.`t_types` (
  `id` BIGINT NOT NULL,
  `c_ti` TINYINT, `c_tiu` TINYINT UNSIGNED, `c_si` SMALLINT, `c_siu` SMALLINT UNSIGNED,
  `c_mi` MEDIUMINT, `c_miu` MEDIUMINT UNSIGNED, `c_i` INT, `c_iu` INT UNSIGNED,
  `c_bi` BIGINT, `c_biu` BIGINT UNSIGNED,
  `c_dec` DECIMAL(65,30), `c_dec2` DECIMAL(10,2),
  `c_f` FLOAT, `c_d` DOUBLE,
  `c_ch` CHAR(10), `c_vc` VARCHAR(255),
  `c_bin` BINARY(8), `c_vb` VARBINARY(64),
  `c_txt` TEXT, `c_blob` BLOB,
  `c_date` DATE, `c_dt` DATETIME(6), `c_ts` TIMESTAMP(3) NULL DEFAULT NULL, `c_time` TIME(6),
  `c_year` YEAR, `c_bit1` BIT(1), `c_bit64` BIT(64),
  `c_enum` ENUM('a','b','c d','ü'), `c_set` SET('x','y','z'),
  `c_json` JSON,
  PRIMARY KEY (`id`) /*T![clustered_index] CLUSTERED */
) DEFAULT CHARSET=utf8mb4"""

INSERT = """INSERT INTO `{db}`.`t_types` VALUES (1,
  -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,
  -9223372036854775808, 18446744073709551615,
  -300253380295093709.634142167106246644926, -225988.15, -436115.73734, 2.2250738585072014e-308,
  '中文', 'emoji 😀🎉', X'00616263FF', X'00FF00', 'nul\\0byte', X'00FF',
  '2000-02-29', '9999-12-31 23:59:59.999999', '1996-08-27 07:55:11.123', '-838:59:59.000000',
  2155, b'1', b'1111111111111111111111111111111111111111111111111111111111111111',
  'ü', 'x,z', '{{"big": 12345678901234567890}}')"""

UPDATE = """UPDATE `{db}`.`t_types` SET `c_vc` = NULL, `c_biu` = 0, `c_f` = -1.1754944e-38,
  `c_enum` = 'a', `c_set` = '', `c_json` = '[]', `c_bit64` = b'0', `c_vb` = X'FF00',
  `c_time` = '00:00:00' WHERE `id` = 1"""

# The column types and flags TiCDC's Open Protocol encoder sent for t_types (open.jsonl.gz).
_SIGNED = ColumnFlag.BINARY | ColumnFlag.NULLABLE
_UNSIGNED = _SIGNED | ColumnFlag.UNSIGNED
_TEXT = ColumnFlag.NULLABLE
TYPES: dict[str, ColumnType] = {
    "id": kind(MySQLType.LONGLONG, ColumnFlag.BINARY | ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY),  # noqa: E501
    "c_ti": kind(MySQLType.TINY, _SIGNED), "c_tiu": kind(MySQLType.TINY, _UNSIGNED),
    "c_si": kind(MySQLType.SHORT, _SIGNED), "c_siu": kind(MySQLType.SHORT, _UNSIGNED),
    "c_mi": kind(MySQLType.INT24, _SIGNED), "c_miu": kind(MySQLType.INT24, _UNSIGNED),
    "c_i": kind(MySQLType.LONG, _SIGNED), "c_iu": kind(MySQLType.LONG, _UNSIGNED),
    "c_bi": kind(MySQLType.LONGLONG, _SIGNED), "c_biu": kind(MySQLType.LONGLONG, _UNSIGNED),
    "c_dec": kind(MySQLType.NEWDECIMAL, _SIGNED), "c_dec2": kind(MySQLType.NEWDECIMAL, _SIGNED),
    "c_f": kind(MySQLType.FLOAT, _SIGNED), "c_d": kind(MySQLType.DOUBLE, _SIGNED),
    "c_ch": kind(MySQLType.STRING, _TEXT), "c_vc": kind(MySQLType.VARCHAR, _TEXT),
    "c_bin": kind(MySQLType.STRING, _SIGNED), "c_vb": kind(MySQLType.VARCHAR, _SIGNED),
    "c_txt": kind(MySQLType.BLOB, _TEXT), "c_blob": kind(MySQLType.BLOB, _SIGNED),
    "c_date": kind(MySQLType.DATE, _SIGNED), "c_dt": kind(MySQLType.DATETIME, _SIGNED),
    "c_ts": kind(MySQLType.TIMESTAMP, _SIGNED), "c_time": kind(MySQLType.DURATION, _SIGNED),
    "c_year": kind(MySQLType.YEAR, _UNSIGNED),
    "c_bit1": kind(MySQLType.BIT, _UNSIGNED), "c_bit64": kind(MySQLType.BIT, _UNSIGNED),
    "c_enum": kind(MySQLType.ENUM, _TEXT), "c_set": kind(MySQLType.SET, _TEXT),
    "c_json": kind(MySQLType.JSON, _SIGNED),
}  # fmt: skip

INSERTED: dict[str, Value] = {
    "id": 1,
    "c_ti": -128, "c_tiu": 255, "c_si": -32768, "c_siu": 65535,
    "c_mi": -8388608, "c_miu": 16777215, "c_i": -2147483648, "c_iu": 4294967295,
    "c_bi": -(2**63), "c_biu": 2**64 - 1,
    "c_dec": "-300253380295093709.634142167106246644926000000000", "c_dec2": "-225988.15",
    "c_f": -436115.75, "c_d": 2.2250738585072014e-308,
    "c_ch": "中文", "c_vc": "emoji 😀🎉",
    "c_bin": b"\x00abc\xff\x00\x00\x00", "c_vb": b"\x00\xff\x00",
    "c_txt": "nul\x00byte", "c_blob": b"\x00\xff",
    "c_date": "2000-02-29", "c_dt": "9999-12-31 23:59:59.999999",
    "c_ts": "1996-08-27 07:55:11.123", "c_time": "-838:59:59.000000",
    "c_year": 2155, "c_bit1": 1, "c_bit64": 2**64 - 1,
    "c_enum": 4, "c_set": 0b101,
    "c_json": '{"big": 12345678901234567890}',
}  # fmt: skip

UPDATED: dict[str, Value] = {
    **INSERTED,
    "c_vc": None, "c_biu": 0, "c_f": -1.1754944e-38, "c_enum": 1, "c_set": 0, "c_json": "[]",
    "c_bit64": 0, "c_vb": b"\xff\x00", "c_time": "00:00:00.000000",
}  # fmt: skip


def typed(image: dict[str, Value] | None) -> dict[str, tuple[type, Value]] | None:
    """An image compared with its values' types: ``1 == 1.0 == True`` in Python."""
    return None if image is None else {name: (type(v), v) for name, v in image.items()}


def assert_same_row(got: RowChange, expected: RowChange) -> None:
    assert not got.handle_key_only
    assert (got.commit_ts, got.schema, got.table, got.op) == (
        expected.commit_ts,
        expected.schema,
        expected.table,
        expected.op,
    )
    assert typed(got.new) == typed(expected.new)
    assert typed(got.old) == typed(expected.old)
    assert got.columns == expected.columns


def _commit(conn: pymysql.connections.Connection, sql: str) -> int:
    """Runs ``sql`` as one transaction; its commit TSO, as TiDB reports it on the connection."""
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute(sql)
        cur.execute("COMMIT")
        cur.execute("SELECT JSON_EXTRACT(@@tidb_last_txn_info, '$.commit_ts')")
        (ts,) = cur.fetchone()
    return int(ts)


@pytest.fixture
def upstream_db(
    tidb_connect: Callable[..., pymysql.connections.Connection], unique: str, tidb_safe_point: None
) -> Iterator[str]:
    with tidb_connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{unique}`")
        cur.execute(DDL.format(db=unique))
    yield unique
    with tidb_connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{unique}`")


@pytest.fixture
def commits(
    tidb_connect: Callable[..., pymysql.connections.Connection], upstream_db: str
) -> tuple[int, int]:
    """The insert's and the update's commit TSOs."""
    with tidb_connect() as conn:
        return _commit(conn, INSERT.format(db=upstream_db)), _commit(
            conn, UPDATE.format(db=upstream_db)
        )


@pytest.fixture
def reader(tidb_settings: Settings) -> Iterator[UpstreamReader]:
    upstream = UpstreamReader(tidb_settings.downstream.url)
    yield upstream
    if upstream._conn is not None:
        upstream._conn.close()


def _rows(db: str, inserted_at: int, updated_at: int) -> tuple[RowChange, RowChange]:
    insert = RowChange(inserted_at, db, "t_types", Op.INSERT, TYPES, INSERTED, None)
    update = RowChange(updated_at, db, "t_types", Op.UPDATE, TYPES, UPDATED, INSERTED)
    return insert, update


def test_a_handle_key_only_row_reads_back_as_ticdc_would_have_sent_it_whole(
    reader: UpstreamReader, upstream_db: str, commits: tuple[int, int]
) -> None:
    inserted_at, updated_at = commits
    assert inserted_at < updated_at
    insert, update = _rows(upstream_db, inserted_at, updated_at)
    # The insert at its own ts, though the row has changed since.
    assert_same_row(reader.whole(key_only(insert), "open"), insert)
    # The update: the new image at its ts, the old one at ts - 1.
    assert_same_row(reader.whole(key_only(update), "open"), update)
    # Each read left the connection's snapshot as it was: the session reads the present again.
    with reader._conn.cursor() as cur:
        cur.execute(f"SELECT @@tidb_snapshot, `c_biu` FROM `{upstream_db}`.`t_types`")
        assert cur.fetchone() == ("", "0")


def test_a_row_not_there_at_the_ts_is_reported_not_made_up(
    reader: UpstreamReader, upstream_db: str, commits: tuple[int, int]
) -> None:
    inserted_at, _ = commits
    insert, _ = _rows(upstream_db, inserted_at - 1, inserted_at)
    with pytest.raises(LargeMessageError) as raised:
        reader.whole(key_only(insert), "open")
    assert f"{upstream_db}.t_types at ts {inserted_at - 1}: 0 upstream rows" in str(raised.value)
    # The reader still works after a failed read.
    insert = replace(insert, commit_ts=inserted_at)
    assert_same_row(reader.whole(key_only(insert), "open"), insert)


def test_a_table_without_a_handle_key_is_refused_with_the_reason(
    reader: UpstreamReader, upstream_db: str
) -> None:
    keyless = RowChange(1, upstream_db, "t_nokey", Op.INSERT, {}, {}, None, handle_key_only=True)
    with pytest.raises(LargeMessageError, match="the table has no handle-key column"):
        reader.whole(keyless, "open")


def test_the_open_protocol_message_decodes_to_the_whole_row(
    reader: UpstreamReader, upstream_db: str, commits: tuple[int, int]
) -> None:
    # The message as TiCDC sends it (ohk), made whole upstream, against the whole message decoded.
    codec = OpenProtocolCodec()
    for row in _rows(upstream_db, *commits):
        cut = handle_key_only_message(codec, row)
        (whole,) = codec.encode([row])
        (expected,) = codec.decode(whole.key, whole.value)
        (got,) = LargeMessages(upstream=reader).decode(codec, cut.key, cut.value)
        assert isinstance(got, RowChange) and isinstance(expected, RowChange)
        assert_same_row(got, expected)


async def test_the_worker_stages_a_handle_key_only_row_read_upstream(
    redis_client: redis.Redis,
    settings: Settings,
    topic: str,  # noqa: F811
    staging: Staging,
    unique: str,
    upstream_db: str,
    commits: tuple[int, int],
) -> None:
    codec = OpenProtocolCodec()
    insert, update = _rows(upstream_db, *commits)
    messages = [
        handle_key_only_message(codec, insert),
        handle_key_only_message(codec, update),
        *codec.encode([Resolved(update.commit_ts)]),
    ]
    await send(settings, topic, 1, [(0, m) for m in messages])
    run_worker_until_resolved(
        settings,
        staging,
        topic,
        unique,
        update.commit_ts,
        TICDC_SINK_UPSTREAM=f"mysql://root@{TiDBService.endpoint}/",
    )
    assert redis_client.xlen(staging.keys.dead_letters) == 0
    released = [e for e in staging.release(0, update.commit_ts) if isinstance(e, RowChange)]
    assert len(released) == 2
    for got, expected in zip(released, (insert, update), strict=True):
        assert_same_row(got, expected)


# --- the conformance workload, against every row TiCDC's own encoder sent for it ----------------


def _replay(conn: pymysql.connections.Connection, workload: Path, db: str) -> list[int]:
    """Runs the workload into ``db``, each DML list as one transaction; the commit TSOs of those
    that changed a row (TiCDC sends nothing for the others), in commit order."""
    commits: list[int] = []
    with conn.cursor() as cur, gzip.open(workload) as lines:
        for line in lines:
            step = orjson.loads(line)
            if step["kind"] == "ddl":
                cur.execute(step["sql"].replace("{DB}", db))
                continue
            cur.execute("BEGIN")
            changed = sum(cur.execute(sql.replace("{DB}", db)) for sql in step["sql"])
            cur.execute("COMMIT")
            cur.execute("SELECT JSON_EXTRACT(@@tidb_last_txn_info, '$.commit_ts')")
            (ts,) = cur.fetchone()
            if changed:
                commits.append(int(ts))
    return commits


def _ticdc_rows(stream: Path) -> list[RowChange]:
    codec = OpenProtocolCodec()
    rows: list[RowChange] = []
    with gzip.open(stream) as lines:
        for line in lines:
            message = orjson.loads(line)
            key = base64.b64decode(message["k"]) if message["k"] else None
            events = codec.decode(key, base64.b64decode(message["v"]))
            rows += [e for e in events if isinstance(e, RowChange)]
    return rows


def _as_floats(row: RowChange) -> RowChange:
    # TiCDC's JSON writes a whole FLOAT or DOUBLE without a fraction (0, 1e10), and the Open
    # Protocol codec reads that back as an int; the model (and the upstream read) say float.
    def image(values: dict[str, Value] | None) -> dict[str, Value] | None:
        if values is None:
            return None
        return {
            name: float(v) if row.columns[name].mysql_type in FLOAT_TYPES and type(v) is int else v
            for name, v in values.items()
        }

    return replace(row, new=image(row.new), old=image(row.old))


@pytest.fixture
def replay_db(
    tidb_connect: Callable[..., pymysql.connections.Connection], unique: str, tidb_safe_point: None
) -> Iterator[str]:
    yield unique
    with tidb_connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{unique}`")


def test_every_row_of_the_workload_reads_back_as_ticdc_sent_it(
    conformance: Path,
    tidb_connect: Callable[..., pymysql.connections.Connection],
    reader: UpstreamReader,
    replay_db: str,
) -> None:
    # Every table of the workload: composite keys (a DATETIME(6) and a VARCHAR in them), a
    # not-null unique key as the handle, key-changing updates, a name with a backtick and a
    # space, a column added midway; each insert and update as handle-key-only, read back at this
    # TiDB's own commit TSOs (the n-th changing transaction here is TiCDC's n-th commit ts).
    folder = conformance / "ticdc_encoded"
    with tidb_connect() as conn:
        ours = _replay(conn, folder / "workload.sql.jsonl.gz", replay_db)
    rows = _ticdc_rows(folder / "open.jsonl.gz")
    theirs = sorted({row.commit_ts for row in rows})
    assert len(theirs) == len(ours) == 320
    at = dict(zip(theirs, ours, strict=True))
    checked = keyless = 0
    for sent in rows:
        if sent.op is Op.DELETE:
            continue  # staged by its key as it is
        row = _as_floats(replace(sent, commit_ts=at[sent.commit_ts], schema=replay_db))
        if not any(kind.is_key for kind in row.columns.values()):
            # t_nokey: TiCDC sends a handle-key-only row of it without a single column.
            with pytest.raises(LargeMessageError, match="the table has no handle-key column"):
                reader.whole(key_only(row), "open")
            keyless += 1
            continue
        assert_same_row(reader.whole(key_only(row), "open"), row)
        checked += 1
    assert (checked, keyless) == (2486, 161)
