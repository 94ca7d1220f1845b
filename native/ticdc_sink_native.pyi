"""Native fast paths for ticdc-sink's codecs: each returns None where the Python codec decides."""

from typing import Any

class OpenDecoder:
    def __init__(
        self, row: type, resolved: type, insert: object, update: object, delete: object
    ) -> None: ...
    def decode(
        self, key: bytes, value: bytes, kinds: dict[int, tuple[Any, ...]]
    ) -> list[Any] | None: ...
