"""The public JSON view of events that ``ticdc-sink decode`` prints, one object per event."""

from __future__ import annotations

from typing import Any

from core.model import Bootstrap, ClaimCheck, DDLEvent, Event, Resolved, RowChange, Value
from streams.codecs.values import b64encode


def _value(value: Value) -> Any:
    return {"base64": b64encode(value)} if isinstance(value, bytes) else value


def _image(image: dict[str, Value] | None) -> dict[str, Any] | None:
    if image is None:
        return None
    return {name: _value(value) for name, value in image.items()}


def event_json(event: Event) -> dict[str, Any]:
    """``event`` as the documented JSON object (integers stay exact; bytes become base64)."""
    if isinstance(event, RowChange):
        return {
            "type": "row",
            "commit_ts": event.commit_ts,
            "schema": event.schema,
            "table": event.table,
            "op": event.op.value,
            "new": _image(event.new),
            "old": _image(event.old),
        }
    if isinstance(event, DDLEvent):
        return {
            "type": "ddl",
            "commit_ts": event.commit_ts,
            "schema": event.schema,
            "table": event.table,
            "query": event.query,
            "ddl_type": event.ddl_type,
        }
    if isinstance(event, Resolved):
        return {"type": "resolved", "commit_ts": event.commit_ts}
    if isinstance(event, Bootstrap):
        return {
            "type": "bootstrap",
            "schema": event.table_schema.schema,
            "table": event.table_schema.table,
        }
    if isinstance(event, ClaimCheck):
        return {"type": "claim_check", "location": event.location}
    raise TypeError(f"not an event: {event!r}")
