"""The ways a table's rows are loaded, behind one protocol, and the policy that picks one.

LOAD DATA LOCAL sends CSV written in one native pass (in memory) over the sink's own
connection; INSERT binds the rows over it; Spark's JDBC writer loads big tables from its
executors on connections of their own (a Spark job has a fixed cost however small, which only
big tables pay back). Those three fill a staging table that the merge then upserts from. Where
that equals an upsert (:func:`in_place`), LOAD DATA LOCAL loads a table's upserts straight into
it, in the batch's transaction: REPLACE for a keyed table, a plain append of a key-less table's
copies (whose deletes still go through the staging table).
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from pymysql.constants import SERVER_STATUS
from pymysql.converters import escape_string

from config.errors import ApplyError, TransientApplyError
from config.settings import Downstream
from core.model import Value
from core.sql import quote
from spark_sink.db.dialect import Dialect, bindable
from spark_sink.db.local_infile import serving
from spark_sink.db.tables import Column, TableFacts
from spark_sink.load.csv_rows import csv_rows
from spark_sink.load.staged import DELETE_FLAG, StagedTable, arrow_column, cell, staging_rows
from spark_sink.plan import TablePlan

log = logging.getLogger("ticdc_sink.sink")

# The file name a local load asks for: the rows are served from memory under it.
LOCAL_NAME = "ticdc-sink-rows.csv"
# Rows per JDBC batch statement when Spark loads a staging table (bigger ones loaded slower:
# docs/benchmarks.md).
JDBC_BATCH_SIZE = 5_000
# Connector/J's words for a connection that was cut or refused: a Spark load failing so retries.
LOST_CONNECTION_MARKERS = (
    "SQLNonTransientConnectionException",
    "SQLTransientConnectionException",
    "Connection reset",
    "Communications link failure",
    "Could not connect",
    "Connection refused",
)
# Spark's words for a load whose executor died under it (a killed JVM, a lost worker).
LOST_EXECUTOR_MARKERS = ("ExecutorLostFailure",)


# Up to this many rows, a table's upserts loaded in place go as one statement with the values
# written in, sent with other tables' in one round trip: a LOAD DATA costs two round trips and
# a server-side file, which only a bigger table pays back.
VALUES_MAX_ROWS = 64
# Bytes of statements sent in one round trip (well under any server's max_allowed_packet); a
# table's statement larger than this loads by LOAD DATA instead.
SCRIPT_BYTES = 1 << 20

# The summary a server sends after LOAD DATA.
_LOAD_INFO = re.compile(r"Records: (\d+)\s+Deleted: \d+\s+Skipped: (\d+)")


class LoadPath(StrEnum):
    """How a table's rows are loaded."""

    SPARK = "spark"
    IN_PLACE = "in-place"
    LOAD_DATA = "load-data"
    INSERT = "insert"


def load_path(
    rows: int, spark_min_rows: int, load_data_local: bool, in_place: bool = False
) -> LoadPath:
    """The way to load a table's ``rows`` rows. Where the server and the sink allow LOAD DATA
    LOCAL (``load_data_local``) and the rows may load straight into the table (``in_place``),
    that: any staging table is more work for the downstream (its merge alone costs what the
    load in place does), however many executors fill it. Else into a staging table: by Spark
    from ``spark_min_rows`` rows (TICDC_SINK_SPARK_MIN_ROWS), else LOAD DATA LOCAL where
    allowed, else INSERT."""
    if load_data_local and in_place:
        return LoadPath.IN_PLACE
    if rows >= spark_min_rows:
        return LoadPath.SPARK
    return LoadPath.LOAD_DATA if load_data_local else LoadPath.INSERT


def in_place(plan: TablePlan, keyed: bool, target: list[Column], facts: TableFacts) -> bool:
    """Whether a batch's upserts of a table (``plan``) may load straight into it, the same as
    upserting them from a staging table. Only when the batch sets every column the table stores
    (``target``; a loaded row keeps nothing of an old one), and then:

    - a table with its key downstream (``keyed``) replaces rows when that key is its primary or
      a unique key and no foreign key or trigger sees the replace as a delete. Other unique keys
      may be taken by rows the batch moves away: a replace removes those rows, which the batch
      then writes again, where an upsert would overwrite the wrong row;
    - a table without a key upstream appends its rows' copies when it has no unique key
      downstream either (an upsert of such a table only ever inserts)."""
    if not all(column.name in plan.columns for column in target):
        return False
    if keyed:
        if facts.referenced or facts.triggers:
            return False
        return frozenset(plan.key_columns) in facts.unique_keys
    return plan.keyless and not facts.unique_keys


