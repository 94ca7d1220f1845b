"""The target (spark_sink/target.py, spark_sink/apply_batch.py) against the real MariaDB and TiDB
(and Spark for large batches): types, keys, atomicity with the checkpoint, fencing, refused rows,
TiDB's limits."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from config.errors import LostLeadershipError
from config.settings import Settings, parse_routes
from core.model import ColumnFlag, DDLEvent, Op, RowChange, column_type
from core.staging import Staging, TopicPartition
from spark_sink import apply_batch
from spark_sink.db.connection import connect
from spark_sink.db.dialect import TRUNCATE_MIN_ROWS
from spark_sink.leader import LeaderLock
from spark_sink.load.loaders import load_path
from spark_sink.loop import SinkLoop
from spark_sink.plan import plan_batch
from spark_sink.routing import Router
from spark_sink.target import Target

pytestmark = pytest.mark.integration

PK = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
UNIQUE = int(ColumnFlag.UNIQUE_KEY)
NULLABLE = int(ColumnFlag.NULLABLE)
TP = TopicPartition("topic", 0)
TS = 449_000_000_000_000_000


# The servers the sink is checked against: MariaDB, the settings' downstream, and a real TiDB.
ON_EVERY_SERVER = pytest.mark.parametrize("downstream_settings", ["mariadb", "tidb"], indirect=True)


@pytest.fixture
def downstream_settings(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    """The settings of the server a test applies to: MariaDB unless parametrized with TiDB."""
    if getattr(request, "param", "mariadb") == "tidb":
        request.getfixturevalue("tidb_connect")  # fails under CI when TiDB does not answer
        tidb: Settings = request.getfixturevalue("tidb_settings")
        return tidb
    return settings


@pytest.fixture
def scratch_db(downstream_settings: Settings, unique: str) -> Any:
    """A database of its own on the test's server, dropped afterwards."""
    query(downstream_settings, f"CREATE DATABASE `{unique}`")
    yield unique
    query(downstream_settings, f"DROP DATABASE IF EXISTS `{unique}`")


