"""A seeded upstream history for end-to-end runs: DDL, transactions, and the state they leave.

Three tables in ``shop``: ``customers`` (primary key plus a NOT NULL unique email that changes now
and then), ``orders`` (primary-key changes, DECIMAL, DATETIME(6), binary, a column added mid-stream
and, with ``drop_column``, one dropped later), and ``events`` (no key at all). With
``table_changes`` also ``accounts`` and ``ledger`` in a second database, ``shop_b``, which is
dropped, then made again with ``accounts`` alone. Transactions hold 1-50 row changes. The model
of the tables after every change is the expected downstream state.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from core.model import ColumnFlag, ColumnType, DDLEvent, Op, RowChange, Value, column_type

KEY = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
NOT_NULL_UNIQUE = int(ColumnFlag.UNIQUE_KEY)
NULLABLE = int(ColumnFlag.NULLABLE)
SCHEMA = "shop"
# TSOs: physical milliseconds << 18, as TiDB's; this one is 2024-01-01.
START_TS = 1_704_067_200_000 << 18

TABLE_DDL = {
    "customers": "CREATE TABLE {schema}.customers (id INT PRIMARY KEY, email VARCHAR(64) NOT NULL "
    "UNIQUE, name VARCHAR(64), score DOUBLE, big BIGINT UNSIGNED)",
    "orders": "CREATE TABLE {schema}.orders (id BIGINT PRIMARY KEY, customer INT, amount "
    "DECIMAL(20,2), note VARCHAR(64), created DATETIME(6), flag TINYINT UNSIGNED, "
    "tag VARBINARY(16))",
    "events": "CREATE TABLE {schema}.events (kind VARCHAR(16), detail VARCHAR(64), at DATE)",
}
ADD_COLUMN = "ALTER TABLE {schema}.orders ADD COLUMN extra VARCHAR(8)"
# With ``table_changes``: customers renamed, orders truncated, events dropped and made again with
# another layout (a column more).
RENAMED = "clients"
RENAME_TABLE = "RENAME TABLE {schema}.customers TO {schema}.clients"
TRUNCATE_TABLE = "TRUNCATE TABLE {schema}.orders"
DROP_TABLE = "DROP TABLE {schema}.events"
EVENTS_AGAIN = "CREATE TABLE {schema}.events (kind VARCHAR(16), detail VARCHAR(64), at DATE, n INT)"
# With ``table_changes``: a second database and two tables, made a fifth of the way, the database
# dropped four fifths of the way (its tables' topics then get no checkpoint) and made again nine
# tenths of the way with one of them, which has a column more (its topic gets them again).
SECOND_DATABASE = "{schema}_b"
SECOND_TABLES = ("accounts", "ledger")
SECOND_TABLE = "CREATE TABLE {database}.{table} (id INT PRIMARY KEY, balance BIGINT)"
ACCOUNTS_AGAIN = (
    "CREATE TABLE {database}.accounts (id INT PRIMARY KEY, balance BIGINT, note VARCHAR(16))"
)
ACTION_CREATE_SCHEMA = 1
ACTION_DROP_SCHEMA = 2
ACTION_CREATE_TABLE = 3
ACTION_DROP_TABLE = 4
ACTION_TRUNCATE_TABLE = 11
ACTION_RENAME_TABLE = 14
DROP_COLUMN = "ALTER TABLE {schema}.orders DROP COLUMN note"
# TiDB's DDL action codes (parser/model ActionType).
ACTION_ADD_COLUMN = 5
ACTION_DROP_COLUMN = 6
COLUMNS: dict[str, dict[str, ColumnType]] = {
    "customers": {
        "id": column_type(3, KEY),
        "email": column_type(15, NOT_NULL_UNIQUE),
        "name": column_type(15, NULLABLE),
        "score": column_type(5, NULLABLE),
        "big": column_type(8, NULLABLE | int(ColumnFlag.UNSIGNED)),
    },
    "orders": {
        "id": column_type(8, KEY),
        "customer": column_type(3, NULLABLE),
        "amount": column_type(246, NULLABLE),
        "note": column_type(15, NULLABLE),
        "created": column_type(12, NULLABLE),
        "flag": column_type(1, NULLABLE | int(ColumnFlag.UNSIGNED)),
        "tag": column_type(15, NULLABLE | int(ColumnFlag.BINARY)),
    },
    "events": {
        "kind": column_type(15, NULLABLE),
        "detail": column_type(15, NULLABLE),
        "at": column_type(10, NULLABLE),
    },
}
SECOND_COLUMNS = {"id": column_type(3, KEY), "balance": column_type(8, NULLABLE)}
KEYS = {
    "customers": ("id",),
    "orders": ("id",),
    "events": ("kind", "detail", "at"),
    "accounts": ("id",),
    "ledger": ("id",),
}
KEYLESS_TABLES = frozenset({"events"})


@dataclass
class Transaction:
    commit_ts: int
    rows: list[RowChange] = field(default_factory=list)
    ddl: DDLEvent | None = None
    # A RENAME's table name before it (the event names the new one, as TiCDC's does).
    renamed_from: str | None = None


@dataclass
class Scenario:
    """Generates the history; ``state`` is the expected downstream afterwards."""

    seed: int = 1
    transactions: int = 200
    schema: str = SCHEMA
    # Commit ts source: None steps a synthetic clock; a callable gives live TSOs (benchmarks).
    clock: Callable[[], int] | None = None
    # Where the synthetic clock starts (a later scenario on the same topic starts after the last).
    start_ts: int = START_TS
    # Inserts into ``orders`` of one last transaction (a bulk load, as large as a test needs).
    bulk_rows: int = 0
    # ``orders.note`` dropped three quarters of the way (after the ADD COLUMN halfway).
    drop_column: bool = False
    # customers renamed and orders truncated three fifths of the way, events dropped and made
    # again with another layout seven tenths of the way.
    table_changes: bool = False
    state: dict[str, dict[tuple[Value, ...], dict[str, Value]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.columns = {table: dict(cols) for table, cols in COLUMNS.items()}
        self.state = {table: {} for table in COLUMNS}
        self._next_id = {"customers": 1, "orders": 1, "accounts": 1, "ledger": 1}
        self._serial = 0
        self._touched: set[tuple[str, tuple[Value, ...]]] = set()
        # Each table's upstream name (customers is renamed with ``table_changes``).
        self.names = {table: table for table in COLUMNS}
        # Each table's database (the second one's tables' with ``table_changes``).
        self.databases = {table: self.schema for table in COLUMNS}
        # The tables rows are written to (the second database's while they exist).
        self._writable = ["customers", "orders", "orders", "events"]

    def history(self) -> Iterator[Transaction]:
        """DDL creating the schema, then transactions, with an ADD COLUMN halfway, then the bulk
        transaction if any."""
        ts = self.start_ts + (1 << 18)
        db = self.schema
        yield Transaction(ts, ddl=DDLEvent(ts, db, None, f"CREATE DATABASE {db}", 1))
        for table, query in TABLE_DDL.items():
            ts += 1 << 18
            yield Transaction(ts, ddl=DDLEvent(ts, db, table, query.format(schema=db), 3))
        for index in range(self.transactions):
            ts = max(ts + 1, self.clock()) if self.clock else ts + (self.rng.randint(1, 50) << 18)
            if index == self.transactions // 2:
                alter = ADD_COLUMN.format(schema=db)
                yield Transaction(ts, ddl=DDLEvent(ts, db, "orders", alter, ACTION_ADD_COLUMN))
                self.columns["orders"]["extra"] = column_type(15, NULLABLE)
                for row in self.state["orders"].values():
                    row["extra"] = None
                ts += 1 << 18
            if self.drop_column and index == self.transactions * 3 // 4:
                drop = DROP_COLUMN.format(schema=db)
                yield Transaction(ts, ddl=DDLEvent(ts, db, "orders", drop, ACTION_DROP_COLUMN))
                del self.columns["orders"]["note"]
                for row in self.state["orders"].values():
                    del row["note"]
                ts += 1 << 18
            if self.table_changes and index == self.transactions // 5:
                yield from self._second_database(ts, SECOND_TABLES)
                ts += 3 << 18
            if self.table_changes and index == self.transactions * 4 // 5:
                yield self._drop_second_database(ts)
                ts += 1 << 18
            if self.table_changes and index == self.transactions * 9 // 10:
                yield from self._second_database(ts, ("accounts",))
                ts += 2 << 18
            if self.table_changes and index == self.transactions * 3 // 5:
                yield from self._rename_and_truncate(ts)
                ts += 2 << 18
            if self.table_changes and index == self.transactions * 7 // 10:
                yield from self._drop_and_create(ts)
                ts += 2 << 18
            txn = Transaction(ts)
            self._touched = set()
            for _ in range(self.rng.randint(1, 50)):
                change = self._change(ts)
                if change is not None:
                    txn.rows.append(change)
            yield txn
        if self.bulk_rows:
            ts = max(ts + 1, self.clock()) if self.clock else ts + (1 << 18)
            bulk = Transaction(ts)
            self._touched = set()
            while len(bulk.rows) < self.bulk_rows:
                change = self._insert(ts, "orders")
                if change is not None:
                    bulk.rows.append(change)
            yield bulk

    def _rename_and_truncate(self, ts: int) -> Iterator[Transaction]:
        db = self.schema
        rename = RENAME_TABLE.format(schema=db)
        ddl = DDLEvent(ts, db, RENAMED, rename, ACTION_RENAME_TABLE)
        yield Transaction(ts, ddl=ddl, renamed_from="customers")
        self.names["customers"] = RENAMED
        ts += 1 << 18
        truncate = TRUNCATE_TABLE.format(schema=db)
        yield Transaction(ts, ddl=DDLEvent(ts, db, "orders", truncate, ACTION_TRUNCATE_TABLE))
        self.state["orders"] = {}

    def _drop_and_create(self, ts: int) -> Iterator[Transaction]:
        db = self.schema
        drop = DROP_TABLE.format(schema=db)
        yield Transaction(ts, ddl=DDLEvent(ts, db, "events", drop, ACTION_DROP_TABLE))
        ts += 1 << 18
        create = EVENTS_AGAIN.format(schema=db)
        yield Transaction(ts, ddl=DDLEvent(ts, db, "events", create, ACTION_CREATE_TABLE))
        self.columns["events"] = {**COLUMNS["events"], "n": column_type(3, NULLABLE)}
        self.state["events"] = {}

    def _second_database(self, ts: int, tables: tuple[str, ...]) -> Iterator[Transaction]:
        """CREATE DATABASE, then a CREATE TABLE of each of ``tables`` (accounts with a column more
        when it is made again)."""
        db = SECOND_DATABASE.format(schema=self.schema)
        create = DDLEvent(ts, db, None, f"CREATE DATABASE {db}", ACTION_CREATE_SCHEMA)
        yield Transaction(ts, ddl=create)
        for table in tables:
            ts += 1 << 18
            again = table in self.databases
            query = (ACCOUNTS_AGAIN if again else SECOND_TABLE).format(database=db, table=table)
            yield Transaction(ts, ddl=DDLEvent(ts, db, table, query, ACTION_CREATE_TABLE))
            self.databases[table], self.names[table] = db, table
            self.columns[table] = dict(SECOND_COLUMNS)
            if again:
                self.columns[table]["note"] = column_type(15, NULLABLE)
            self.state[table] = {}
            self._writable.append(table)

    def _drop_second_database(self, ts: int) -> Transaction:
        """DROP DATABASE of the second database: its tables go with it."""
        db = SECOND_DATABASE.format(schema=self.schema)
        drop = DDLEvent(ts, db, None, f"DROP DATABASE {db}", ACTION_DROP_SCHEMA)
        for table in SECOND_TABLES:
            del self.state[table]
            self._writable.remove(table)
        return Transaction(ts, ddl=drop)

    def _change(self, ts: int) -> RowChange | None:
        table = self.rng.choice(self._writable)
        rows = self.state[table]
        choice = self.rng.random()
        if not rows or choice < 0.5:
            return self._insert(ts, table)
        old_key = self.rng.choice(list(rows))
        if (table, old_key) in self._touched:
            return None  # TiCDC emits one event per row and transaction
        old = rows[old_key]
        if choice < 0.8:
            new = dict(old, **self._changes(table))
            if table == "orders" and self.rng.random() < 0.2:
                new["id"] = self._fresh_id(table)
            if table == "customers" and self.rng.random() < 0.2:
                new["email"] = self._email()  # a NOT NULL unique key changes: delete + insert
            new_key = tuple(new[k] for k in KEYS[table])
            if new_key != old_key and (new_key in rows or (table, new_key) in self._touched):
                return None
            del rows[old_key]
            rows[new_key] = new
            self._touched |= {(table, old_key), (table, new_key)}
            db, name = self.databases[table], self.names[table]
            return RowChange(ts, db, name, Op.UPDATE, dict(self.columns[table]), new, old)
        del rows[old_key]
        self._touched.add((table, old_key))
        db, name = self.databases[table], self.names[table]
        return RowChange(ts, db, name, Op.DELETE, dict(self.columns[table]), None, old)

    def _insert(self, ts: int, table: str) -> RowChange | None:
        row = self._changes(table)
        if table in self._next_id:
            row["id"] = self._fresh_id(table)
        if table == "customers":
            row["email"] = self._email()
        if table == "orders" and "extra" in self.columns["orders"]:
            row.setdefault("extra", None)
        row = {name: row.get(name) for name in self.columns[table]}
        key = tuple(row[k] for k in KEYS[table])
        if key in self.state[table] or (table, key) in self._touched:
            return None
        self.state[table][key] = row
        self._touched.add((table, key))
        db, name = self.databases[table], self.names[table]
        return RowChange(ts, db, name, Op.INSERT, dict(self.columns[table]), row, None)

    def _fresh_id(self, table: str) -> int:
        self._next_id[table] += 1
        return self._next_id[table]

    def _email(self) -> str:
        self._serial += 1
        return f"user{self._serial}@example.com"

    def _changes(self, table: str) -> dict[str, Value]:
        rng = self.rng
        if table == "customers":
            return {
                "name": rng.choice([None, "Ana", "Bo 波", "Ćiro"]),
                "score": rng.choice([None, 0.5, rng.uniform(-1e6, 1e6)]),
                "big": rng.choice([None, 0, 18446744073709551615, rng.getrandbits(64)]),
            }
        if table == "orders":
            values: dict[str, Value] = {
                "customer": rng.randint(1, 10_000),
                "amount": f"{rng.randint(0, 10**17)}.{rng.randint(0, 99):02d}",
                "note": rng.choice([None, "", "gift", "naïve ☃"]),
                "created": f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} "
                f"{rng.randint(10, 23)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}."
                f"{rng.randint(0, 999999):06d}",
                "flag": rng.randint(0, 255),
                "tag": bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 16))),
            }
            if "extra" in self.columns["orders"]:
                values["extra"] = rng.choice([None, "x", "yz"])
            # A dropped column's value is drawn all the same: the history up to the drop is
            # the same with or without it.
            return {name: v for name, v in values.items() if name in self.columns["orders"]}
        if table in SECOND_TABLES:
            balance = rng.choice([None, rng.randint(-(2**63), 2**63 - 1)])
            account: dict[str, Value] = {"balance": balance}
            if "note" in self.columns[table]:
                account["note"] = rng.choice([None, "", "kept"])
            return account
        self._serial += 1
        event: dict[str, Value] = {
            "kind": rng.choice(["click", "view", None]),
            "detail": f"event {self._serial}",
            "at": f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
        }
        if "n" in self.columns["events"]:
            event["n"] = rng.choice([None, rng.randint(-100, 100)])
        return event
