"""Table schemas of the Simple protocol: parsing, the column types they imply, and a cache.

A Simple DML message carries no types: its values are typed by the table schema of the same
``(schema, table, schemaVersion)``, announced by BOOTSTRAP and DDL messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from config.errors import shown
from core.model import ColumnFlag, ColumnSchema, ColumnType, IndexSchema, MySQLType, TableSchema
from core.model import column_type as shared_type
from streams.codecs.limits import Limit, limit

# The longest column name TiDB takes (MySQL's identifier limit), in characters.
MAX_NAME = 64
# mysqlType names (their first word) and the type codes they stand for.
_TYPE_CODES: dict[str, MySQLType] = {
    "tinyint": MySQLType.TINY,
    "bool": MySQLType.TINY,
    "boolean": MySQLType.TINY,
    "smallint": MySQLType.SHORT,
    "mediumint": MySQLType.INT24,
    "int": MySQLType.LONG,
    "integer": MySQLType.LONG,
    "bigint": MySQLType.LONGLONG,
    "float": MySQLType.FLOAT,
    "double": MySQLType.DOUBLE,
    "real": MySQLType.DOUBLE,
    "decimal": MySQLType.NEWDECIMAL,
    "numeric": MySQLType.NEWDECIMAL,
    "date": MySQLType.DATE,
    "datetime": MySQLType.DATETIME,
    "timestamp": MySQLType.TIMESTAMP,
    "time": MySQLType.DURATION,
    "year": MySQLType.YEAR,
    "char": MySQLType.STRING,
    "binary": MySQLType.STRING,
    "varchar": MySQLType.VARCHAR,
    "varbinary": MySQLType.VARCHAR,
    "tinytext": MySQLType.TINY_BLOB,
    "tinyblob": MySQLType.TINY_BLOB,
    "text": MySQLType.BLOB,
    "blob": MySQLType.BLOB,
    "mediumtext": MySQLType.MEDIUM_BLOB,
    "mediumblob": MySQLType.MEDIUM_BLOB,
    "longtext": MySQLType.LONG_BLOB,
    "longblob": MySQLType.LONG_BLOB,
    "enum": MySQLType.ENUM,
    "set": MySQLType.SET,
    "bit": MySQLType.BIT,
    "json": MySQLType.JSON,
    "geometry": MySQLType.GEOMETRY,
}
# The reverse: a type code (and whether it is binary) to its mysqlType name.
_TYPE_NAMES: dict[tuple[int, bool], str] = {
    (MySQLType.TINY, False): "tinyint",
    (MySQLType.SHORT, False): "smallint",
    (MySQLType.INT24, False): "mediumint",
    (MySQLType.LONG, False): "int",
    (MySQLType.LONGLONG, False): "bigint",
    (MySQLType.FLOAT, False): "float",
    (MySQLType.DOUBLE, False): "double",
    (MySQLType.NEWDECIMAL, False): "decimal",
    (MySQLType.DATE, False): "date",
    (MySQLType.NEWDATE, False): "date",
    (MySQLType.DATETIME, False): "datetime",
    (MySQLType.TIMESTAMP, False): "timestamp",
    (MySQLType.DURATION, False): "time",
    (MySQLType.YEAR, False): "year",
    (MySQLType.STRING, False): "char",
    (MySQLType.STRING, True): "binary",
    (MySQLType.VARCHAR, False): "varchar",
    (MySQLType.VARCHAR, True): "varbinary",
    (MySQLType.VAR_STRING, False): "varchar",
    (MySQLType.VAR_STRING, True): "varbinary",
    (MySQLType.TINY_BLOB, False): "tinytext",
    (MySQLType.TINY_BLOB, True): "tinyblob",
    (MySQLType.BLOB, False): "text",
    (MySQLType.BLOB, True): "blob",
    (MySQLType.MEDIUM_BLOB, False): "mediumtext",
    (MySQLType.MEDIUM_BLOB, True): "mediumblob",
    (MySQLType.LONG_BLOB, False): "longtext",
    (MySQLType.LONG_BLOB, True): "longblob",
    (MySQLType.ENUM, False): "enum",
    (MySQLType.SET, False): "set",
    (MySQLType.BIT, False): "bit",
    (MySQLType.JSON, False): "json",
    (MySQLType.GEOMETRY, False): "geometry",
}


def is_binary_name(mysql_type: str) -> bool:
    """TiCDC's rule: a mysqlType naming a blob or binary type carries bytes."""
    return "blob" in mysql_type or "binary" in mysql_type