@pytest.fixture
def pipeline(downstream_settings: Settings, unique: str, redis_client: Any) -> Any:
    configured = downstream_settings.updated({"group": unique, "meta_db": f"{unique}_meta"})
    staging = Staging(redis_client, unique)
    staging.set_partition_count("topic", 1)
    target = Target(configured)
    yield configured, staging, target
    for key in redis_client.scan_iter(staging.keys.pattern):
        redis_client.delete(key)
    with connect(configured, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{unique}_meta`")


class Feed:
    """Stages events at increasing offsets with a watermark, like one worker would."""

    def __init__(self, staging: Staging) -> None:
        self.staging = staging
        self.offset = 0

    def __call__(
        self, rows: list[RowChange], ddls: list[DDLEvent] = (), upto: int | None = None
    ) -> None:  # type: ignore[assignment]
        self.staging.stage(TP, self.offset, rows, list(ddls), watermark=upto)
        self.offset += 1


def without_load_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """Load as into a server that takes no LOAD DATA LOCAL: by INSERT (or Spark)."""
    monkeypatch.setattr(
        apply_batch,
        "load_path",
        lambda rows, spark_min_rows, *_: load_path(rows, spark_min_rows, load_data_local=False),
    )


def query(settings: Settings, sql: str) -> list[tuple[Any, ...]]:
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(sql)
        return list(cursor.fetchall())


ALL_TYPES_DDL = """
CREATE TABLE `{db}`.`types` (
  id BIGINT UNSIGNED PRIMARY KEY,
  ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, su SMALLINT UNSIGNED, mi MEDIUMINT,
  mu MEDIUMINT UNSIGNED, ii INT, iu INT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED,
  de DECIMAL(65,30), fl FLOAT, do DOUBLE, ch CHAR(10), vc VARCHAR(64), tx TEXT,
  bn BINARY(4), vb VARBINARY(16), bl BLOB, da DATE, dtm DATETIME(6), tsp TIMESTAMP(6) NULL,
  tm TIME(6), yr YEAR, bt BIT(64), en ENUM('a','b','c'), st SET('x','y','z'), js JSON
)
"""


def _types_columns() -> dict[str, Any]:
    spec = {
        "id": (8, PK | 0x80), "ti": (1, 0), "tu": (1, 0x80), "si": (2, 0), "su": (2, 0x80),
        "mi": (9, 0), "mu": (9, 0x80), "ii": (3, 0), "iu": (3, 0x80), "bi": (8, 0),
        "bu": (8, 0x80), "de": (246, 0), "fl": (4, 0), "do": (5, 0), "ch": (254, 0),
        "vc": (15, 0), "tx": (252, 0), "bn": (254, 1), "vb": (15, 1), "bl": (252, 1),
        "da": (10, 0), "dtm": (12, 0), "tsp": (7, 0), "tm": (11, 0), "yr": (13, 0),
        "bt": (16, 0), "en": (247, 0), "st": (248, 0), "js": (245, 0),
    }  # fmt: skip
    return {
        name: column_type(t, f | NULLABLE if name != "id" else f) for name, (t, f) in spec.items()
    }


@ON_EVERY_SERVER
@pytest.mark.parametrize(
    "path", ["load-data", "load-data-file", "load-data-staged", "insert", "spark"]
)
def test_every_type_round_trips(
    pipeline: Any,
    scratch_db: str,
    path: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings, _staging, target = pipeline
    if path == "insert":
        without_load_data(monkeypatch)
    if path == "load-data-file":
        # Into MariaDB, "load-data" sends these few rows in place as a statement with their
        # values; this sends them in place as a file.
        monkeypatch.setattr("spark_sink.load.loaders.VALUES_MAX_ROWS", 0)
    if path == "load-data-staged":
        # Into MariaDB, "load-data" replaces the rows in place; this goes through staging.
        target = Target(settings.updated({"load_in_place": False}))
    if path == "spark":
        spark = request.getfixturevalue("spark")
        through = settings.updated({"spark_min_rows": 0, "load_in_place": False})
        target = Target(through, spark=lambda: spark)
    query(settings, ALL_TYPES_DDL.format(db=scratch_db))
    columns = _types_columns()
    full = {
        "id": 18446744073709551615, "ti": -128, "tu": 255, "si": -32768, "su": 65535,
        "mi": -8388608, "mu": 16777215, "ii": -2147483648, "iu": 4294967295,
        "bi": -9223372036854775808, "bu": 18446744073709551615,
        "de": "12345678901234567890123456789012345.123456789012345678901234567890",
        "fl": 0.5, "do": 1.7976931348623157e308, "ch": "名字", "vc": "emoji 😀 and 'quotes'",
        "tx": "long text\n\t\\", "bn": b"\x00\xff\x00\xff", "vb": b"\x00\xff",
        "bl": b"\x00" * 3 + b"\xff", "da": "2024-02-29", "dtm": "2024-02-29 23:59:59.999999",
        "tsp": "2038-01-19 03:14:07.999999",
        "tm": "-838:59:59.000000", "yr": 2155, "bt": 18446744073709551615, "en": 2, "st": 5,
        "js": '{"k": [1, 2.5, "x"]}',
    }  # fmt: skip
    nulls = {name: None for name in columns} | {"id": 1}
    rows = [
        RowChange(TS + 1, scratch_db, "types", Op.INSERT, columns, full, None),
        RowChange(TS + 1, scratch_db, "types", Op.INSERT, columns, nulls, None),
    ]
    target.apply_batch(plan_batch(rows), TS + 1, 0, {})
    got = query(settings, f"SELECT * FROM `{scratch_db}`.`types` ORDER BY id")
    assert got[0] == (1, *([None] * (len(columns) - 1)))
    assert got[1] == (
        18446744073709551615, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648,
        4294967295, -9223372036854775808, 18446744073709551615,
        Decimal("12345678901234567890123456789012345.123456789012345678901234567890"),
        0.5, 1.7976931348623157e308, "名字", "emoji 😀 and 'quotes'", "long text\n\t\\",
        b"\x00\xff\x00\xff", b"\x00\xff", b"\x00\x00\x00\xff", dt.date(2024, 2, 29),
        dt.datetime(2024, 2, 29, 23, 59, 59, 999999), dt.datetime(2038, 1, 19, 3, 14, 7, 999999),
        -dt.timedelta(hours=838, minutes=59, seconds=59), 2155, b"\xff" * 8, "b", "x,z",
        '{"k": [1, 2.5, "x"]}',
    )  # fmt: skip


KEYED = {"id": column_type(3, PK), "u": column_type(3, UNIQUE), "v": column_type(15, NULLABLE)}


def _keyed_table(settings: Settings, db: str, name: str = "t") -> None:
    query(
        settings,
        f"CREATE TABLE `{db}`.`{name}` (id INT PRIMARY KEY, u INT NOT NULL UNIQUE, v VARCHAR(20))",
    )


@ON_EVERY_SERVER
def test_pk_changes_unique_swaps_and_key_only_deletes(pipeline: Any, scratch_db: str) -> None:
    settings, staging, target = pipeline
    _keyed_table(settings, scratch_db)
    feed = Feed(staging)
    r = lambda i, u, v: {"id": i, "u": u, "v": v}  # noqa: E731
    feed(
        [
            RowChange(TS + 1, scratch_db, "t", Op.INSERT, KEYED, r(i, i, "a"), None)
            for i in range(1, 5)
        ],
        upto=TS + 1,
    )
    sink = SinkLoop(settings, staging, target)
    assert sink.run_once() == TS + 1
    feed(
        [
            # swap the unique values of rows 1 and 2 in one transaction
            RowChange(TS + 2, scratch_db, "t", Op.UPDATE, KEYED, r(1, 2, "a"), r(1, 1, "a")),
            RowChange(TS + 2, scratch_db, "t", Op.UPDATE, KEYED, r(2, 1, "a"), r(2, 2, "a")),
            # move row 3 to primary key 30
            RowChange(TS + 3, scratch_db, "t", Op.UPDATE, KEYED, r(30, 3, "b"), r(3, 3, "a")),
            # delete row 4 by its handle key only
            RowChange(TS + 4, scratch_db, "t", Op.DELETE, KEYED, None, {"id": 4}),
        ],
        upto=TS + 4,
    )
    assert sink.run_once() == TS + 4
    assert query(settings, f"SELECT id, u, v FROM `{scratch_db}`.`t` ORDER BY id") == [
        (1, 2, "a"), (2, 1, "a"), (30, 3, "b"),
    ]  # fmt: skip
    assert staging.staged_totals()[0] == 0  # trimmed


@ON_EVERY_SERVER
def test_a_table_without_a_key(pipeline: Any, scratch_db: str) -> None:
    settings, _staging, target = pipeline
    query(settings, f"CREATE TABLE `{scratch_db}`.`nokey` (a INT, b VARCHAR(5))")
    cols = {"a": column_type(3, NULLABLE), "b": column_type(15, NULLABLE)}
    changes = [
        RowChange(TS + 1, scratch_db, "nokey", Op.INSERT, cols, {"a": 1, "b": "x"}, None),
        RowChange(TS + 1, scratch_db, "nokey", Op.INSERT, cols, {"a": 2, "b": None}, None),
        RowChange(
            TS + 2, scratch_db, "nokey", Op.UPDATE, cols, {"a": 1, "b": "y"}, {"a": 1, "b": "x"}
        ),
        RowChange(TS + 3, scratch_db, "nokey", Op.DELETE, cols, None, {"a": 2, "b": None}),
    ]
    target.apply_batch(plan_batch(changes[:2]), TS + 1, 0, {})
    target.apply_batch(plan_batch(changes[2:]), TS + 3, 0, {})
    assert query(settings, f"SELECT a, b FROM `{scratch_db}`.`nokey`") == [(1, "y")]


@ON_EVERY_SERVER
def test_ddl_between_batches_runs_once(pipeline: Any, scratch_db: str) -> None:
    settings, staging, target = pipeline
    feed = Feed(staging)
    create = DDLEvent(TS + 1, scratch_db, "d", "CREATE TABLE d (id INT PRIMARY KEY, v INT)", 3)
    alter = DDLEvent(TS + 3, scratch_db, "d", "ALTER TABLE d ADD COLUMN w VARCHAR(8)", 5)
    cols = {"id": column_type(3, PK), "v": column_type(3, NULLABLE)}
    wide = cols | {"w": column_type(15, NULLABLE)}
    feed([], [create])
    feed([RowChange(TS + 2, scratch_db, "d", Op.INSERT, cols, {"id": 1, "v": 1}, None)], [alter])
    feed(
        [RowChange(TS + 4, scratch_db, "d", Op.INSERT, wide, {"id": 2, "v": 2, "w": "new"}, None)],
        upto=TS + 4,
    )
    sink = SinkLoop(settings, staging, target)
    assert sink.run_once() == TS + 4
    assert query(settings, f"SELECT id, v, w FROM `{scratch_db}`.`d` ORDER BY id") == [
        (1, 1, None),
        (2, 2, "new"),
    ]
    # A replay of the DDL (Redis rebuilt from Kafka) is recognised and not re-run blindly.
    feed([], [alter], upto=TS + 5)
    assert sink.run_once() == TS + 5
    assert query(settings, f"SELECT COUNT(*) FROM `{scratch_db}`.`d`") == [(2,)]


@ON_EVERY_SERVER
def test_a_batch_applied_twice_equals_once(pipeline: Any, scratch_db: str) -> None:
    settings, _staging, target = pipeline
    _keyed_table(settings, scratch_db)
    plans = plan_batch(
        [
            RowChange(TS + 1, scratch_db, "t", Op.INSERT, KEYED, {"id": 1, "u": 1, "v": "a"}, None),
            RowChange(
                TS + 2,
                scratch_db,
                "t",
                Op.UPDATE,
                KEYED,
                {"id": 2, "u": 1, "v": "b"},
                {"id": 1, "u": 1, "v": "a"},
            ),
        ]
    )
    target.apply_batch(plans, TS + 2, 0, {})
    once = query(settings, f"SELECT * FROM `{scratch_db}`.`t`")
    target.apply_batch(plans, TS + 2, 0, {})
    assert query(settings, f"SELECT * FROM `{scratch_db}`.`t`") == once == [(2, 1, "b")]


@ON_EVERY_SERVER
def test_a_failure_mid_batch_leaves_the_previous_checkpoint(pipeline: Any, scratch_db: str) -> None:
    settings, _staging, target = pipeline
    _keyed_table(settings, scratch_db)
    first = plan_batch(
        [RowChange(TS + 1, scratch_db, "t", Op.INSERT, KEYED, {"id": 1, "u": 1, "v": "a"}, None)]
    )
    target.apply_batch(first, TS + 1, 0, {})
    second = plan_batch(
        [
            RowChange(TS + 2, scratch_db, "t", Op.DELETE, KEYED, None, {"id": 1}),
            RowChange(TS + 2, scratch_db, "t", Op.INSERT, KEYED, {"id": 2, "u": 2, "v": "b"}, None),
        ]
    )

    advance = target.checkpoints.advance

    def advance_then_crash(*args: Any) -> None:
        advance(*args)
        raise RuntimeError("injected: the sink dies before COMMIT")

    target.checkpoints.advance = advance_then_crash  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        target.apply_batch(second, TS + 2, 0, {})
    assert query(settings, f"SELECT * FROM `{scratch_db}`.`t`") == [(1, 1, "a")]
    checkpoint = query(
        settings, f"SELECT resolved_ts FROM `{settings.downstream.meta_db}`.`checkpoint`"
    )
    assert checkpoint == [(TS + 1,)]
    target.checkpoints.advance = advance  # type: ignore[method-assign]
    target.apply_batch(second, TS + 2, 0, {})
    assert query(settings, f"SELECT * FROM `{scratch_db}`.`t`") == [(2, 2, "b")]


@ON_EVERY_SERVER
def test_large_batches_load_through_spark(pipeline: Any, scratch_db: str, spark: Any) -> None:
    settings, _staging, _ = pipeline
    through = settings.updated({"spark_min_rows": 0, "load_in_place": False})
    target = Target(through, spark=lambda: spark)
    _keyed_table(settings, scratch_db)
    rows = [
        RowChange(TS + 1, scratch_db, "t", Op.INSERT, KEYED, {"id": i, "u": i, "v": f"r{i}"}, None)
        for i in range(500)
    ]
    target.apply_batch(plan_batch(rows), TS + 1, 0, {})
    assert query(settings, f"SELECT COUNT(*), SUM(id) FROM `{scratch_db}`.`t`") == [
        (500, Decimal(124750))
    ]


@ON_EVERY_SERVER
@pytest.mark.parametrize("load_data", [True, False], ids=["load-data", "insert"])
def test_hostile_identifiers_are_quoted(
    pipeline: Any, unique: str, load_data: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, _staging, target = pipeline
    if not load_data:
        without_load_data(monkeypatch)
    db = f"{unique}; DROP"
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{db}`")
        cursor.execute(
            f"CREATE TABLE `{db}`.`a``b 100%s` (`id``x%d` INT PRIMARY KEY, `v%` VARBINARY(4))"
        )
    try:
        cols = {"id`x%d": column_type(3, PK), "v%": column_type(15, NULLABLE | 1)}

        def change(ts: int, op: Op, key: int) -> RowChange:
            image = {"id`x%d": key, "v%": b"%s\x00"}
            new, old = (None, image) if op is Op.DELETE else (image, None)
            return RowChange(ts, db, "a`b 100%s", op, cols, new, old)

        for ts, changes in ((TS + 1, [change(TS + 1, Op.INSERT, k) for k in (7, 8)]),
                            (TS + 2, [change(TS + 2, Op.DELETE, 7)])):  # fmt: skip
            target.apply_batch(plan_batch(changes), ts, 0, {})
        assert query(settings, f"SELECT * FROM `{db}`.`a``b 100%s`") == [(8, b"%s\x00")]
    finally:
        query(settings, f"DROP DATABASE `{db}`")


def test_routing_and_skipping(pipeline: Any, scratch_db: str) -> None:
    settings, _staging, _ = pipeline
    target = Target(settings, router=Router(parse_routes(f"up.t={scratch_db}.t"), ("up.skipped",)))
    _keyed_table(settings, scratch_db)
    rows = [
        RowChange(TS + 1, "up", "t", Op.INSERT, KEYED, {"id": 1, "u": 1, "v": "x"}, None),
        RowChange(TS + 1, "up", "skipped", Op.INSERT, KEYED, {"id": 1, "u": 1, "v": "x"}, None),
    ]
    target.apply_batch(plan_batch(rows), TS + 1, 0, {})
    assert query(settings, f"SELECT * FROM `{scratch_db}`.`t`") == [(1, 1, "x")]


def test_a_standby_takes_over_and_fences_the_old_leader(pipeline: Any, redis_client: Any) -> None:
    _settings, staging, target = pipeline
    first = LeaderLock(redis_client, staging.keys, lease_ms=300)
    second = LeaderLock(redis_client, staging.keys, lease_ms=300)
    assert first.acquire()
    assert not second.acquire()
    target.apply_batch([], TS + 1, first.epoch, {})
    import time

    time.sleep(0.5)  # the first leader stalls past its lease
    assert second.acquire() and second.epoch > first.epoch
    target.apply_batch([], TS + 2, second.epoch, {})
    assert not first.renew()
    with pytest.raises(LostLeadershipError):
        target.apply_batch([], TS + 3, first.epoch, {})


def test_a_kept_alive_lease_outlives_its_ttl(pipeline: Any, redis_client: Any) -> None:
    import time

    _, staging, _ = pipeline
    lock = LeaderLock(redis_client, staging.keys, lease_ms=300)
    other = LeaderLock(redis_client, staging.keys, lease_ms=300)
    assert lock.acquire()
    lost = lock.keep_alive()
    time.sleep(1.0)  # more than three leases without the loop renewing
    assert not lost.is_set()
    assert not other.acquire()
    lock.release()
    assert other.acquire()


@ON_EVERY_SERVER
@pytest.mark.parametrize("load_data", [True, False], ids=["load-data", "insert"])
def test_a_value_the_column_cannot_hold_fails_the_batch(
    pipeline: Any, scratch_db: str, load_data: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, _staging, target = pipeline
    if not load_data:
        without_load_data(monkeypatch)
    query(settings, f"CREATE TABLE `{scratch_db}`.`short` (id INT PRIMARY KEY, v VARCHAR(3))")
    cols = {"id": column_type(3, PK), "v": column_type(15, NULLABLE)}
    image = {"id": 1, "v": "toolong"}
    rows = [RowChange(TS + 1, scratch_db, "short", Op.INSERT, cols, image, None)]
    # Never clipped into the table: LOAD DATA LOCAL would only warn, so the sink checks.
    with pytest.raises(Exception, match=r"(?i)too long|truncated"):
        target.apply_batch(plan_batch(rows), TS + 1, 0, {})
    assert query(settings, f"SELECT COUNT(*) FROM `{scratch_db}`.`short`") == [(0,)]


@pytest.mark.parametrize("path", ["load-data", "spark"])
def test_a_keyless_table_keeps_as_many_identical_rows_as_upstream(
    pipeline: Any, scratch_db: str, path: str, request: pytest.FixtureRequest
) -> None:
    settings, _staging, target = pipeline
    if path == "spark":
        spark = request.getfixturevalue("spark")
        target = Target(
            settings.updated({"spark_min_rows": 0, "load_in_place": False}), lambda: spark
        )
    query(settings, f"CREATE TABLE `{scratch_db}`.`n` (a INT, b VARCHAR(8), f FLOAT)")
    columns = {"a": column_type(3, NULLABLE), "b": column_type(15, NULLABLE)}
    columns["f"] = column_type(4, NULLABLE)

    def change(ts: int, op: Op, new: Any = None, old: Any = None) -> RowChange:
        image = {"a": new[0], "b": new[1], "f": 0.1} if new else None
        before = {"a": old[0], "b": old[1], "f": 0.1} if old else None
        return RowChange(ts, scratch_db, "n", op, columns, image, before)

    def table() -> list[tuple[Any, ...]]:
        return query(settings, f"SELECT a, b, COUNT(*) FROM `{scratch_db}`.`n` GROUP BY a, b")

    x, y, z = (1, "x"), (2, None), (3, "z")
    batches = [
        # Three identical rows and two more, in one transaction.
        [change(TS + 1, Op.INSERT, x)] * 3 + [change(TS + 1, Op.INSERT, y)] * 2,
        # One copy of x deleted (more copies stay: counted deletes), one y updated to z.
        [change(TS + 2, Op.DELETE, old=x), change(TS + 2, Op.UPDATE, z, y)],
        # Every copy of a held image deleted at once (the quick path).
        [change(TS + 3, Op.DELETE, old=x)] * 2 + [change(TS + 3, Op.INSERT, z)],
    ]
    wanted = [
        [(1, "x", 3), (2, None, 2)],
        [(1, "x", 2), (2, None, 1), (3, "z", 1)],
        [(2, None, 1), (3, "z", 2)],
    ]
    for offset, (batch, state) in enumerate(zip(batches, wanted, strict=True)):
        target.apply_batch(plan_batch(batch), TS + offset + 1, 0, {})
        assert sorted(table(), key=repr) == sorted(state, key=repr)


def test_a_row_the_downstream_refuses_is_named_and_the_batch_not_applied(
    pipeline: Any, scratch_db: str
) -> None:
    from config.errors import RowRefusedError

    settings, _staging, target = pipeline
    query(settings, f"CREATE TABLE `{scratch_db}`.`t` (id INT PRIMARY KEY, f FLOAT, d DATE)")
    columns = {"id": column_type(3, PK), "f": column_type(4, NULLABLE)}
    columns["d"] = column_type(10, NULLABLE)
    rows = [
        RowChange(TS + 1, scratch_db, "t", Op.INSERT, columns, {"id": 1, "f": 0.5}, None),
        RowChange(TS + 2, scratch_db, "t", Op.INSERT, columns, {"id": 2, "f": 1e39}, None),
        RowChange(TS + 2, scratch_db, "t", Op.INSERT, columns, {"id": 3, "d": "2024-02-30"}, None),
    ]
    with pytest.raises(RowRefusedError) as refused:
        target.apply_batch(plan_batch(rows), TS + 2, 0, {})
    found = sorted((r.key["id"], r.column, r.commit_ts) for r in refused.value.rows)
    assert found == [(2, "f", TS + 2), (3, "d", TS + 2)]
    assert str(refused.value).startswith(f"the downstream refuses a row of {scratch_db}.t (key id=")
    assert query(settings, f"SELECT COUNT(*) FROM `{scratch_db}`.`t`") == [(0,)]


@pytest.mark.parametrize("downstream_settings", ["tidb"], indirect=True)
def test_tidb_staging_takes_no_ddl_after_its_first_batch(
    pipeline: Any, scratch_db: str, tidb_connect: Any
) -> None:
    """TRUNCATE and CREATE are DDL jobs in TiDB (hundreds of ms each): the staging table is made
    once, and emptied inside each (small) batch's own transaction."""
    settings, _staging, target = pipeline
    _keyed_table(settings, scratch_db)

    def ddl_jobs() -> int:
        rows = query(
            settings,
            "SELECT COUNT(*) FROM information_schema.DDL_JOBS "
            f"WHERE DB_NAME = '{settings.downstream.meta_db}'",
        )
        return int(rows[0][0])

    def batch(ts: int, rows: int) -> None:
        changes = [
            RowChange(ts, scratch_db, "t", Op.INSERT, KEYED, {"id": i, "u": i, "v": "x"}, None)
            for i in range(rows)
        ]
        target.apply_batch(plan_batch(changes), ts, 0, {})

    batch(TS + 1, 10)
    made = ddl_jobs()
    assert made >= 2  # the meta database, its checkpoint table, the staging table
    batch(TS + 2, 10)
    batch(TS + 3, TRUNCATE_MIN_ROWS - 1)
    assert ddl_jobs() == made
    stages = query(
        settings,
        "SELECT TABLE_NAME FROM information_schema.TABLES "
        f"WHERE TABLE_SCHEMA = '{settings.downstream.meta_db}' AND TABLE_NAME LIKE 'stage%'",
    )
    assert len(stages) == 1
    count = query(
        settings, f"SELECT COUNT(*) FROM `{settings.downstream.meta_db}`.`{stages[0][0]}`"
    )
    assert count == [(0,)]
    assert query(settings, f"SELECT COUNT(*) FROM `{scratch_db}`.`t`") == [(TRUNCATE_MIN_ROWS - 1,)]


@pytest.mark.parametrize("downstream_settings", ["tidb"], indirect=True)
def test_a_batch_over_tidbs_memory_quota_is_applied_as_smaller_whole_batches(
    pipeline: Any, scratch_db: str, tidb_connect: Any
) -> None:
    """TiDB counts a transaction's buffer against the session's memory quota (8175) as against
    txn-total-size-limit (8004): the loop halves its batches until each fits, every batch still
    one transaction with its checkpoint, and nothing of a refused batch applied."""
    settings, staging, _ = pipeline
    quota = 4 << 20  # bytes: a few thousand of these rows per transaction

    class QuotaTarget(Target):
        def _prepare(self, cursor: Any, dialect: Any) -> None:
            # On every new connection: a reconnect keeps the quota.
            super()._prepare(cursor, dialect)
            cursor.execute(f"SET SESSION tidb_mem_quota_query = {quota}")

    query(
        settings,
        f"CREATE TABLE `{scratch_db}`.`big` (id INT PRIMARY KEY, u INT NOT NULL, v VARCHAR(200))",
    )
    feed = Feed(staging)
    transactions, size = 24, 1_000
    for n in range(transactions):
        ts = TS + 1 + n
        images = [{"id": i, "u": i, "v": "x" * 150} for i in range(n * size, (n + 1) * size)]
        rows = [RowChange(ts, scratch_db, "big", Op.INSERT, KEYED, im, None) for im in images]
        feed(rows, upto=ts)
    final = TS + transactions
    configured = settings.updated({"batch_rows": transactions * size})
    sink = SinkLoop(configured, staging, QuotaTarget(configured))
    smallest = sink.batch_rows
    for _ in range(12):
        reached = sink.run_once()
        smallest = min(smallest, sink.batch_rows)
        if reached == final:
            break
    assert reached == final
    assert smallest < transactions * size
    assert query(settings, f"SELECT COUNT(*), MAX(id) FROM `{scratch_db}`.`big`") == [
        (transactions * size, transactions * size - 1)
    ]


@ON_EVERY_SERVER
def test_an_updated_bit_column_keeps_its_value(pipeline: Any, scratch_db: str) -> None:
    # TiDB's VALUES() of a BIT column in ON DUPLICATE KEY UPDATE reverses its bytes
    # (pingcap/tidb#40653): an update must still write the value as it is.
    settings, _staging, target = pipeline
    query(settings, f"CREATE TABLE `{scratch_db}`.`bits` (id INT PRIMARY KEY, b BIT(64), s BIT(8))")
    columns = {
        "id": column_type(3, PK),
        "b": column_type(16, NULLABLE),
        "s": column_type(16, NULLABLE),
    }
    values = [5, 2**63, 0x293EFDF227A6D6BA]

    def changes(ts: int, op: Op, shift: int) -> list[RowChange]:
        return [
            RowChange(ts, scratch_db, "bits", op, columns, {"id": i, "b": v + shift, "s": i}, None)
            for i, v in enumerate(values)
        ]

    target.apply_batch(plan_batch(changes(TS + 1, Op.INSERT, 0)), TS + 1, 0, {})
    target.apply_batch(plan_batch(changes(TS + 2, Op.UPDATE, 1)), TS + 2, 0, {})
    got = query(
        settings,
        f"SELECT CAST(b AS UNSIGNED), CAST(s AS UNSIGNED) FROM `{scratch_db}`.`bits` ORDER BY id",
    )
    assert got == [(v + 1, i) for i, v in enumerate(values)]


@pytest.mark.parametrize(
    ("ddl", "refused_id", "error"),
    [
        # A CHECK constraint (MariaDB 4025), a trigger's SIGNAL, a foreign key (1452): only the
        # table has them, never its staging table.
        ("flag TINYINT UNSIGNED CHECK (flag < 251)", 2, "4025"),
        ("flag TINYINT UNSIGNED", 2, "refuses 252"),
        ("flag TINYINT UNSIGNED, FOREIGN KEY (flag) REFERENCES {db}.parent (id)", 2, "1452"),
        # A key's value longer than its column takes (strict mode's 1406).
        ("flag VARCHAR(2), UNIQUE KEY (flag)", 2, "1406"),
    ],
    ids=["check", "trigger", "foreign-key", "too-long-key"],
)
def test_a_row_only_the_table_itself_refuses_is_named_and_dead_lettered(
    pipeline: Any, scratch_db: str, ddl: str, refused_id: int, error: str
) -> None:
    from config.errors import RowRefusedError
    from spark_sink.refused import without_refused

    settings, _staging, target = pipeline
    query(settings, f"CREATE TABLE `{scratch_db}`.parent (id TINYINT UNSIGNED PRIMARY KEY)")
    query(settings, f"INSERT INTO `{scratch_db}`.parent VALUES (1), (7)")
    table = f"`{scratch_db}`.`t`"
    query(settings, f"CREATE TABLE {table} (id INT PRIMARY KEY, {ddl.format(db=scratch_db)})")
    if error == "refuses 252":
        query(
            settings,
            f"CREATE TRIGGER `{scratch_db}`.no252 BEFORE INSERT ON {table} FOR EACH ROW "
            "IF NEW.flag = 252 THEN SIGNAL SQLSTATE '45000' "
            "SET MESSAGE_TEXT = 'refuses 252'; END IF",
        )
    unsigned = NULLABLE | int(ColumnFlag.UNSIGNED)
    columns = {"id": column_type(3, PK), "flag": column_type(1, unsigned)}
    rows = [
        RowChange(TS + i, scratch_db, "t", Op.INSERT, columns, {"id": i, "flag": flag}, None)
        for i, flag in [(1, 1), (2, 252), (3, 7)]
    ]
    plans = plan_batch(rows)
    with pytest.raises(RowRefusedError) as refused:
        target.apply_batch(plans, TS + 3, 0, {})
    assert [(r.key["id"], r.commit_ts) for r in refused.value.rows] == [(refused_id, TS + 2)]
    assert error in refused.value.rows[0].error
    assert str(refused.value).startswith(
        f"the downstream refuses a row of {scratch_db}.t (key id=2"
    )
    assert query(settings, f"SELECT COUNT(*) FROM {table}") == [(0,)]
    # Dead-lettered, the row leaves the batch and the rest applies.
    without_refused(plans, refused.value.rows)
    target.apply_batch(plans, TS + 3, 0, {})
    applied = query(settings, f"SELECT id, flag FROM {table} ORDER BY id")
    assert [(i, int(flag)) for i, flag in applied] == [(1, 1), (3, 7)]
