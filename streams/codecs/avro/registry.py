"""What the Avro codec needs of a Confluent schema registry, and an in-memory one.

The codec is pure: it reads and registers schemas through this protocol and never talks HTTP
itself (the worker's client is ``streams/schema_registry.py``).
"""

from __future__ import annotations

from typing import Protocol

from config.errors import UnknownSchemaError


class Registry(Protocol):
    """A Confluent-API schema registry, as the codec uses it."""

    def schema(self, schema_id: int) -> str:
        """The Avro schema JSON registered under ``schema_id``; :class:`UnknownSchemaError`
        when the registry has no such id (an outage is the registry's to wait out, or to raise
        as a ``ServiceError``: never the message's fault)."""
        ...

    def register(self, subject: str, schema: str) -> int:
        """The id of ``schema`` under ``subject``, registering it when new."""
        ...


class MemoryRegistry:
    """A registry held in a dict: the codec's property tests and the benchmarks, which need the
    bytes and not the service."""

    def __init__(self) -> None:
        self._schemas: dict[int, str] = {}
        self._ids: dict[str, int] = {}

    def schema(self, schema_id: int) -> str:
        found = self._schemas.get(schema_id)
        if found is None:
            raise UnknownSchemaError(schema_id, "in memory")
        return found

    def register(self, subject: str, schema: str) -> int:
        # Like Confluent's, one id per distinct schema, whichever subjects it is under.
        found = self._ids.get(schema)
        if found is None:
            found = self._ids[schema] = len(self._schemas) + 1
            self._schemas[found] = schema
        return found
