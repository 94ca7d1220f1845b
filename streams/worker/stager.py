"""The stager: Kafka records in, one round trip of staging commands out.

Two steps, then the round trip. :meth:`MessageStager.decode` is the fast path, decoding,
packing and framing messages natively (in a thread, without the GIL); :meth:`prepare` drops
replays, decodes in Python what the fast path left, and queues the batch's staging, holds and
dead letters as one round trip; :meth:`send` runs it and does what follows: held messages
retried, dead letters trimmed, counters. A :class:`PreparedBatch` says what the batch changes
per partition. Each partition's messages are staged in order, each with its offset as one unit,
so a round trip cut midway leaves a prefix staged and the rest to be delivered again.

Longer than the usual module on purpose: the batch path and the held messages' retry share one
state (the offsets last staged, the partitions' codecs, the retry lock, the counters) and one
way of failing a message (held, dead letter, halt, a bug counted); split, each half would reach
into the other's state.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from config.errors import (
    DecodeError,
    HaltedError,
    NotYetDecodableError,
    RegistryUnavailableError,
    TicdcSinkError,
)
from config.settings import OnError, default_of, env_name
from core.metrics import DEAD_LETTERS_TRIMMED
from core.model import Bootstrap, DDLEvent, Resolved, RowChange
from core.packed import pack_rows
from core.redis_client import REDIS_TRANSIENT
from core.staging.framing import FramedMessage, StagedMessage, frame_packed
from core.staging.keys import TopicPartition
from core.staging.protocols import StagerStore, StagingRoundTrip
from core.staging.watermarks import PartitionProgress
from core.staging.writer import HeldMessage
from core.tso import tso_seconds
from streams.codecs import Codec
from streams.large_messages import LargeMessages
from streams.metrics import (
    DEAD_LETTERS,
    DECODE_BUGS,
    EVENTS_DECODED,
    PARTITION_WATERMARK,
    ROWS_STAGED,
)

log = logging.getLogger("ticdc_sink.worker")

# A Kafka message as the stager takes it: partition, offset, key, value.
Record = tuple[TopicPartition, int, bytes | None, bytes | None]
# A dead letter's reason is cut here: an unexpected exception's text may hold any of the input.
DEAD_LETTER_REASON_CHARS = 2_000
# A service away while decoding, not the message's fault: the line waits it out and prepares the
# batch again (the schema registry waits itself; its error leaves it only while stopping).
OUTAGES: tuple[type[Exception], ...] = (*REDIS_TRANSIENT, RegistryUnavailableError)
NO_COMMIT_TS = (
    "an event carries no commit ts: run the changefeed with enable-tidb-extension=true "
    "(Canal-JSON has neither commit ts nor watermarks without it)"
)


@dataclass(slots=True)
class PartitionChange:
    """What one batch stages of one partition."""

    # The last offset of the batch's messages of it (each staged, held or dead-lettered).
    last_offset: int
    messages: int = 0
    rows: int = 0
    # The resolved timestamps its messages carry.
    marks: list[int] = field(default_factory=list)
    # The highest DDL commit ts it stages (a quiet partition resolves up to it).
    ddl_ts: int | None = None


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A batch's staging, queued as one round trip and not yet sent."""

    round_trip: StagingRoundTrip
    # Per partition, what the round trip stages (replays left out).
    changes: dict[TopicPartition, PartitionChange]
    # Whether it carries schemas (DDL, BOOTSTRAP) that held messages may be waiting for.
    schemas_changed: bool = False
    # Dead letters it adds (the stream is trimmed to its cap once they are in).
    dead_letters: int = 0


