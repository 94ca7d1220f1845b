"""The pipeline's schema hash: schemas a protocol announces once and every worker reads.

The staging area stores the bytes; what they mean (the Simple protocol's table schemas) is the
worker's (``streams/schema_store.py``), so the contract knows nothing of any codec.
"""

from __future__ import annotations

from core.redis_client import RedisClient


class SchemaHash:
    """Schema documents by field, in the pipeline's ``schemas`` hash."""

    def __init__(self, client: RedisClient, key: str) -> None:
        self._client = client
        self._key = key

    def get(self, field: bytes) -> bytes | None:
        found = self._client.hget(self._key, field)
        return found.encode() if isinstance(found, str) else found

    def put(self, field: bytes, document: bytes) -> None:
        self._client.hset(self._key, field, document)
