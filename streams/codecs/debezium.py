"""TiCDC's Debezium protocol (``protocol=debezium``), as tiflow's pkg/sink/codec/debezium writes it.

Each row is one JSON message ``{"payload": {"source": {..., "commit_ts": N}, "op": "c"|"u"|"d",
"before", "after"}, "schema": ...}`` whose key holds the handle key's columns; TiCDC's commit ts
is the ``source.commit_ts`` it adds to Debezium's source block. DDL is a Debezium schema-change
message (``payload.ddl`` and ``tableChanges``); a watermark is ``op: "m"`` with its ts in
``source.commit_ts`` (TiCDC's decoder also takes a message with neither ``op`` nor ``ddl`` as
one). Values follow ``streams.codecs.debezium_values``: a table's DDL completes what each row's
schema leaves out, so the codec remembers the last ``tableChanges`` of each table. What TiCDC
writes, field by field, is the grammar of :mod:`streams.codecs.debezium_grammar`, whose checks run
before the value readers: a message breaking it is refused with a
:class:`~config.errors.GrammarError` naming the rule.

Longer than the usual module on purpose: the decoder and the encoder stay together, as in
tiflow's own package: the encoder writes the fixtures the decoder's property tests read, and a
field one side learns the other must too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from config.errors import DecodeError, EncodeError, shown
from core.model import (
    ColumnFlag,
    ColumnType,
    DDLEvent,
    Event,
    MySQLType,
    Op,
    Resolved,
    RowChange,
    Value,
)
from streams.codecs import debezium_grammar as grammar
from streams.codecs.base import MAX_MESSAGE_BYTES, Codec, KafkaMessage
from streams.codecs.debezium_values import (
    LAST_DDL_VERSION,
    DDLColumn,
    Reader,
    column_plan,
    ddl_column,
    ddl_columns,
    ddl_limit,
    ddl_table_schema,
    ddl_type_name,
    field_schema,
    write_value,
)
from streams.codecs.limits import Limit
from streams.codecs.simple_schema import SchemaStore
from streams.codecs.values import checked_integer

PROTOCOL = grammar.PROTOCOL
# TiCDC's default cluster id, which names its schemas ("<cluster>.<db>.<table>.Value").
CLUSTER = "default"
DEBEZIUM_VERSION = "2.4.0.Final"
_OPS = {"c": Op.INSERT, "r": Op.INSERT, "u": Op.UPDATE, "d": Op.DELETE}
_OP_CODES = {Op.INSERT: "c", Op.UPDATE: "u", Op.DELETE: "d"}
_WATERMARK_OP = "m"
_MASK64 = (1 << 64) - 1
# The DDL type when a schema-change message names none (TiCDC's tableChanges is empty for
# database-level statements), as the Simple protocol names such DDL.
_PLAIN_DDL = "QUERY"
_SIX_DIGITS = frozenset({MySQLType.DATETIME, MySQLType.DURATION})


@dataclass(frozen=True, slots=True)
class Plan:
    """How a table's row images are read, made once per DDL."""

    generation: int
    columns: dict[str, ColumnType]
    names: frozenset[str]
    # Columns whose every JSON value is read by its reader.
    reads: tuple[tuple[str, Reader], ...]
    # Columns whose values of one JSON class are the model's as they are (int, float, str):
    # the reader sees only the others (an int of a DOUBLE column, or a wrong type to refuse).
    checks: tuple[tuple[str, type, Reader], ...]
    # Columns whose length or members the table's DDL declares (none before it is seen).
    limits: tuple[tuple[str, Limit], ...]


def _uint64(value: Any, field: str) -> int:
    if value.__class__ is not int or not -(1 << 63) <= value <= _MASK64:
        raise ValueError(f"'{field}' must be a 64-bit integer")
    return int(value) & _MASK64