class MessageStager:
    """Decodes Kafka records and stages their events through a :class:`StagerStore`."""

    def __init__(
        self,
        store: StagerStore,
        codec: Codec,
        on_error: OnError,
        large_messages: LargeMessages | None = None,
        *,
        dead_letter_max: int = default_of("dead_letter_max_entries"),
        held_max_messages: int = default_of("held_max_messages"),
    ) -> None:
        self.store = store
        self.codec = codec
        # A partitioned codec's copy per partition (Codec.partitioned), made at the partition's
        # first message here and told where staging says it stands; forgotten with the offsets.
        self._codecs: dict[TopicPartition, Codec] = {}
        self.on_error = on_error
        # Claim checks and handle-key-only rows are made whole before staging.
        self.large_messages = large_messages or LargeMessages()
        self.dead_letter_max = dead_letter_max
        self.held_max_messages = held_max_messages
        # Totals for the progress line (replays not counted).
        self.dead_letters = 0
        self.rows_staged = 0
        self.messages_staged = 0
        # The last offset prepared per partition: the next batch's replays are known without
        # asking Redis while a partition's offsets follow on.
        self._last_staged: dict[TopicPartition, int] = {}
        # The highest DDL commit ts staged (sent) per partition; rows are read back from Redis.
        self.ddl_ts: dict[TopicPartition, int] = {}
        # The highest resolved ts staged per partition, as the partition watermark gauge shows.
        self._marks: dict[TopicPartition, int] = {}
        # The watermark this worker moved each quiet partition to (TICDC_SINK_RESOLVE_WHEN_IDLE):
        # a change that arrives at or below it breaks that rule's assumption, and is logged.
        self.idle_marks: dict[TopicPartition, int] = {}
        # Held messages are retried after a round trip (a thread) and by a timer (the loop): one
        # at a time, or both would stage one message and count its rows twice.
        self._retrying = threading.Lock()
        # Labelled once: a labels() lookup per message costs more than the increment.
        pipeline = store.pipeline
        self._rows_decoded = EVENTS_DECODED.labels(pipeline, "row")
        self._marks_decoded = EVENTS_DECODED.labels(pipeline, "resolved")
        self._rows_staged = ROWS_STAGED.labels(pipeline)

    def decode(self, records: Sequence[Record]) -> list[FramedMessage | None]:
        """Step one: the records' fast path, decoded, packed and framed natively (see
        :meth:`Codec.decode_packed_many`), None where the codec decides. Safe to run in
        threads while the event loop goes on."""
        messages = [(key, value or b"") for _, _, key, value in records]
        packed = self.codec.decode_packed_many(messages)
        taken = [(r[1], p) for r, p in zip(records, packed, strict=True) if p is not None]
        framed = iter(frame_packed(taken))
        return [None if p is None else next(framed) for p in packed]

    def prepare(
        self,
        records: Sequence[Record],
        decoded: Sequence[FramedMessage | None],
        *,
        again: bool = False,
    ) -> PreparedBatch:
        """Step two: the round trip staging ``records`` (``decoded``: their :meth:`decode`).

        Replays are dropped (Redis is asked only when a partition's offsets do not follow on
        from the last batch); the rest are counted as staged for the next batch's replay check,
        so it can be prepared while this one is sent. A bad message raises under ``halt``.
        ``again``: the batch is prepared anew after its round trip failed (the next batch may
        have been decoded since, so a partitioned codec starts over from what staging holds).
        """
        staged = self._staged_offsets(records)
        codecs = self._partition_codecs({r[0] for r in records if r[1] > staged[r[0]]}, fresh=again)
        round_trip = self.store.batch()
        changes: dict[TopicPartition, PartitionChange] = {}
        by_partition: dict[TopicPartition, list[StagedMessage | FramedMessage]] = {}
        schemas_changed = False
        dead_letters = 0
        for record, frame in zip(records, decoded, strict=True):
            tp, offset = record[0], record[1]
            if offset <= staged[tp]:
                continue
            change = changes.get(tp)
            if change is None:
                change = changes[tp] = PartitionChange(offset)
            change.last_offset = offset
            change.messages += 1
            if frame is not None:
                # The fast path: rows packed and framed straight from the wire.
                change.rows += frame.rows
                change.marks += frame.marks
                by_partition.setdefault(tp, []).append(frame)
                continue
            codec = codecs.get(tp, self.codec)
            message, schemas, failed = self._decode_in_python(codec, record, change, round_trip)
            schemas_changed |= schemas
            dead_letters += failed
            by_partition.setdefault(tp, []).append(message)
        for tp, messages in by_partition.items():
            round_trip.stage(tp, messages)
        for tp, change in changes.items():
            self._last_staged[tp] = change.last_offset
        return PreparedBatch(round_trip, changes, schemas_changed, dead_letters)

    def send(self, batch: PreparedBatch) -> None:
        """Run the batch's round trip (from any thread), then stage the held messages its
        schemas may have unblocked and trim the dead letters it added. If the round trip fails
        the stager forgets what it counted as staged: Redis may hold part of it, or none."""
        try:
            batch.round_trip.send()
        except BaseException:
            self.forget_offsets()
            raise
        self._count(batch)
        if batch.schemas_changed and self.store.held_count():
            self.retry_held()
        if batch.dead_letters:
            trimmed = self.store.trim_dead_letters(self.dead_letter_max)
            DEAD_LETTERS_TRIMMED.labels(self.store.pipeline).inc(trimmed)

    def forget_offsets(self) -> None:
        """Forget what this stager staged last (its partitions were revoked, or a round trip
        failed: the next batch asks Redis)."""
        self._last_staged.clear()

    def forget_partitions(self) -> None:
        """Forget the partitions' offsets and codecs (they were revoked: another worker may
        stage them before they come back here)."""
        self.forget_offsets()
        # Replaced, not cleared: a batch being prepared keeps the codecs it started with.
        self._codecs = {}

    def _partition_codecs(
        self, partitions: set[TopicPartition], *, fresh: bool
    ) -> dict[TopicPartition, Codec]:
        """A partitioned codec's copy for each of ``partitions`` (nothing for a codec that
        reads every partition alike); a new copy follows what staging holds of its partition.
        ``fresh``: new copies for this batch alone, the kept ones left as they are."""
        if not self.codec.partitioned:
            return {}
        kept = {} if fresh else self._codecs
        codecs = {tp: kept[tp] for tp in partitions if tp in kept}
        missing = [tp for tp in partitions if tp not in codecs]
        if missing:
            for tp, progress in self.store.progress(missing).items():
                codec = codecs[tp] = self.codec.for_partition()
                codec.follows(resumed_at(progress))
            if not fresh:
                self._codecs.update((tp, codecs[tp]) for tp in missing)
        return codecs

    def retry_held(self) -> int:
        """Stage the held messages whose schema has arrived; returns how many were staged.

        A held message that now fails to decode, or whose schema has not come within
        ``held_max_messages`` of its partition, goes to the dead letters instead (under
        ``halt`` it stops the worker)."""
        staged = 0
        with self._retrying:
            held_messages = self.store.held()
            reached = self.store.staged_offsets({held.tp for held in held_messages})
            for held in held_messages:
                record = (held.tp, held.offset, held.key, held.value)
                try:
                    packed = self._decode_held(held)
                except NotYetDecodableError as missing:
                    behind = reached.get(held.tp, held.offset) - held.offset
                    if behind < self.held_max_messages:
                        continue
                    error: Exception = DecodeError(
                        self.codec.protocol,
                        f"{missing.reason}: still none {behind} messages of its partition "
                        f"later (TICDC_SINK_HELD_MAX_MESSAGES)",
                    )
                except OUTAGES:
                    raise
                except Exception as failed:
                    error = failed
                    if not isinstance(failed, TicdcSinkError):
                        self._count_bug(record, failed)
                else:
                    self.store.stage_held(held, packed)
                    staged += 1
                    continue
                if self.on_error is OnError.HALT:
                    raise error
                reason = dead_letter_reason(error)
                log.warning("dead letter %s offset %d: %s", held.tp.field, held.offset, reason)
                self.store.dead_letter_held(held, reason)
                self.dead_letters += 1
                DEAD_LETTERS.labels(self.store.pipeline).inc()
        return staged

    def _decode_held(self, held: HeldMessage) -> list[RowChange]:
        """A held message's rows, decoded and checked to pack (as :meth:`prepare` would)."""
        codec = self._codecs.get(held.tp, self.codec)
        events = self.large_messages.decode(codec, held.key, held.value)
        rows = [e for e in events if isinstance(e, RowChange)]
        pack_rows(rows)
        return rows

    def _count_bug(self, record: Record, error: Exception) -> None:
        """Log and count an exception no codec raises on purpose."""
        tp, offset = record[0], record[1]
        log.error(
            "bug: %s offset %d raised %s", tp.field, offset, type(error).__name__, exc_info=error
        )
        DECODE_BUGS.labels(self.store.pipeline).inc()

    def _staged_offsets(self, records: Sequence[Record]) -> dict[TopicPartition, int]:
        """The last staged offset of each partition in ``records`` (-1: none). Redis is asked
        only for a partition whose records do not follow straight on from what this stager
        prepared last (the first batch, a seek, a rebalance): a consumer reads a partition's
        offsets in order."""
        expected: dict[TopicPartition, int] = {}
        unsure = set()
        for tp, offset, _, _ in records:
            # -2 for a partition never staged here: no offset follows it.
            if offset != expected.get(tp, self._last_staged.get(tp, -2) + 1):
                unsure.add(tp)
            expected[tp] = offset + 1
        staged = self.store.staged_offsets(unsure) if unsure else {}
        return {
            tp: staged.get(tp, -1) if tp in unsure else self._last_staged[tp] for tp in expected
        }

    def _decode_in_python(
        self,
        codec: Codec,
        record: Record,
        change: PartitionChange,
        round_trip: StagingRoundTrip,
    ) -> tuple[StagedMessage, bool, int]:
        """What ``record`` stages when the fast path left it, whether it carries schemas, and
        whether it was dead-lettered; a held or dead-lettered message queues its own command."""
        tp, offset, key, value = record
        try:
            return self._stage_in_python(codec, record, change)
        except NotYetDecodableError as missing:
            # Not bad input: its schema comes later (a consumer that started mid-stream).
            round_trip.hold(tp, offset, key, value or b"", missing.commit_ts)
            return StagedMessage(offset), False, 0
        except OUTAGES:
            # An outage (the Simple codec reads its schema cache, the Avro codec the schema
            # registry and its cache), not the message's fault: the line waits it out and
            # prepares the batch again.
            raise
        except TicdcSinkError as error:
            return self._quarantine(record, error, round_trip), False, 1
        except Exception as error:
            # No codec raises this on purpose: the message still goes to the dead letters (one
            # message never stops its partition), and the bug is logged and counted.
            self._count_bug(record, error)
            return self._quarantine(record, error, round_trip), False, 1

    def _stage_in_python(
        self, codec: Codec, record: Record, change: PartitionChange
    ) -> tuple[StagedMessage, bool, int]:
        """:meth:`_decode_in_python` of a message that decodes; what fails raises, and nothing
        of ``change`` is counted before the message has been decoded, checked and packed."""
        tp, offset, key, value = record
        events = self.large_messages.decode(codec, key, value or b"")
        rows = [e for e in events if isinstance(e, RowChange)]
        ddls = [e for e in events if isinstance(e, DDLEvent)]
        marks = [e.commit_ts for e in events if isinstance(e, Resolved)]
        commit_ts = [c.commit_ts for c in rows] + [d.commit_ts for d in ddls]
        if 0 in commit_ts:
            # Canal-JSON without TiCDC's extension: no commit ts, so no order and no watermark.
            raise DecodeError(self.codec.protocol, NO_COMMIT_TS)
        packed = pack_rows(rows)
        if self.idle_marks:
            self._check_late(tp, offset, commit_ts)
        change.rows += len(rows)
        change.marks += marks
        if ddls:
            highest = max(ddl.commit_ts for ddl in ddls)
            change.ddl_ts = max(highest, change.ddl_ts or highest)
        schemas = bool(ddls) or any(isinstance(e, Bootstrap) for e in events)
        watermark = max(marks) if marks else None
        return StagedMessage(offset, packed, ddls, watermark), schemas, 0

    def _check_late(self, tp: TopicPartition, offset: int, commit_ts: list[int]) -> None:
        """Log changes at or below the watermark a quiet partition was moved to: the sink may
        have applied past them already, and then never applies them."""
        mark = self.idle_marks.get(tp)
        late = [ts for ts in commit_ts if mark is not None and ts <= mark]
        if late:
            log.warning(
                "%s offset %d: a change at commit ts %d arrived after the partition was "
                "resolved up to %d when quiet (TICDC_SINK_RESOLVE_WHEN_IDLE): if the sink "
                "has applied past it, it is not applied; raise the quiet time",
                tp.field,
                offset,
                min(late),
                mark,
            )

    def _quarantine(
        self, record: Record, error: Exception, round_trip: StagingRoundTrip
    ) -> StagedMessage:
        """A message that cannot be staged: halt, or dead-letter it, naming the exception's type
        and reason, and go on."""
        tp, offset, key, value = record
        reason = dead_letter_reason(error)
        if self.on_error is OnError.HALT:
            raise HaltedError(
                f"stopped at the bad message at {tp.field} offset {offset} "
                f"({env_name('on_error')}=halt): {reason}"
            ) from error
        log.warning("dead letter %s offset %d: %s", tp.field, offset, reason)
        round_trip.dead_letter(tp, offset, key, value, reason)
        # The offset still counts as staged, so a replay does not dead-letter it twice.
        return StagedMessage(offset)

    def _count(self, batch: PreparedBatch) -> None:
        """Counters and metrics of a staged batch."""
        self.dead_letters += batch.dead_letters
        if batch.dead_letters:
            DEAD_LETTERS.labels(self.store.pipeline).inc(batch.dead_letters)
        for tp, change in batch.changes.items():
            self.rows_staged += change.rows
            self.messages_staged += change.messages
            self._rows_decoded.inc(change.rows)
            self._rows_staged.inc(change.rows)
            if change.ddl_ts is not None:
                self.ddl_ts[tp] = max(change.ddl_ts, self.ddl_ts.get(tp, change.ddl_ts))
            if change.marks:
                self._marks_decoded.inc(len(change.marks))
                # The staged watermark only moves forward: an older resolved event (a replay,
                # a slow partition of TiCDC's) leaves it, and the gauge, where they were.
                mark = max(max(change.marks), self._marks.get(tp, 0))
                self._marks[tp] = mark
                PARTITION_WATERMARK.labels(self.store.pipeline, tp.topic, str(tp.partition)).set(
                    tso_seconds(mark)
                )


def resumed_at(progress: PartitionProgress) -> int:
    """The smallest commit ts a partition's next changes can have, as staging shows it: the
    highest commit ts of its staged rows, or just past its watermark (rows the sink trimmed are
    at or below it), whichever is later; 0 for a partition never staged."""
    after_mark = 0 if progress.watermark is None else progress.watermark + 1
    return max(progress.highest_row_ts or 0, after_mark)


def dead_letter_reason(error: BaseException) -> str:
    """What a dead letter says of the error that made it: the exception's type and its reason,
    on one line (a message's own line breaks become "; ")."""
    try:
        said = str(error)[:DEAD_LETTER_REASON_CHARS]
    except Exception:  # an exception whose own text fails: its type still names it
        said = ""
    text = "; ".join(part.strip() for part in said.splitlines() if part.strip())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