class Loader(Protocol):
    """Fills an emptied staging table with a table's staged rows."""

    def load(self, cursor: Any, item: StagedTable) -> None: ...


class InsertLoader:
    """Binds the rows into multi-row INSERTs over the sink's connection (in its transaction)."""

    def load(self, cursor: Any, item: StagedTable) -> None:
        names = ", ".join(quote(c.name) for c in item.columns) + f", {quote(DELETE_FLAG)}"
        marks = ", ".join(["%s"] * (len(item.columns) + 1))
        cursor.executemany(
            bindable(f"INSERT INTO {item.stage} ({names})") + f" VALUES ({marks})",
            staging_rows(item),
        )


@dataclass(frozen=True)
class LoadDataLoader:
    """Sends a CSV file over the sink's connection (in its transaction): no per-value escaping
    in Python. Binary cells travel as hex (CSV is text) and are unhexed by the server."""

    dialect: Dialect

    def load(self, cursor: Any, item: StagedTable) -> None:
        load_csv(cursor, self.dialect, item, into_target=False)


def loader(
    path: LoadPath, dialect: Dialect, spark: Callable[[], Any], downstream: Downstream, meta_db: str
) -> Loader:
    """The loader that loads by ``path`` (Spark's into ``meta_db`` of ``downstream``)."""
    if path is LoadPath.SPARK:
        return SparkLoader(spark, downstream, meta_db, dialect)
    if path is LoadPath.LOAD_DATA:
        return LoadDataLoader(dialect)
    return InsertLoader()


def load_in_place(cursor: Any, dialect: Dialect, item: StagedTable) -> int:
    """LOAD DATA LOCAL of ``item``'s upserts straight into its target (in the batch's
    transaction): REPLACE for a keyed table, an append for a key-less one; returns the rows."""
    return load_csv(cursor, dialect, item.only_upserts(), into_target=True)


def load_csv(cursor: Any, dialect: Dialect, item: StagedTable, into_target: bool) -> int:
    """Write ``item``'s images as CSV and LOAD DATA LOCAL them: into its staging table with
    their delete flags, or (``into_target``) into its target, which has no flag column,
    replacing rows by key when the table is keyed; returns the rows loaded."""
    table = item.target if into_target else item.stage
    rows, hexed = csv_rows(item.images, item.columns, None if into_target else item.flags())
    targets, assignments = [], []
    for index, (column, as_hex) in enumerate(zip(item.columns, hexed, strict=True)):
        if as_hex:
            targets.append(f"@h{index}")
            assignments.append(f"{quote(column.name)} = UNHEX(@h{index})")
        elif into_target and column.by_number:
            # Straight into the target: the CSV's text would be the BIT's bytes, the ENUM's name.
            targets.append(f"@n{index}")
            assignments.append(f"{quote(column.name)} = CAST(@n{index} AS UNSIGNED)")
        else:
            targets.append(quote(column.name))
    if not into_target:
        targets.append(quote(DELETE_FLAG))
    # The rows never touch the disk: the connection sends them when the server asks for the name.
    with serving(cursor.connection, LOCAL_NAME, rows):
        # No bound parameters: a '%' in an identifier stays as it is.
        affected = cursor.execute(
            dialect.load_data_local(
                LOCAL_NAME, table, targets, assignments, into_target and item.keyed
            )
        )
    loaded, skipped = _loaded(cursor.connection.info, affected)
    # LOCAL loads turn what strict mode would refuse (a value too long, a bad date) into
    # warnings and store a clipped value: refuse the batch as an INSERT would.
    problems = []
    if cursor.warning_count:
        cursor.execute("SHOW WARNINGS")
        problems = [w for w in cursor.fetchall() if w[0] != "Note"]
    if problems or skipped or loaded != len(item.images):
        shown = "; ".join(f"{code} {message}" for _, code, message in problems[:3])
        raise ApplyError(
            f"loading {item.plan.schema}.{item.plan.table} ({loaded} of {len(item.images)} "
            f"rows): {shown or 'rows missing'}"
        )
    return loaded


def values_statement(cursor: Any, item: StagedTable) -> str | None:
    """``item``'s upserts loaded in place (see :func:`load_in_place`) as one REPLACE (keyed)
    or INSERT (an append of a key-less table's copies) with every value written in as the CSV
    would carry it (:func:`_literal`); None when the table has more than
    :data:`VALUES_MAX_ROWS` such rows or the statement would pass :data:`SCRIPT_BYTES`."""
    images = item.images[item.deletes :]
    if len(images) > VALUES_MAX_ROWS:
        return None
    quote_text = _text_quoter(cursor.connection)
    rows = []
    size = 0
    for image in images:
        cells = [_literal(image.get(c.name), c, quote_text) for c in item.columns]
        row = f"({', '.join(cells)})"
        size += len(row)
        if size > SCRIPT_BYTES:
            return None
        rows.append(row)
    verb = "REPLACE" if item.keyed else "INSERT"
    names = ", ".join(quote(c.name) for c in item.columns)
    return f"{verb} INTO {item.target} ({names}) VALUES {', '.join(rows)}"