def type_code(mysql_type: str) -> int:
    """The type code of a mysqlType such as ``"int unsigned"`` or ``"varchar(20)"``."""
    name = mysql_type.lower().removeprefix("unsigned ").split("(", 1)[0].split(" ", 1)[0]
    code = _TYPE_CODES.get(name)
    if code is None:
        raise ValueError(f"unknown mysqlType {shown(mysql_type)}")
    return code


def type_name(kind: ColumnType) -> str:
    """The Simple protocol's mysqlType for a column type."""
    binary = kind.is_binary and (kind.mysql_type, True) in _TYPE_NAMES
    name = _TYPE_NAMES.get((kind.mysql_type, binary))
    if name is None:
        raise ValueError(f"type code {kind.mysql_type} has no Simple protocol name")
    return name


def column_types(table: TableSchema) -> dict[str, ColumnType]:
    """Each column's type code and TiCDC flags as the schema's columns and indexes imply."""
    primary = {c for index in table.indexes if index.primary for c in index.columns}
    unique = {
        c for index in table.indexes if index.unique and not index.primary for c in index.columns
    }
    multiple = {c for index in table.indexes if not index.unique for c in index.columns}
    handle = primary
    if not handle:
        # Without a primary key TiCDC's handle is the first unique index over NOT NULL columns.
        for index in table.indexes:
            if index.unique and not index.nullable:
                handle = set(index.columns)
                break
    types: dict[str, ColumnType] = {}
    for column in table.columns:
        flags = 0
        if is_binary_name(column.mysql_type):
            flags |= ColumnFlag.BINARY
        if column.unsigned or "unsigned" in column.mysql_type:
            flags |= ColumnFlag.UNSIGNED
        if column.nullable:
            flags |= ColumnFlag.NULLABLE
        if column.name in primary:
            flags |= ColumnFlag.PRIMARY_KEY
        if column.name in handle:
            flags |= ColumnFlag.HANDLE_KEY
        if column.name in unique:
            flags |= ColumnFlag.UNIQUE_KEY
        if column.name in multiple:
            flags |= ColumnFlag.MULTIPLE_KEY
        types[column.name] = shared_type(type_code(column.mysql_type), flags)
    return types


def column_limits(table: TableSchema, types: Mapping[str, ColumnType]) -> dict[str, Limit]:
    """The declared bound of each of ``table``'s columns whose declaration gives one
    (``types``: theirs by :func:`column_types`)."""
    limits: dict[str, Limit] = {}
    for column in table.columns:
        found = limit(
            types[column.name], column.mysql_type, column.length, column.charset, column.elements
        )
        if found is not None:
            limits[column.name] = found
    return limits


def schema_from_types(
    schema: str, table: str, types: Mapping[str, ColumnType], version: int = 0
) -> TableSchema:
    """A table schema that reproduces ``types`` (what an encoder announces before a table's DML)."""
    columns = tuple(
        ColumnSchema(
            name=name,
            mysql_type=type_name(kind),
            charset="binary" if kind.is_binary else "utf8mb4",
            collate="binary" if kind.is_binary else "utf8mb4_bin",
            unsigned=kind.is_unsigned,
            nullable=bool(kind.flags & ColumnFlag.NULLABLE),
        )
        for name, kind in types.items()
    )
    keys = tuple(name for name, kind in types.items() if kind.flags & ColumnFlag.PRIMARY_KEY)
    indexes = [IndexSchema("primary", True, True, False, keys)] if keys else []
    # The flags do not say which columns share an index, so each flagged column gets one of its
    # own: enough for column_types to give every column its flags back.
    for name, kind in types.items():
        nullable = bool(kind.flags & ColumnFlag.NULLABLE)
        if kind.flags & ColumnFlag.UNIQUE_KEY and not kind.flags & ColumnFlag.PRIMARY_KEY:
            indexes.append(IndexSchema(f"uk_{name}", True, False, nullable, (name,)))
        if kind.flags & ColumnFlag.MULTIPLE_KEY:
            indexes.append(IndexSchema(f"idx_{name}", False, False, nullable, (name,)))
    return TableSchema(schema, table, 0, version, columns, tuple(indexes))


