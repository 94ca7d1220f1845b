"""A batch applied atomically with its checkpoint (spark_sink/apply_batch.py) against the real
MariaDB: a retry after a commit whose reply was lost does not apply the batch twice."""

from __future__ import annotations

from typing import Any

import pytest

from config.settings import Settings
from spark_sink.db.connection import connect
from spark_sink.target import Target

pytestmark = pytest.mark.integration

TS = 449_200_000_000_000_000


def test_a_batch_whose_commit_reply_was_lost_is_not_applied_twice(
    pipeline: Settings, scratch_db: str
) -> None:
    import pymysql

    from core.model import ColumnFlag, Op, RowChange, column_type
    from spark_sink.plan import plan_batch

    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE `{scratch_db}`.nokey (a INT, b VARCHAR(8))")
    columns = {"a": column_type(3, int(ColumnFlag.NULLABLE)), "b": column_type(15, 0)}
    rows = [
        RowChange(TS, scratch_db, "nokey", Op.INSERT, columns, {"a": i, "b": "x"}, None)
        for i in range(3)
    ]
    target = Target(pipeline)
    lost_once = []
    advance = target.checkpoints.advance

    def commit_then_lose_the_reply(*args: Any) -> None:
        advance(*args)
        # As a server killed after it wrote the commit: done, but the client hears nothing.
        if not lost_once:
            lost_once.append(True)
            target.connection().commit()
            raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server")

    target.checkpoints.advance = commit_then_lose_the_reply  # type: ignore[method-assign]
    target.apply_batch(plan_batch(rows), TS, 0, {})
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM `{scratch_db}`.nokey")
        assert cursor.fetchone() == (3,)


def test_an_avro_renamed_table_stops_naming_its_route_and_replicates_with_it(
    pipeline: Settings, scratch_db: str
) -> None:
    """TiCDC's Avro protocol writes `we`ird tab` and its columns `col`umn`, `sp ace`, `ÜniCode`
    as we_ird_tab, col_umn, sp_ace, _niCode (its DDL keeps the real names)."""
    from config.errors import SchemaDriftError
    from config.settings import parse_routes
    from core.model import ColumnFlag, Op, RowChange, column_type
    from spark_sink.plan import plan_batch
    from spark_sink.routing import Router

    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE `{scratch_db}`.`we``ird tab` (id INT PRIMARY KEY, `col``umn` "
            "VARCHAR(30), `order` INT, `sp ace` DOUBLE, `ÜniCode` VARCHAR(10))"
        )
    key = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
    columns = {
        "id": column_type(3, key),
        "col_umn": column_type(15, 0),
        "order": column_type(3, 0),
        "sp_ace": column_type(5, 0),
        "_niCode": column_type(15, 0),
    }
    image = {"id": 1, "col_umn": "a", "order": 2, "sp_ace": 0.5, "_niCode": "ü"}
    rows = [RowChange(TS, scratch_db, "we_ird_tab", Op.INSERT, columns, image, None)]
    avro = pipeline.updated({"protocol": "avro"})
    with pytest.raises(SchemaDriftError) as refused:
        Target(avro).apply_batch(plan_batch(rows), TS, 0, {})
    route = f"{scratch_db}.we_ird_tab={scratch_db}.we`ird tab"
    assert f"set TICDC_SINK_ROUTES='{route}'" in str(refused.value)
    assert "\n" not in str(refused.value)
    routed = Router(parse_routes(route))
    Target(avro, router=routed).apply_batch(plan_batch(rows), TS, 0, {})
    with connect(pipeline, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT * FROM `{scratch_db}`.`we``ird tab`")
        assert cursor.fetchall() == ((1, "a", 2, 0.5, "ü"),)
