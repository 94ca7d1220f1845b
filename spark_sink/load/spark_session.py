"""The Spark session the sink runs on: UTC everywhere and MariaDB Connector/J on the classpath.

The sink is always the driver (client mode); the executors may run anywhere Spark's master puts
them, in JVMs that see neither the driver's files nor its class path."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from config.errors import ConfigError
from config.settings import default_of, env_name
from spark_sink.db.dialect import JDBC_BULK_STATEMENTS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from config.settings import Downstream

JDBC_DRIVER = "org.mariadb.jdbc.Driver"
# Spark's default of 200 shuffle partitions is far too many for micro-batches on a few cores.
SHUFFLE_PARTITIONS = 4
# Attempts Spark makes at a task before it fails the job (its default on a cluster is 4).
TASK_ATTEMPTS = 1
_UTC_JAVA_OPTIONS = "-Duser.timezone=UTC"
# The JVM's logging: WARN and above, in the sink's own line format (Spark's default is INFO).
LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")


def build_spark(
    master: str,
    app_name: str = "ticdc-sink",
    jdbc_jar: str = default_of("jdbc_jar"),
    pipeline: str = "-",
) -> SparkSession:
    """A Spark session on ``master`` whose JVMs, SQL session and JDBC all run in UTC, and whose
    JVM logs WARN and above only, its lines naming ``pipeline``.

    Connector/J (``jdbc_jar``, a file on the driver's machine) reaches the executors through
    ``spark.jars``: the driver serves it to them, so a cluster's machines need no copy of their
    own (an executor class path naming the driver's path would only hold where they share it).
    """
    if not Path(jdbc_jar).is_file():
        raise ConfigError(
            f"{env_name('jdbc_jar')}={jdbc_jar}: no such file; Spark's JDBC loads need MariaDB "
            "Connector/J there (Debian: apt-get install libmariadb-java)"
        )
    from pyspark.sql import SparkSession

    os.environ.setdefault("TZ", "UTC")
    # Only the driver's JVM (the sink's own output) is quieted. Executors log to their cluster
    # worker's folders with Spark's defaults, the task lines a cluster's operator reads there;
    # a file path of the sink's machine would not exist on a remote executor anyway.
    driver_options = (
        f"{_UTC_JAVA_OPTIONS} -Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()} "
        f"-Dticdc.pipeline={pipeline}"
    )
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars", jdbc_jar)
        .config("spark.driver.extraClassPath", jdbc_jar)
        .config("spark.driver.extraJavaOptions", driver_options)
        .config("spark.executor.extraJavaOptions", _UTC_JAVA_OPTIONS)
        .config("spark.sql.session.timeZone", "UTC")
        # A retried task may have committed its rows once already (its executor lost after the
        # JDBC commit), doubling them in the staging table: the sink re-runs the batch from an
        # emptied staging table instead, as on a local master, where Spark never retries.
        .config("spark.task.maxFailures", str(TASK_ATTEMPTS))
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def is_local(spark: SparkSession) -> bool:
    """Whether the executors run in the driver's process, so they see its files."""
    return str(spark.sparkContext.master).startswith("local")


def spark_frame(spark: SparkSession, table: pa.Table, scratch: str) -> DataFrame:
    """``table`` as a Spark DataFrame, valid while the directory ``scratch`` exists.

    Local executors read it from a Parquet file there, which loads over JDBC faster than
    ``createDataFrame``, whose Arrow batches travel as task data through the Python-JVM socket
    (docs/benchmarks.md). On a cluster, ``createDataFrame`` it is.
    """
    if not is_local(spark):
        return spark.createDataFrame(table)
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema

    path = str(Path(scratch) / "rows.parquet")
    pq.write_table(table, path, compression="none")
    # An explicit schema spares Spark a job that reads the file's footer.
    return spark.read.schema(from_arrow_schema(table.schema)).parquet(path)


def jdbc_options(
    downstream: Downstream, database: str, batching: str = JDBC_BULK_STATEMENTS
) -> dict[str, str]:
    """Connector/J options for Spark: ``batching`` (the dialect's way to send a batch),
    TINYINT(1) read as a number, the downstream's TLS, and no LOAD DATA LOCAL (Spark never
    sends files; a server asking gets none).

    Into MariaDB useBulkStmts alone loads several times faster than rewriteBatchedStatements,
    and with both the rewrite wins (docs/benchmarks.md).
    """
    from spark_sink.db.tls import jdbc_tls

    return {
        "url": downstream.jdbc_url(database)
        + f"?{batching}&tinyInt1isBit=false"
        + "&serverTimezone=UTC&sessionVariables=time_zone='+00:00'&allowLocalInfile=false",
        "driver": JDBC_DRIVER,
        "user": downstream.user,
        "password": downstream.password.get_secret_value(),
        **jdbc_tls(downstream),
    }