def _decimal(value: Any) -> int | None:
    if value is not None and value.__class__ is not int:
        raise ValueError(f"a column's 'decimal' must be an integer, not {type(value).__name__}")
    return value


def _name(value: Any) -> str:
    if value.__class__ is not str:
        raise ValueError(f"a column's 'name' must be a string, not {type(value).__name__}")
    return str(value)


def _scalar_text(value: Any, field: str) -> str:
    """A schema field TiCDC writes as a JSON scalar, as text; an object or array is refused
    (its text would be anything, and a deep one would not even print)."""
    if value.__class__ not in (str, int, float, bool):
        raise ValueError(
            f"a column's '{field}' must be a string or number, not {type(value).__name__}"
        )
    return str(value)


def check_table_schema(raw: Any, avro: bool) -> None:
    """Raise ValueError unless ``raw`` is a table schema as TiCDC writes one (rule
    ``table-schema`` of streams/codecs/simple_grammar.py; tiflow ``simple/message.go``
    ``TableSchema``, ``columnSchema``, ``dataType``, ``IndexSchema``)."""
    if raw.__class__ is not dict:
        raise ValueError("not an object")
    for field in ("database" if avro else "schema", "table"):
        if raw.get(field).__class__ is not str or not raw[field]:
            raise ValueError(f"'{field}' must be a non-empty string")
    # Go's int64 and uint64 (in Avro a long, the uint64's bits).
    table_id, version = raw.get("tableID"), raw.get("version")
    if table_id.__class__ is not int or not -(1 << 63) <= table_id < 1 << 63:
        raise ValueError(f"'tableID' must be an int64, not {shown(table_id)}")
    low = -(1 << 63) if avro else 0
    if version.__class__ is not int or not low <= version < 1 << 64:
        raise ValueError(f"'version' must be a uint64, not {shown(version)}")
    columns, indexes = raw.get("columns"), raw.get("indexes")
    if columns.__class__ is not list or not columns or indexes.__class__ is not list:
        raise ValueError("'columns' must be a non-empty array, 'indexes' an array")
    names: set[str] = set()
    for column in columns:
        name = column.get("name") if column.__class__ is dict else None
        if name.__class__ is not str or not 0 < len(name) <= MAX_NAME or name in names:
            raise ValueError(f"column name {shown(name)}")
        names.add(name)
        data_type = column.get("dataType")
        if data_type.__class__ is not dict or data_type.get("mysqlType").__class__ is not str:
            raise ValueError(f"column {shown(name)}: 'dataType' must hold a 'mysqlType' string")
        type_code(data_type["mysqlType"])
        if column.get("nullable").__class__ is not bool:
            raise ValueError(f"column {shown(name)}: 'nullable' must be a boolean")
        for field, kinds in _DATA_TYPE_FIELDS:
            if data_type.get(field).__class__ not in kinds:
                raise ValueError(f"column {shown(name)}: a 'dataType' {field} of the wrong type")
        elements = data_type.get("elements")
        if elements is not None and not all(e.__class__ is str for e in elements):
            raise ValueError(f"column {shown(name)}: 'elements' must be strings")
        if column.get("default").__class__ not in _SCALARS:
            raise ValueError(f"column {shown(name)}: 'default' must be a JSON scalar or null")
    for index in indexes:
        members = index.get("columns") if index.__class__ is dict else None
        if members.__class__ is not list or not members:
            raise ValueError(f"an index's 'columns' must be a non-empty array: {shown(members)}")
        if not all(member.__class__ is str and member in names for member in members):
            raise ValueError(f"an index's 'columns' must name the table's, not {shown(members)}")
        if index.get("name").__class__ is not str:
            raise ValueError("an index's 'name' must be a string")
        if any(index.get(flag).__class__ not in (bool, _NONE) for flag in _INDEX_FLAGS):
            raise ValueError("an index's 'unique', 'primary' and 'nullable' must be booleans")


