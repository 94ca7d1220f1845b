"""How rows get into Spark: a local master reads them from a Parquet file, a cluster from Arrow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_sink.load.spark_session import is_local, spark_frame


def test_a_local_master_reads_the_same_rows_from_a_file_as_from_arrow(
    spark: Any, tmp_path: Path
) -> None:
    table = pa.Table.from_arrays(
        [
            pa.array([-(2**63), 2**63 - 1, None], pa.int64()),
            pa.array([0.1, float("-inf"), None], pa.float64()),
            pa.array(["18446744073709551615", "ü ñ 🙂", ""], pa.string()),
            pa.array([b"\x00\xff", b"", None], pa.binary()),
            pa.array([0, 1, 0], pa.int8()),
        ],
        names=["c0", "c1", "c2", "c3", "c4"],
    )
    assert is_local(spark)
    from_file = spark_frame(spark, table, str(tmp_path)).toDF("a`b", "x; DROP", "%s", "bin", "f")
    assert list(tmp_path.iterdir()), "the local path went through a file"
    from_arrow = spark.createDataFrame(table)
    assert from_file.dtypes == [
        ("a`b", "bigint"),
        ("x; DROP", "double"),
        ("%s", "string"),
        ("bin", "binary"),
        ("f", "tinyint"),
    ]
    assert [tuple(r) for r in from_file.collect()] == [tuple(r) for r in from_arrow.collect()]


def test_a_missing_jdbc_jar_is_named_before_spark_starts(tmp_path: Path) -> None:
    from config.errors import ConfigError
    from spark_sink.load.spark_session import build_spark

    missing = tmp_path / "mariadb-java-client.jar"
    with pytest.raises(ConfigError, match=f"TICDC_SINK_JDBC_JAR={missing}: no such file"):
        build_spark("local[1]", jdbc_jar=str(missing))