class DebeziumCodec(Codec):
    """Decodes and encodes TiCDC's Debezium JSON (``debezium-disable-schema`` either way)."""

    protocol = PROTOCOL

    def __init__(self, schemas: SchemaStore | None = None) -> None:
        # Where the last DDL columns of each table are kept beyond this codec (the worker's
        # store is in Redis, so a restarted worker still types rows of tables it saw no DDL of).
        self.schemas = schemas
        # (db, table) -> columns of the table's last DDL, and a count of the DDL seen, which
        # retires the column plans made before it.
        self._tables: dict[tuple[str, str], dict[str, DDLColumn]] = {}
        self._generation = 0
        # (db, table) -> how its rows are read. The handle key (from the message key) changes
        # only with a DDL, so a plan is made, and a key read, once per DDL.
        self._plans: dict[tuple[str, str], Plan] = {}
        self._announced: dict[tuple[str, str], dict[str, ColumnType]] = {}

    # --- decoding -------------------------------------------------------------------------

    def decode(self, key: bytes | None, value: bytes) -> list[Event]:
        if len(value) > MAX_MESSAGE_BYTES:
            raise DecodeError(PROTOCOL, f"message over {MAX_MESSAGE_BYTES} bytes")
        if not value:
            return []  # a tombstone (Debezium writes one after a delete; TiCDC does not)
        try:
            message = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise DecodeError(PROTOCOL, f"not JSON: {exc}", event_index=0) from None
        payload = grammar.payload_of(message)
        op = grammar.op_of(payload)
        try:
            if op in _OPS:
                return [self._row(key, message, payload, op)]
            if op == _WATERMARK_OP or "ddl" not in payload:
                return [Resolved(_uint64(payload["source"]["commit_ts"], "source.commit_ts"))]
            return self._schema_change(payload)
        except DecodeError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise DecodeError(
                PROTOCOL, f"bad message: {type(exc).__name__}: {exc}", event_index=0
            ) from None

    def _schema_change(self, payload: dict[str, Any]) -> list[Event]:
        query = grammar.statement(payload)
        changes = payload.get("tableChanges") or []
        for change in changes:
            table = change.get("table")
            if table is not None:
                try:
                    db, name = _table_id(change["id"])
                    columns = {c["name"]: ddl_column(c) for c in table["columns"]}
                except (ValueError, TypeError, AttributeError) as exc:
                    raise grammar.broken(grammar.TABLE_CHANGES, str(exc)) from None
                self._tables[(db, name)] = columns
                self._generation += 1
                if self.schemas is not None:
                    self.schemas.put(ddl_table_schema(db, name, columns))
        if not query:
            return []  # the project's encoder announcing a table's column types
        source = payload["source"]
        return [
            DDLEvent(
                _uint64(source["commit_ts"], "source.commit_ts"),
                source.get("db") or None,
                source.get("table") or None,
                query,
                _change_type(changes[0]["type"]) if changes else _PLAIN_DDL,
            )
        ]

    def _row(
        self, key: bytes | None, message: dict[str, Any], payload: dict[str, Any], code: str
    ) -> RowChange:
        fields = _row_fields(message)
        grammar.row_images(code, payload, frozenset(fields) if fields else None)
        op = _OPS[code]
        source = payload["source"]
        db, table = source["db"], source["table"]
        plan = self._plans.get((db, table))
        if plan is None or plan.generation != self._generation:
            plan = self._plan(key, message, db, table)
        after, before = payload.get("after"), payload.get("before")
        if not plan.names.issuperset(after or ()) or not plan.names.issuperset(before or ()):
            # A column the plan does not know: make it again from this message's schema.
            plan = self._plan(key, message, db, table)
            unknown = set(after or ()) | set(before or ())
            if not plan.names.issuperset(unknown):
                raise DecodeError(
                    PROTOCOL,
                    f"columns {sorted(unknown - plan.names)} are not in the row's schema",
                    where="payload",
                )
        new = _image(plan, after)
        old = _image(plan, before)
        image = new if new is not None else old
        if image is not None and len(image) == len(plan.columns):
            columns = dict(plan.columns)
        else:
            columns = {name: plan.columns[name] for name in image or ()}
        commit_ts = source["commit_ts"]
        if commit_ts.__class__ is not int or not 0 <= commit_ts <= _MASK64:
            commit_ts = _uint64(commit_ts, "source.commit_ts")
        return RowChange(
            commit_ts,
            db,
            table,
            op,
            columns,
            new,
            old,
        )

    def _plan(self, key: bytes | None, message: dict[str, Any], db: str, table: str) -> Plan:
        fields = _row_fields(message)
        keys = grammar.key_columns(key, orjson.loads(key) if key else None)
        ddl = self._tables.get((db, table))
        if ddl is None:
            known = self.schemas and self.schemas.get(db, table, LAST_DDL_VERSION)
            ddl = self._tables[(db, table)] = ddl_columns(known) if known else {}
        payload = message["payload"]
        names = list(fields) or list(payload.get("after") or payload.get("before") or ())
        made = {name: column_plan(fields.get(name), ddl.get(name), name in keys) for name in names}
        limits = (
            (name, ddl_limit(kind, ddl[name])) for name, (kind, _, _) in made.items() if name in ddl
        )
        plan = Plan(
            self._generation,
            {name: kind for name, (kind, _, _) in made.items()},
            frozenset(made),
            tuple((name, reader) for name, (_, reader, plain) in made.items() if plain is None),
            tuple(
                (name, plain, reader)
                for name, (_, reader, plain) in made.items()
                if plain is not None
            ),
            tuple((name, found) for name, found in limits if found is not None),
        )
        self._plans[(db, table)] = plan
        return plan

    # --- encoding -------------------------------------------------------------------------

    def encode(self, events: Sequence[Event]) -> list[KafkaMessage]:
        messages: list[KafkaMessage] = []
        for event in events:
            if isinstance(event, RowChange):
                name = (event.schema, event.table)
                if self._announced.get(name) != event.columns:
                    # TiCDC's rows are typed by their table's DDL; events that do not start
                    # with one announce their types in a schema-change message without SQL.
                    self._announced[name] = dict(event.columns)
                    messages.append(self._schema_message(event.schema, event.table, "", 0, "ALTER"))
                messages.append(self._row_message(event))
            elif isinstance(event, DDLEvent):
                if not event.query:
                    raise EncodeError("debezium carries no DDL without its SQL")
                kind = event.ddl_type if isinstance(event.ddl_type, str) else _PLAIN_DDL
                messages.append(
                    self._schema_message(
                        event.schema or "", event.table or "", event.query, event.commit_ts, kind
                    )
                )
            elif isinstance(event, Resolved):
                messages.append(_watermark_message(event.commit_ts))
            else:
                raise EncodeError(f"debezium has no {type(event).__name__} event")
        return messages

    def _row_message(self, event: RowChange) -> KafkaMessage:
        keys = [name for name, kind in event.columns.items() if kind.is_key]
        image = event.new if event.new is not None else event.old
        try:
            key_values = {
                name: _written(event.columns[name], (image or {}).get(name)) for name in keys
            }
            payload: dict[str, Any] = {
                "source": _source(event.schema, event.table, event.commit_ts),
                "ts_ms": event.commit_ts >> 18,
                "transaction": None,
                "op": _OP_CODES[event.op],
                "before": _written_image(event.columns, event.old),
                "after": _written_image(event.columns, event.new),
            }
        except (ValueError, TypeError) as exc:
            raise EncodeError(f"debezium cannot carry a value of {event.table}: {exc}") from None
        fields = [field_schema(name, kind) for name, kind in event.columns.items()]
        prefix = f"{CLUSTER}.{event.schema}.{event.table}"
        key = {
            "payload": key_values,
            "schema": {
                "type": "struct",
                "name": f"{prefix}.Key",
                "optional": False,
                "fields": [field_schema(name, event.columns[name]) for name in keys],
            },
        }
        value = {"payload": payload, "schema": _envelope(prefix, fields)}
        return KafkaMessage(orjson.dumps(key), orjson.dumps(value))

    def _schema_message(
        self, db: str, table: str, query: str, commit_ts: int, kind: str
    ) -> KafkaMessage:
        changes: list[dict[str, Any]] = []
        if kind != _PLAIN_DDL:
            columns = self._announced.get((db, table))
            changes.append(
                {
                    "type": kind,
                    "id": f'"{db}"."{table}"',
                    "table": None if columns is None else _table_changes(columns),
                }
            )
        key = {
            "payload": {"databaseName": db},
            "schema": {
                "type": "struct",
                "name": "io.debezium.connector.mysql.SchemaChangeKey",
                "optional": False,
                "version": 1,
                "fields": [{"field": "databaseName", "optional": False, "type": "string"}],
            },
        }
        value = {
            "payload": {
                "source": _source(db, table, commit_ts),
                "ts_ms": commit_ts >> 18,
                "databaseName": db,
                "schemaName": None,
                "ddl": query,
                "tableChanges": changes,
            }
        }
        return KafkaMessage(orjson.dumps(key), orjson.dumps(value))