# The optional fields of a column's ``dataType`` and the types each may have (null: absent, or
# null in Avro).
_NONE = type(None)
_DATA_TYPE_FIELDS = (
    ("charset", (str, _NONE)),
    ("collate", (str, _NONE)),
    ("length", (int, _NONE)),
    ("decimal", (int, _NONE)),
    ("elements", (list, _NONE)),
    ("unsigned", (bool, _NONE)),
    ("zerofill", (bool, _NONE)),
)
_SCALARS = (str, int, float, bool, _NONE)
_INDEX_FLAGS = ("unique", "primary", "nullable")


def parse_table_schema(raw: Mapping[str, Any]) -> TableSchema:
    """A TableSchema from its JSON form (``schema``) or Avro form (``database``)."""
    columns = []
    for column in raw.get("columns") or ():
        data_type = column["dataType"]
        elements = data_type.get("elements")
        columns.append(
            ColumnSchema(
                name=_name(column["name"]),
                mysql_type=_scalar_text(data_type["mysqlType"], "mysqlType"),
                charset=_scalar_text(data_type.get("charset") or "", "charset"),
                collate=_scalar_text(data_type.get("collate") or "", "collate"),
                length=int(data_type.get("length") or 0),
                decimal=_decimal(data_type.get("decimal")),
                elements=tuple(_scalar_text(e, "elements") for e in elements) if elements else None,
                unsigned=bool(data_type.get("unsigned")),
                zerofill=bool(data_type.get("zerofill")),
                nullable=bool(column.get("nullable", True)),
                default=None
                if column.get("default") is None
                else _scalar_text(column["default"], "default"),
            )
        )
    indexes = tuple(
        IndexSchema(
            name=index["name"],
            unique=bool(index.get("unique")),
            primary=bool(index.get("primary")),
            nullable=bool(index.get("nullable")),
            columns=tuple(index.get("columns") or ()),
        )
        for index in raw.get("indexes") or ()
    )
    for column in columns:
        type_code(column.mysql_type)
    return TableSchema(
        schema=raw.get("schema", raw.get("database")) or "",
        table=raw["table"],
        table_id=int(raw.get("tableID") or 0),
        version=int(raw.get("version") or 0) & ((1 << 64) - 1),
        columns=tuple(columns),
        indexes=indexes,
    )


def table_schema_json(table: TableSchema, avro: bool = False) -> dict[str, Any]:
    """The JSON (or Avro record) form of a table schema."""
    columns = []
    for column in table.columns:
        data_type: dict[str, Any] = {
            "mysqlType": column.mysql_type,
            "charset": column.charset,
            "collate": column.collate,
            "length": column.length,
        }
        if avro or column.decimal is not None:
            data_type["decimal"] = column.decimal
        if avro or column.elements:
            data_type["elements"] = list(column.elements) if column.elements else None
        if avro or column.unsigned:
            data_type["unsigned"] = column.unsigned or None if avro else True
        if avro or column.zerofill:
            data_type["zerofill"] = column.zerofill or None if avro else True
        columns.append(
            {
                "name": column.name,
                "dataType": data_type,
                "nullable": column.nullable,
                "default": column.default,
            }
        )
    version = table.version
    if avro and version >= 1 << 63:
        version -= 1 << 64
    return {
        "database" if avro else "schema": table.schema,
        "table": table.table,
        "tableID": table.table_id,
        "version": version,
        "columns": columns,
        "indexes": [
            {
                "name": index.name,
                "unique": index.unique,
                "primary": index.primary,
                "nullable": index.nullable,
                "columns": list(index.columns),
            }
            for index in table.indexes
        ],
    }


class SchemaStore(Protocol):
    """Where a Simple codec finds the schema a DML message was encoded with."""

    def get(self, schema: str, table: str, version: int) -> TableSchema | None: ...

    def put(self, table: TableSchema) -> None: ...


class MemorySchemaStore:
    """A process-local schema cache (the worker keeps a shared one in Redis)."""

    def __init__(self) -> None:
        self._tables: dict[tuple[str, str, int], TableSchema] = {}

    def get(self, schema: str, table: str, version: int) -> TableSchema | None:
        return self._tables.get((schema, table, version))

    def put(self, table: TableSchema) -> None:
        self._tables[(table.schema, table.table, table.version)] = table
