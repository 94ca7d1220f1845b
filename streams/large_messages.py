"""Making TiCDC's cut-down large messages whole before they are staged.

With ``large-message-handle-option`` TiCDC sends a message too large for Kafka either as a claim
check (the whole message stored elsewhere: :mod:`streams.claim_check`) or as its row's handle-key
columns only (the row is then read from the upstream TiDB: :mod:`streams.upstream`). The codecs
report both (a :class:`~core.model.ClaimCheck` event, a row with ``handle_key_only``); this
turns them into the events of the whole message, or a :class:`LargeMessageError` saying why not.
A handle-key-only delete stays as it is: the sink deletes by key.
"""

from __future__ import annotations

from config.errors import LargeMessageError
from config.settings import Settings
from core.model import ClaimCheck, Event, Op, RowChange
from streams.claim_check import ClaimCheckReader
from streams.codecs.base import Codec
from streams.upstream import UpstreamReader


def is_cut_down(event: Event) -> bool:
    """Whether ``event`` is not whole: a claim check, or a handle-key-only insert or update."""
    if isinstance(event, RowChange):
        return event.handle_key_only and event.op is not Op.DELETE
    return isinstance(event, ClaimCheck)


def no_upstream_reason(row: RowChange) -> str:
    return (
        f"handle-key-only {row.op.value} of {row.schema}.{row.table} at commit ts "
        f"{row.commit_ts}: Kafka carries only its key columns (large-message-handle-option="
        "handle-key-only); set TICDC_SINK_UPSTREAM to read the row from the upstream TiDB"
    )


class LargeMessages:
    """Decodes a message and makes its cut-down events whole."""

    def __init__(
        self, claim_checks: ClaimCheckReader | None = None, upstream: UpstreamReader | None = None
    ) -> None:
        self.claim_checks = claim_checks or ClaimCheckReader()
        self.upstream = upstream

    @classmethod
    def from_settings(cls, settings: Settings) -> LargeMessages:
        return cls(
            ClaimCheckReader(
                settings.large_messages.claim_check_storage,
                settings.large_messages.claim_check_attempts,
            ),
            UpstreamReader(settings.large_messages.upstream)
            if settings.large_messages.upstream is not None
            else None,
        )

    def decode(self, codec: Codec, key: bytes | None, value: bytes) -> list[Event]:
        """``codec``'s events of the message, each cut-down one made whole (in its place)."""
        events = codec.decode(key, value)
        for event in events:
            if is_cut_down(event):
                return self._whole(codec, events)
        return events

    def _whole(self, codec: Codec, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for event in events:
            if isinstance(event, ClaimCheck):
                stored = codec.decode(*self.claim_checks.read(event.location, codec.protocol))
                if any(isinstance(e, ClaimCheck) for e in stored):
                    raise LargeMessageError(
                        codec.protocol,
                        f"the claim-check object of {event.location!r} is itself a claim check",
                    )
                out.extend(stored)
            else:
                out.append(event)
        return [
            self._whole_row(codec, e) if isinstance(e, RowChange) and is_cut_down(e) else e
            for e in out
        ]

    def _whole_row(self, codec: Codec, row: RowChange) -> RowChange:
        if self.upstream is None:
            raise LargeMessageError(codec.protocol, no_upstream_reason(row))
        return self.upstream.whole(row, codec.protocol)