def _text_quoter(connection: Any) -> Callable[[str], str]:
    """How text is quoted on ``connection``: a server in NO_BACKSLASH_ESCAPES mode takes a
    backslash as it is and only a doubled quote."""
    if connection.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES:
        return lambda text: "'" + text.replace("'", "''") + "'"
    return lambda text: "'" + escape_string(text) + "'"


def _literal(value: Value, column: Column, quote_text: Callable[[str], str]) -> str:
    """A value of ``column`` written into a statement as the CSV carries its cell
    (:func:`~spark_sink.load.staged.cell`): bytes as a hex literal, the rest as quoted text,
    cast to a number for BIT, ENUM and SET as the CSV's load casts it; an integer as it is
    (a number, which BIT, ENUM and SET take by value)."""
    if value is None:
        return "NULL"
    if type(value) is int and not column.binary:
        return str(value)
    found = cell(value, column)
    written = f"X'{found.hex()}'" if isinstance(found, bytes) else quote_text(found)
    return f"CAST({written} AS UNSIGNED)" if column.by_number else written


def run_statements(cursor: Any, dialect: Dialect, statements: list[str]) -> None:
    """Run ``statements`` in order, as many to a round trip as :data:`SCRIPT_BYTES` allows
    (:func:`scripts`), under a strict session (a lax server's warnings and clipped values
    become errors, as :func:`load_csv` makes them); the first failure is raised and the rest
    do not run."""
    for script in scripts(statements, SCRIPT_BYTES):
        session = dialect.strict_session()
        cursor.execute(";".join([*session, *dialect.script(script), dialect.restore_session()]))
        while cursor.nextset():
            pass


def scripts(statements: list[str], limit: int) -> list[list[str]]:
    """``statements`` in order, in runs of at most ``limit`` bytes (a longer one alone)."""
    runs: list[list[str]] = []
    size = 0
    for statement in statements:
        if not runs or size + len(statement) > limit:
            runs.append([])
            size = 0
        runs[-1].append(statement)
        size += len(statement) + 1
    return runs


def _loaded(info: str, affected: int) -> tuple[int, int]:
    """The rows a LOAD DATA read and skipped, from the server's summary (a replaced row counts
    twice in the affected rows), or the affected rows when the server sent no summary."""
    found = _LOAD_INFO.search(info)
    if found is None:
        return affected, 0
    return int(found.group(1)), int(found.group(2))


@dataclass(frozen=True)
class SparkLoader:
    """Loads through Spark's JDBC writer; its executors commit on connections of their own."""

    spark: Callable[[], Any]
    downstream: Downstream
    meta_db: str
    dialect: Dialect

    def load(self, cursor: Any, item: StagedTable) -> None:
        import pyarrow as pa

        from spark_sink.load.spark_session import jdbc_options, spark_frame

        arrays = [arrow_column(column, item.values(column)) for column in item.columns]
        arrays.append(pa.array(item.flags(), pa.int32()))
        names = [c.name for c in item.columns] + [DELETE_FLAG]
        # Positional names in Arrow and Parquet; the real ones (any characters) only in Spark.
        table = pa.Table.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])
        options = jdbc_options(self.downstream, self.meta_db, self.dialect.jdbc_batching())
        options |= self.dialect.spark_write_options()
        with tempfile.TemporaryDirectory(prefix="ticdc-sink-spark-") as scratch:
            frame = spark_frame(self.spark(), table, scratch).toDF(*names)
            try:
                (
                    frame.write.format("jdbc")
                    .options(
                        **options, dbtable=quote(item.stage_name), batchsize=str(JDBC_BATCH_SIZE)
                    )
                    .mode("append")
                    .save()
                )
            except Exception as error:
                if any(marker in str(error) for marker in LOST_CONNECTION_MARKERS):
                    raise TransientApplyError(
                        f"Spark load of {item.stage} lost its connection"
                    ) from error
                if any(marker in str(error) for marker in LOST_EXECUTOR_MARKERS):
                    raise TransientApplyError(
                        f"Spark load of {item.stage} lost an executor"
                    ) from error
                raise
