"""A message's staging encoded as Redis command arguments, by Python or by the native module.

:func:`frame_message` is the reference; ``ticdc_sink_native.stage_frames`` writes the same bytes
without the GIL (``core/native.py`` takes the wheel only when it writes this member layout).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from core.model import DDLEvent
from core.native import native_module
from core.packed import PackedEvents
from core.resp import Arg, encode_args
from core.staging.layout import ddl_args, row_members, ts_hex

# Members and bytes per ZADD command: bound one command's size in Redis's input buffer
# (whose limit, client-query-buffer-limit, is 1 GiB by default).
ZADD_MEMBERS = 50_000
ZADD_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class StagedMessage:
    """One Kafka message's share of the staging area: its rows packed as (commit ts, packed
    row), its DDL and the highest resolved ts it carries."""

    offset: int
    rows: Sequence[tuple[int, bytes]] = ()
    ddls: Sequence[DDLEvent] = ()
    watermark: int | None = None


@dataclass(frozen=True, slots=True)
class FramedMessage:
    """A message's staging, encoded as command arguments: its row members as ZADD pairs, and
    what the stage script records of it (see :func:`frame_message`)."""

    offset: int
    # Rows, not members: what the stage script counts.
    rows: int
    # The resolved timestamps it carries (the highest is staged as the watermark).
    marks: list[int]
    # How many script arguments ``data`` holds.
    args: int
    data: bytes
    # The row members as ZADD's score/member pairs (two arguments a member).
    members: bytes
    # How many members ``members`` holds (runs of rows: see layout.member_runs).
    member_count: int


def frame_message(message: StagedMessage) -> FramedMessage:
    """The stage script's arguments for one message (see stage.lua), encoded."""
    members = row_members(message.offset, message.rows)
    mark = b"" if message.watermark is None else ts_hex(message.watermark)
    args: list[Arg] = [message.offset, mark, len(message.rows), sum(map(len, members))]
    args.append(len(message.ddls))
    for ddl in message.ddls:
        args += ddl_args(ddl)
    pairs: list[Arg] = [0] * (2 * len(members))
    pairs[1::2] = members
    marks = [] if message.watermark is None else [message.watermark]
    return FramedMessage(
        message.offset,
        len(message.rows),
        marks,
        len(args),
        encode_args(args),
        encode_args(pairs),
        len(members),
    )


def frame_packed(messages: Sequence[tuple[int, PackedEvents]]) -> list[FramedMessage]:
    """Each (offset, natively packed message) framed as :func:`frame_message` frames it, by
    the native module without the GIL (safe to call from a thread)."""
    native = native_module()
    if native is None:
        return [
            replace(
                frame_message(
                    StagedMessage(offset, packed.rows(), (), max(packed.resolved, default=None))
                ),
                marks=packed.resolved,
            )
            for offset, packed in messages
        ]
    frames: list[tuple[int, bytes, bytes, int]] = native.stage_frames(list(messages))
    return [
        FramedMessage(offset, len(packed), packed.resolved, args, data, members, count)
        for (offset, packed), (args, data, members, count) in zip(messages, frames, strict=True)
    ]


def zadd_runs(frames: Sequence[FramedMessage]) -> Iterator[list[FramedMessage]]:
    """``frames`` in runs of whole messages, each ending once it reaches :data:`ZADD_MEMBERS`
    members or :data:`ZADD_BYTES` bytes (one ZADD a run)."""
    run: list[FramedMessage] = []
    members = size = 0
    for frame in frames:
        run.append(frame)
        members += frame.member_count
        size += len(frame.members)
        if members >= ZADD_MEMBERS or size >= ZADD_BYTES:
            yield run
            run, members, size = [], 0, 0
    if run:
        yield run