def _change_type(value: Any) -> str:
    """A table change's type (``CREATE``, ``ALTER``, ...): a string, not any JSON."""
    if value.__class__ is not str:
        raise ValueError(f"a table change's 'type' must be a string, not {type(value).__name__}")
    return str(value)


def _table_id(text: str) -> tuple[str, str]:
    """The (db, table) of a table change's id, ``"db"."table"`` as TiCDC writes it (names not
    escaped); a RENAME's id is the new name, then the old one: ``"d"."new","d"."old"``."""
    if len(text) >= 5 and text[0] == text[-1] == '"':
        db, found, table = text[1:-1].split('","', 1)[0].partition('"."')
        if found:
            return db, table
    raise ValueError(f'table change id {shown(text)} is not "db"."table"')


def _row_fields(message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``after`` (or ``before``) struct's fields of the message's schema, by name."""
    schema = message.get("schema")
    if not schema:
        return {}
    for struct in schema.get("fields") or ():
        if struct.get("field") in ("after", "before") and struct.get("fields") is not None:
            return {field["field"]: field for field in struct["fields"]}
    return {}


def _image(plan: Plan, raw: dict[str, Any] | None) -> dict[str, Value] | None:
    """A row image of the plan's columns (the caller checked that it has no others)."""
    if raw is None:
        return None
    image = dict(raw)
    name = ""
    try:
        for name, reader in plan.reads:
            value = image.get(name)
            if value is not None:
                image[name] = reader(value)
        for name, plain, reader in plan.checks:
            value = image.get(name)
            if value is not None and value.__class__ is not plain:
                image[name] = reader(value)
        for name, value in image.items():
            checked_integer(plan.columns[name], value)
        for name, bound in plan.limits:
            value = image.get(name)
            if value is not None:
                bound.check(value)
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        raise grammar.broken(
            grammar.COLUMN_VALUE,
            f"bad value {shown(raw.get(name))}: {type(exc).__name__}: {exc}",
            f"payload.{name}",
        ) from None
    return image


def _written(kind: ColumnType, value: Value) -> Any:
    return None if value is None else write_value(kind, value)


def _written_image(
    columns: dict[str, ColumnType], image: dict[str, Value] | None
) -> dict[str, Any] | None:
    if image is None:
        return None
    return {name: _written(columns[name], value) for name, value in image.items()}


def _source(db: str, table: str, commit_ts: int) -> dict[str, Any]:
    return {
        "version": DEBEZIUM_VERSION,
        "connector": "TiCDC",
        "name": CLUSTER,
        # TiCDC: the commit's physical time, the TSO's high bits in milliseconds.
        "ts_ms": commit_ts >> 18,
        "snapshot": "false",
        "db": db,
        "table": table,
        "server_id": 0,
        "gtid": None,
        "file": "",
        "pos": 0,
        "row": 0,
        "thread": 0,
        "query": None,
        "commit_ts": commit_ts,
        "cluster_id": CLUSTER,
    }


def _envelope(prefix: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    image = {"type": "struct", "optional": True, "name": f"{prefix}.Value", "fields": fields}
    return {
        "type": "struct",
        "optional": False,
        "name": f"{prefix}.Envelope",
        "version": 1,
        "fields": [
            {**image, "field": "before"},
            {**image, "field": "after"},
            {
                "type": "struct",
                "optional": False,
                "name": "io.debezium.connector.mysql.Source",
                "field": "source",
                "fields": _SOURCE_FIELDS,
            },
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


_SOURCE_FIELDS = [
    {"type": kind, "optional": optional, "field": name}
    for name, kind, optional in (
        ("version", "string", False),
        ("connector", "string", False),
        ("name", "string", False),
        ("ts_ms", "int64", False),
        ("snapshot", "string", True),
        ("db", "string", False),
        ("sequence", "string", True),
        ("table", "string", True),
        ("server_id", "int64", False),
        ("gtid", "string", True),
        ("file", "string", False),
        ("pos", "int64", False),
        ("row", "int32", False),
        ("thread", "int64", True),
        ("query", "string", True),
    )
]


def _table_changes(columns: dict[str, ColumnType]) -> dict[str, Any]:
    keys = [name for name, kind in columns.items() if kind.is_key]
    return {
        "defaultCharsetName": "utf8mb4",
        "primaryKeyColumnNames": keys,
        "columns": [
            {
                "name": name,
                "typeName": ddl_type_name(kind),
                # TiCDC gives DATETIME and TIME their digits; the model's are six.
                "length": 6 if kind.mysql_type in _SIX_DIGITS else None,
                "position": position,
                "optional": bool(kind.flags & ColumnFlag.NULLABLE),
            }
            for position, (name, kind) in enumerate(columns.items(), 1)
        ],
    }


def _watermark_message(commit_ts: int) -> KafkaMessage:
    """TiCDC's checkpoint message (``EncodeCheckpointEvent``)."""
    key = {
        "payload": {},
        "schema": {
            "fields": [],
            "optional": False,
            "name": f"{CLUSTER}.watermark.Key",
            "type": "struct",
        },
    }
    value = {
        "payload": {
            "source": _source("", "", commit_ts),
            "op": _WATERMARK_OP,
            "ts_ms": commit_ts >> 18,
            "transaction": None,
        }
    }
    return KafkaMessage(orjson.dumps(key), orjson.dumps(value))
