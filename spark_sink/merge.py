"""Apply planned batches: bulk-load staging tables, then merge them and the checkpoint atomically.

For each table of a batch, the rows to upsert go into a staging table in the meta database (typed
like the target, every column NULL-able, plus a delete flag); so do the rows to delete when the
table has no key. Large batches are loaded by Spark over JDBC with bulk statements; small ones
over the driver's own connection (a Spark job costs ~0.2 s however small). Then ONE transaction
deletes (by key, or ``DELETE ... JOIN`` for a key-less table), runs
``INSERT ... SELECT ... ON DUPLICATE KEY UPDATE`` for every table and advances the checkpoint, so
the downstream moves from one upstream TSO to the next atomically. Re-running a batch is harmless:
staging is reloaded from scratch and the merge sets final states.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysql.converters import escape_string

from config.errors import ApplyError, TransientApplyError
from config.settings import Settings
from spark_sink.dialect import Dialect, server_dialect
from spark_sink.downstream import (
    CheckpointTable,
    Column,
    LostLeadershipError,
    bindable,
    connect,
    is_transient,
    quote,
    table_columns,
    table_name,
    with_retries,
)
from spark_sink.drift import missing_columns, missing_table
from spark_sink.local_infile import serving
from spark_sink.plan import TablePlan
from spark_sink.refused import RefusedRow, find_refused, refused_error
from spark_sink.routing import Router
from spark_sink.session import jdbc_options, spark_frame
from streams.model import Value

log = logging.getLogger("ticdc_sink.sink")

# 0 for a row to upsert; n > 0 for the n-th image to delete (a key-less table's deletes are
# staged and counted per image).
DELETE_FLAG = "_tcs_delete"
# Part of a staging table's name: a new layout of staging tables gets new tables.
STAGING_LAYOUT = "2"
# Columns of a key-less table's staging index (a selective prefix of its columns).
PROBE_PARTS = 8
# Rows per JDBC batch statement when Spark loads a staging table (5k beat 20k and 100k here).
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
# MySQL errors meaning LOAD DATA LOCAL is turned off on the server or the client.
LOCAL_INFILE_REFUSED = frozenset({1148, 2068, 3948})
# Unquoted in the CSV, the word NULL is SQL NULL (a quoted "NULL" stays a string).
CSV_NULL = "NULL"
# Staged rows from which emptying a staging table by TRUNCATE (a DDL: ~30 ms) beats DELETE.
TRUNCATE_MIN_ROWS = 20_000
# Keys per DELETE statement for tables with a key.
DELETE_CHUNK = 1_000
# Staging types loaded from an Arrow int64 (BIT, ENUM and SET stage as BIGINT UNSIGNED).
_INTEGER_STAGING = ("tinyint", "smallint", "mediumint", "int", "bigint", "year")


@dataclass
class _Staged:
    plan: TablePlan
    target: str
    stage: str
    stage_name: str
    columns: list[Column]
    # True when the table has its key downstream: deletes then run by key, never staged.
    keyed: bool
    # The staging table's rows: delete images (flags 1..n) unless keyed, then upsert images
    # (flag 0; a key-less table's image once per copy to add).
    images: list[dict[str, Value]]
    deletes: int

    def flags(self) -> list[int]:
        return [*range(1, self.deletes + 1), *[0] * (len(self.images) - self.deletes)]

    def values(self, column: Column) -> list[Value]:
        name = column.name
        return [image.get(name) for image in self.images]


def _cell(value: Value, column: Column) -> Any:
    """A staged cell: bytes for binary columns, text for the rest (MySQL parses it exactly)."""
    if value is None:
        return None
    if column.binary:
        return value if isinstance(value, bytes) else str(value).encode()
    if isinstance(value, bytes):
        return value
    return repr(value) if isinstance(value, float) else str(value)


def staging_rows(item: _Staged) -> list[tuple[Any, ...]]:
    """The staging table's rows for a load over the driver, which binds every model value type
    as it is (MySQL converts text, numbers and bytes into the staging column's type)."""
    return list(zip(*(item.values(column) for column in item.columns), item.flags(), strict=True))


def _arrow_type(column: Column) -> Any:
    import pyarrow as pa

    if column.binary:
        return pa.binary()
    if column.staging_type.startswith(_INTEGER_STAGING):
        return pa.int64()
    if column.data_type in {"float", "double"}:
        return pa.float64()
    return pa.string()


def arrow_column(column: Column, values: list[Value]) -> Any:
    """``values`` as an Arrow array typed for ``column``, built in C: ints stay ints and floats
    floats. A value that does not fit (2**64-1 in an int64, a number in a text column) sends
    the whole column as text or bytes instead, which MySQL parses exactly."""
    import pyarrow as pa

    try:
        return pa.array(values, _arrow_type(column))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        cells = [_cell(v, column) for v in values]
        as_bytes = column.binary or any(isinstance(c, bytes) for c in cells)
        return pa.array(cells, pa.binary() if as_bytes else pa.string())


def _updated_from(stage: str, column: str, bit: bool) -> str:
    """The ON DUPLICATE KEY UPDATE assignment of ``column``. A BIT column takes the number in the
    staging table ``stage`` rather than ``VALUES()``: TiDB's ``VALUES()`` of a BIT column reverses
    its bytes (pingcap/tidb#40653, open); MariaDB and MySQL take both alike."""
    name = quote(column)
    return f"{name} = {stage}.{name}" if bit else f"{name} = VALUES({name})"


class Applier:
    """Applies batches of table plans, and DDL, to the downstream of one pipeline."""

    def __init__(
        self,
        settings: Settings,
        spark_factory: Callable[[], Any] | None = None,
        router: Router | None = None,
    ) -> None:
        self.settings = settings
        self.router = router or Router()
        self.checkpoint = CheckpointTable(settings.meta_db, settings.group)
        self._spark_factory = spark_factory
        self._spark: Any = None
        self._conn: Any = None
        self._layouts: dict[tuple[str, str], list[Column]] = {}
        # The server's ways (MariaDB, MySQL, TiDB), read on connecting.
        self.dialect: Dialect | None = None
        # Every downstream column's name, generated ones too (they are no drift).
        self._names: dict[tuple[str, str], frozenset[str]] = {}
        # Small loads use LOAD DATA LOCAL; cleared (INSERT from then on) when the server refuses
        # it, as MySQL 8 does by default.
        self.load_data_local = True
        # Test hook: called between the staging load and the merge transaction's commit.
        self.before_commit: Callable[[], None] | None = None

    # --- connections ---------------------------------------------------------------------------

    def connection(self) -> Any:
        if self._conn is None or not self._conn.open:
            self._conn = connect(self.settings, local_infile=self.load_data_local)
            with self._conn.cursor() as cursor:
                self.dialect = server_dialect(cursor)
                self.checkpoint.create(cursor)
                # Multi-table DELETE resolves its alias list in the current database.
                cursor.execute(f"USE {quote(self.settings.meta_db)}")
            self._conn.commit()
        return self._conn

    def drop_connection(self) -> None:
        if self._conn is not None:
            # The connection is already broken or mid-transaction: nothing to save.
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    def spark(self) -> Any:
        if self._spark is None:
            from spark_sink.session import build_spark

            settings = self.settings
            # The group in the name tells pipelines apart on a shared cluster's pages.
            factory = self._spark_factory or (
                lambda: build_spark(
                    settings.spark_master,
                    f"ticdc-sink-{settings.group}",
                    settings.jdbc_jar,
                    pipeline=settings.group,
                )
            )
            self._spark = factory()
        return self._spark

    def forget_layouts(self) -> None:
        """Drop cached table layouts (after a DDL)."""
        self._layouts.clear()
        self._names.clear()

    # --- applying ------------------------------------------------------------------------------

    def apply(
        self, plans: Sequence[TablePlan], resolved_ts: int, epoch: int, offsets: dict[str, int]
    ) -> int:
        """Apply a batch and advance the checkpoint to ``resolved_ts``; returns rows merged."""

        retried = False

        def attempt() -> int:
            nonlocal retried
            try:
                # A connection lost while committing leaves the commit in doubt (a server
                # killed after writing it): re-running a committed batch would add a key-less
                # table's rows twice, so a retry first asks the checkpoint.
                if retried and self.committed_upto(resolved_ts):
                    return 0
                retried = True
                return self._apply_once(plans, resolved_ts, epoch, offsets)
            except Exception:
                self.drop_connection()
                raise

        try:
            return with_retries(attempt, f"batch up to {resolved_ts}")
        except Exception as error:
            if isinstance(error, LostLeadershipError | TransientApplyError) or is_transient(error):
                raise
            # Perhaps a value the downstream refuses: find the rows, or it was something else.
            refused = self.refused_rows(plans)
            if not refused:
                raise
            raise refused_error(refused) from error

    def refused_rows(self, plans: Sequence[TablePlan]) -> list[RefusedRow]:
        """Every row of ``plans`` the downstream refuses, tried one by one (nothing stays)."""
        conn = self.connection()
        refused = []
        with conn.cursor() as cursor:
            for plan in plans:
                try:
                    item = self._prepare(cursor, plan)
                except ApplyError:
                    continue  # a missing table fails the batch for another reason
                if item is not None:
                    refused += find_refused(
                        cursor, plan, item.stage, item.columns, item.target, {DELETE_FLAG: 0}
                    )
        return refused

    def committed_upto(self, resolved_ts: int) -> bool:
        """Whether the downstream checkpoint has reached ``resolved_ts``."""
        conn = self.connection()
        with conn.cursor() as cursor:
            found = self.checkpoint.read(cursor)
        conn.commit()
        return found is not None and found.resolved_ts >= resolved_ts

    def _apply_once(
        self, plans: Sequence[TablePlan], resolved_ts: int, epoch: int, offsets: dict[str, int]
    ) -> int:
        conn = self.connection()
        cursor = conn.cursor()
        staged = [self._prepare(cursor, plan) for plan in plans]
        staged = [s for s in staged if s is not None]
        for item in staged:
            # Staging tables are emptied after each batch; this clears what a crash left behind.
            cursor.execute(f"DELETE FROM {item.stage}")
        # Commit the clean-up: Spark's own connections load next and must not wait on its locks.
        conn.commit()
        for item in staged:
            # Each Spark load is a job of its own (~0.3-0.5 s here): only big tables pay it back.
            if len(item.images) >= self.settings.spark_min_rows:
                self._load_with_spark(item)
            else:
                self._load_directly(cursor, item)
        merged = sum(self._merge(cursor, item) for item in staged)
        self.checkpoint.advance(cursor, resolved_ts, epoch, offsets)
        if self.before_commit is not None:
            self.before_commit()
        conn.commit()
        for item in staged:
            # TRUNCATE is a DDL (an implicit commit and ~30 ms); only worth it for big loads.
            if len(item.images) >= TRUNCATE_MIN_ROWS:
                cursor.execute(f"TRUNCATE TABLE {item.stage}")
            elif item.images:
                cursor.execute(f"DELETE FROM {item.stage}")
        conn.commit()
        return merged

    def _prepare(self, cursor: Any, plan: TablePlan) -> _Staged | None:
        routed = self.router.route(plan.schema, plan.table)
        if routed is None:
            return None
        schema, table = routed
        columns = self._layouts.get(routed)
        if columns is None:
            every = table_columns(cursor, schema, table)
            if not every:
                missing_table(self.settings, plan, f"{schema}.{table}")
                return None
            self._names[routed] = frozenset(c.name for c in every)
            columns = self._layouts[routed] = [c for c in every if not c.generated]
        missing_columns(self.settings, plan, f"{schema}.{table}", self._names[routed])
        present = {c.name for c in columns}
        keyed = plan.has_key and all(k in present for k in plan.key_columns)
        indexed = None if plan.has_key else self._probe_columns(plan, columns)
        stage_name = self._stage_table(cursor, schema, table, columns, indexed)
        staged_deletes = [] if keyed else list(plan.deletes.values())
        upserts = list(plan.upserts.values())
        if plan.keyless:
            copies = plan.copies
            upserts = [image for key, image in plan.upserts.items() for _ in range(copies[key])]
        return _Staged(
            plan,
            table_name(schema, table),
            table_name(self.settings.meta_db, stage_name),
            stage_name,
            columns,
            keyed,
            [*staged_deletes, *upserts],
            len(staged_deletes),
        )

    @staticmethod
    def _probe_columns(plan: TablePlan, columns: list[Column]) -> list[Column] | None:
        """For a table without a key: the staging columns to index, so that the DELETE JOIN
        scans the target once and probes the staged rows instead of comparing all pairs."""
        by_name = {c.name: c for c in columns}
        candidates = [by_name[k] for k in plan.key_columns if k in by_name]
        return candidates[:PROBE_PARTS] or None

    def _stage_table(
        self,
        cursor: Any,
        schema: str,
        table: str,
        columns: list[Column],
        indexed: list[Column] | None = None,
    ) -> str:
        layout = "\x00".join(f"{c.name}\x01{c.staging_type}" for c in columns)
        probe = ",".join(c.name for c in indexed) if indexed else ""
        identity = f"{schema}\x00{table}\x00{layout}\x00{probe}\x00{STAGING_LAYOUT}"
        digest = hashlib.sha1(identity.encode()).hexdigest()[:16]
        name = f"stage_{self.settings.group}_{digest}"[:64]
        definition = ", ".join(f"{quote(c.name)} {c.staging_type} NULL" for c in columns)
        index = ""
        if indexed is not None:
            index = f", KEY tcs_probe ({', '.join(c.index_part() for c in indexed)})"
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {table_name(self.settings.meta_db, name)} "
            f"({definition}, {quote(DELETE_FLAG)} INT UNSIGNED NOT NULL{index}) ENGINE=InnoDB"
        )
        return name

    def _load_directly(self, cursor: Any, item: _Staged) -> None:
        if not item.images:
            return
        if self.load_data_local:
            try:
                self._load_data(cursor, item)
                return
            except pymysql.MySQLError as error:
                if not error.args or error.args[0] not in LOCAL_INFILE_REFUSED:
                    raise
                log.warning("the downstream refuses LOAD DATA LOCAL (%s): INSERT instead", error)
                self.load_data_local = False
        names = ", ".join(quote(c.name) for c in item.columns) + f", {quote(DELETE_FLAG)}"
        marks = ", ".join(["%s"] * (len(item.columns) + 1))
        cursor.executemany(
            bindable(f"INSERT INTO {item.stage} ({names})") + f" VALUES ({marks})",
            staging_rows(item),
        )

    @staticmethod
    def _load_data(cursor: Any, item: _Staged) -> None:
        """Load the staging table from a CSV file that Arrow writes in C: no per-value escaping
        in Python. Binary cells travel as hex (CSV is text) and are unhexed by the server."""
        import pyarrow as pa
        import pyarrow.csv as csv

        arrays, targets, assignments = [], [], []
        for index, column in enumerate(item.columns):
            values = item.values(column)
            array = arrow_column(column, values)
            if pa.types.is_binary(array.type):
                cells = (_cell(v, column) for v in values)
                array = pa.array([None if c is None else c.hex() for c in cells], pa.string())
                targets.append(f"@h{index}")
                assignments.append(f"{quote(column.name)} = UNHEX(@h{index})")
            else:
                targets.append(quote(column.name))
            arrays.append(array)
        arrays.append(pa.array(item.flags(), pa.int32()))
        targets.append(quote(DELETE_FLAG))
        table = pa.Table.from_arrays(arrays, names=[str(i) for i in range(len(arrays))])
        options = csv.WriteOptions(
            include_header=False, quoting_style="all_valid", null_string=CSV_NULL
        )
        with (
            tempfile.NamedTemporaryFile(suffix=".csv") as file,
            serving(cursor.connection, file.name),
        ):
            csv.write_csv(table, file.name, options)
            assign = f" SET {', '.join(assignments)}" if assignments else ""
            # No bound parameters: a '%' in an identifier stays as it is.
            loaded = cursor.execute(
                f"LOAD DATA LOCAL INFILE '{escape_string(file.name)}' INTO TABLE {item.stage} "
                "CHARACTER SET utf8mb4 "
                "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '' "
                f"LINES TERMINATED BY '\\n' ({', '.join(targets)}){assign}"
            )
        # LOCAL loads turn what strict mode would refuse (a value too long, a bad date) into
        # warnings and store a clipped value: refuse the batch as an INSERT would.
        cursor.execute("SHOW WARNINGS")
        problems = [w for w in cursor.fetchall() if w[0] != "Note"]
        if problems or loaded != len(item.images):
            shown = "; ".join(f"{code} {message}" for _, code, message in problems[:3])
            raise ApplyError(
                f"loading {item.plan.schema}.{item.plan.table} ({loaded} of {len(item.images)} "
                f"rows): {shown or 'rows missing'}"
            )

    def _load_with_spark(self, item: _Staged) -> None:
        import pyarrow as pa

        if not item.images:
            return
        arrays = [arrow_column(column, item.values(column)) for column in item.columns]
        arrays.append(pa.array(item.flags(), pa.int32()))
        names = [c.name for c in item.columns] + [DELETE_FLAG]
        # Positional names in Arrow and Parquet; the real ones (any characters) only in Spark.
        table = pa.Table.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])
        with tempfile.TemporaryDirectory(prefix="ticdc-sink-spark-") as scratch:
            frame = spark_frame(self.spark(), table, scratch).toDF(*names)
            self._write_jdbc(item, frame)

    def _write_jdbc(self, item: _Staged, frame: Any) -> None:
        options = jdbc_options(self.settings.downstream, self.settings.meta_db)
        if self.dialect is not None:
            options.update(self.dialect.spark_write_options())
        try:
            (
                frame.write.format("jdbc")
                .options(**options, dbtable=quote(item.stage_name), batchsize=str(JDBC_BATCH_SIZE))
                .mode("append")
                .save()
            )
        except Exception as error:
            if any(marker in str(error) for marker in LOST_CONNECTION_MARKERS):
                raise TransientApplyError(
                    f"Spark load of {item.stage} lost its connection"
                ) from error
            if any(marker in str(error) for marker in LOST_EXECUTOR_MARKERS):
                raise TransientApplyError(f"Spark load of {item.stage} lost an executor") from error
            raise

    def _merge(self, cursor: Any, item: _Staged) -> int:
        plan = item.plan
        present = {c.name for c in item.columns}
        keys = [k for k in plan.key_columns if k in present] or [c.name for c in item.columns]
        merged = 0
        if plan.deletes and item.keyed:
            merged += self._delete_by_key(cursor, item)
        elif plan.deletes:
            merged += self._delete_images(cursor, item, keys)
        if plan.upserts:
            wanted = set(plan.columns)
            columns = [c.name for c in item.columns if c.name in wanted]
            names = ", ".join(quote(c) for c in columns)
            bits = {c.name for c in item.columns if c.data_type == "bit"}
            updates = ", ".join(_updated_from(item.stage, c, c in bits) for c in columns)
            merged += cursor.execute(
                f"INSERT INTO {item.target} ({names}) SELECT {names} FROM {item.stage} "
                f"WHERE {quote(DELETE_FLAG)} = 0 ON DUPLICATE KEY UPDATE {updates}"
            )
        return merged

    @staticmethod
    def _delete_images(cursor: Any, item: _Staged, keys: list[str]) -> int:
        """Delete the staged images (flags 1..n): all copies of each when the table has a key
        or when that removes exactly the copies the plan counts (the common case: no
        identical rows), else, for a key-less table, just that many copies of each image."""
        # A table keyed by all its columns may hold NULLs: null-safe equality.
        join = " AND ".join(f"t.{quote(k)} <=> s.{quote(k)}" for k in keys)
        flag = f"s.{quote(DELETE_FLAG)}"
        delete_all = f"DELETE t FROM {item.target} AS t JOIN {item.stage} AS s ON {join} WHERE "
        plan = item.plan
        if not plan.keyless:
            return int(cursor.execute(delete_all + f"{flag} > 0"))
        counts = [plan.copies[key] for key in plan.deletes]
        cursor.execute("SAVEPOINT tcs_copies")
        deleted = int(cursor.execute(delete_all + f"{flag} > 0"))
        if deleted <= sum(counts):
            return deleted
        # Some image has more copies downstream than the batch deletes: count them, delete
        # every copy of the others, and just the counted copies of those (one scan each).
        cursor.execute("ROLLBACK TO SAVEPOINT tcs_copies")
        cursor.execute(
            f"SELECT {flag}, COUNT(*) FROM {item.target} AS t JOIN {item.stage} AS s ON {join} "
            f"WHERE {flag} > 0 GROUP BY {flag}"
        )
        held = {int(n): int(copies) for n, copies in cursor.fetchall()}
        whole = [n for n, count in enumerate(counts, 1) if held.get(n, 0) <= count]
        deleted = 0
        for start in range(0, len(whole), DELETE_CHUNK):
            chunk = ", ".join(str(n) for n in whole[start : start + DELETE_CHUNK])
            deleted += cursor.execute(delete_all + f"{flag} IN ({chunk})")
        target = item.target
        match = " AND ".join(f"{target}.{quote(k)} <=> s.{quote(k)}" for k in keys)
        for n, count in enumerate(counts, 1):
            if held.get(n, 0) > count:
                deleted += cursor.execute(
                    f"DELETE FROM {target} WHERE EXISTS (SELECT 1 FROM {item.stage} AS s "
                    f"WHERE {flag} = {n} AND {match}) LIMIT {count}"
                )
        return deleted

    @staticmethod
    def _delete_by_key(cursor: Any, item: _Staged) -> int:
        """Delete the plan's keys with bound values, a chunk per statement: cheaper than staging
        them, and the key index finds each row (key columns are never NULL)."""
        keys = item.plan.key_columns
        if len(keys) == 1:
            match, one = bindable(quote(keys[0])), "%s"
        else:
            match = bindable("(" + ", ".join(quote(k) for k in keys) + ")")
            one = "(" + ", ".join(["%s"] * len(keys)) + ")"
        pending = list(item.plan.deletes)
        deleted = 0
        for start in range(0, len(pending), DELETE_CHUNK):
            chunk = pending[start : start + DELETE_CHUNK]
            marks = ", ".join([one] * len(chunk))
            deleted += cursor.execute(
                f"DELETE FROM {bindable(item.target)} WHERE {match} IN ({marks})",
                [value for key in chunk for value in key],
            )
        return deleted
