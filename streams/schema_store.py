"""The Simple protocol's schema cache in Redis, shared by every worker of a pipeline."""

from __future__ import annotations

import orjson

from core.model import TableSchema
from core.staging.schemas import SchemaHash
from streams.codecs.simple_schema import parse_table_schema, table_schema_json


class RedisSchemaStore:
    """Table schemas by (schema, table, version); a version never changes once announced."""

    def __init__(self, stored: SchemaHash) -> None:
        self._stored = stored
        self._local: dict[tuple[str, str, int], TableSchema] = {}

    @staticmethod
    def _field(schema: str, table: str, version: int) -> bytes:
        return orjson.dumps([schema, table, version])

    def get(self, schema: str, table: str, version: int) -> TableSchema | None:
        found = self._local.get((schema, table, version))
        if found is None:
            raw = self._stored.get(self._field(schema, table, version))
            if raw is None:
                return None
            found = self._local[(schema, table, version)] = parse_table_schema(orjson.loads(raw))
        return found

    def put(self, table: TableSchema) -> None:
        self._local[(table.schema, table.table, table.version)] = table
        self._stored.put(
            self._field(table.schema, table.table, table.version),
            orjson.dumps(table_schema_json(table)),
        )
