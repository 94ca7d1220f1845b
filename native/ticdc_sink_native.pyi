"""Native fast paths for ticdc-sink's codecs: each returns None where the Python codec decides."""

from typing import Any

class OpenDecoder:
    def __init__(
        self, row: type, resolved: type, insert: object, update: object, delete: object
    ) -> None: ...
    def decode(
        self, key: bytes, value: bytes, kinds: dict[int, tuple[Any, ...]]
    ) -> list[Any] | None: ...

class CraftDecoder:
    def __init__(
        self,
        row: type,
        resolved: type,
        insert: object,
        update: object,
        delete: object,
        column_type: Any,
    ) -> None: ...
    def decode(self, value: bytes) -> list[Any] | None: ...

class SimpleDecoder:
    def __init__(
        self,
        row: type,
        resolved: type,
        insert: object,
        update: object,
        delete: object,
        binary: Any,
        integer: Any,
        float: Any,
        timestamp: Any,
        text: Any,
    ) -> None: ...
    def decode(self, value: bytes, layouts: dict[Any, Any]) -> list[Any] | None: ...
