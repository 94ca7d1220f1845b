"""What the worker does besides staging, on Faust's timers: the partition counts once at start
(with a pattern, new topics looked for every few seconds), then every so often the global
resolved ts as a metric, quiet partitions resolved, a progress line, held messages retried,
partitions no longer fetched told (streams/stall.py).

A tick that meets Redis away is skipped (the next tick tries again), the outage logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Iterator
from typing import Any

import redis
from aiokafka.errors import KafkaError
from faust.exceptions import ConsumerNotStarted

from config.settings import Settings
from core.outage import Outage
from core.redis_client import REDIS_TRANSIENT
from core.staging import PartitionProgress, Staging, TopicPartition
from core.tso import tso_seconds
from streams.idle import IdleView, QuietClock, idle_check_interval, idle_watermark
from streams.metrics import GLOBAL_RESOLVED, PARTITION_WATERMARK
from streams.progress import Progress
from streams.stall import STALL_CHECK_S, STALL_S, StallClock
from streams.worker.line import StagingLine, until_done
from streams.worker.stager import MessageStager
from streams.worker.topics import (
    LOOK_FAILURES,
    TOPICS_REFRESH_S,
    record_matched_topics,
    record_partition_counts,
    subscribe_new,
)

log = logging.getLogger("ticdc_sink.worker")

# How often the worker publishes the global resolved ts as a metric.
METRICS_INTERVAL_S = 5.0
# How often held messages (Simple DML before its schema) are retried without a new schema.
HELD_RETRY_S = 5.0


class Timers:
    """The timers' work for one worker's app, staging and stager."""

    def __init__(
        self,
        app: Any,
        settings: Settings,
        staging: Staging,
        stager: MessageStager,
        line: StagingLine,
        redis_outage: Outage,
    ) -> None:
        self._app = app
        self._settings = settings
        self._staging = staging
        self._stager = stager
        self._line = line
        self._stalls = StallClock()
        # The line's acknowledged batches at the last look for stalls.
        self._acknowledged = 0
        self._redis_outage = redis_outage
        self._startup_outage = Outage("Redis or Kafka", log)
        self._progress = Progress()
        self._quiet = QuietClock()

    def schedule(self) -> None:
        """Have the app run each of these once it has started."""
        app, worker = self._app, self._settings.worker
        if self._settings.kafka.topics_pattern:
            app.timer(interval=TOPICS_REFRESH_S)(self.refresh_topics)
        else:
            app.task(self.record_partition_counts)
        app.timer(interval=METRICS_INTERVAL_S)(self.publish_global_resolved)
        if worker.resolve_when_idle:
            app.timer(interval=idle_check_interval(worker.resolve_when_idle))(
                self.resolve_idle_partitions
            )
        app.timer(interval=worker.progress_interval)(self.report_progress)
        app.timer(interval=HELD_RETRY_S)(self.retry_held)
        app.timer(interval=STALL_CHECK_S)(self.report_stalls)

    async def record_partition_counts(self) -> None:
        # Until it is recorded the global resolved ts stays unknown: never give up on it.
        await until_done(
            self._app,
            functools.partial(record_partition_counts, self._settings, self._staging),
            (redis.RedisError, KafkaError),
            "recording partition counts",
            self._startup_outage,
        )

    async def refresh_topics(self) -> None:
        # A tick that fails is skipped: until the next one records the topic, the sink waits.
        try:
            topics = await record_matched_topics(self._settings, self._staging)
        except LOOK_FAILURES as error:
            self._startup_outage.failed(error, "looking for new topics")
            return
        self._startup_outage.answered()
        subscribe_new(self._app, topics)

    async def publish_global_resolved(self) -> None:
        with self._skip_without_redis("publishing the global resolved ts"):
            resolved = self._staging.global_resolved_ts()
            if resolved is not None:
                GLOBAL_RESOLVED.labels(self._settings.group).set(tso_seconds(resolved))

    async def resolve_idle_partitions(self) -> None:
        with self._skip_without_redis("resolving quiet partitions"):
            await self._resolve_idle(self._settings.worker.resolve_when_idle)

    async def report_progress(self) -> None:
        with self._skip_without_redis("reporting progress"):
            resolved = self._staging.global_resolved_ts()
            assigned = len(self._app.consumer.assignment())
            stager = self._stager
            line = self._progress.line(
                stager.rows_staged, stager.messages_staged, assigned, resolved
            )
            log.info("%s", line)

    async def retry_held(self) -> None:
        # Another worker may have learned the schema a held message waits for.
        with self._skip_without_redis("retrying held messages"):
            if self._staging.held_count():
                self._stager.retry_held()

    async def report_stalls(self) -> None:
        """Warn of each assigned partition behind its log end that has staged nothing for
        STALL_S seconds while the staging line was free (see streams/stall.py)."""
        line = self._line
        stuck = line.in_line > 0 and line.acknowledged == self._acknowledged
        self._acknowledged = line.acknowledged
        try:
            assigned = sorted(self._app.consumer.assignment())
            partitions = _staging_partitions(assigned)
            self._stalls.keep(partitions)
            if stuck or not assigned:
                self._stalls.restart()
                return
            ends, progress = await self._offsets(assigned, partitions)
        except (KafkaError, ConsumerNotStarted, *REDIS_TRANSIENT) as error:
            log.debug("no look at stalled partitions this time: %s", error)
            self._stalls.restart()
            return
        now = time.monotonic()
        for kafka_tp, tp in zip(assigned, partitions, strict=True):
            staged, end = progress[tp].staged_offset, ends.get(kafka_tp)
            if self._stalls.stalled(tp, staged, end, now):
                log.warning(
                    "%s is assigned to this worker but not fetched: Kafka's log ends at offset "
                    "%d, staged up to %s and unmoved for %.0f s while the worker was free; "
                    "restart the worker if it stays so",
                    tp.field,
                    (end or 0) - 1,
                    "nothing" if staged is None else f"offset {staged}",
                    STALL_S,
                )

    @contextlib.contextmanager
    def _skip_without_redis(self, what: str) -> Iterator[None]:
        """A tick skipped while Redis is unreachable (the next tick tries again)."""
        try:
            yield
        except REDIS_TRANSIENT as error:
            self._redis_outage.failed(error, what)
        else:
            self._redis_outage.answered()

    async def _offsets(
        self, assigned: list[Any], partitions: list[TopicPartition]
    ) -> tuple[dict[Any, int], dict[TopicPartition, PartitionProgress]]:
        """Kafka's log-end offset of each of the ``assigned`` partitions, then what staging
        holds of each (``partitions``, the same ones as staging names them); Kafka's and
        Redis's errors are the caller's."""
        ends = await self._app.consumer.highwaters(*assigned)
        progress = await asyncio.to_thread(self._staging.progress, partitions)
        return ends, progress

    async def _resolve_idle(self, idle_s: float) -> None:
        """Move the watermark of each assigned partition that is staged to its log-end offset
        and quiet for ``idle_s`` seconds to the highest commit ts staged from it, or the
        pipeline's highest watermark (see streams/idle.py)."""
        app, staging, stager = self._app, self._staging, self._stager
        assigned = sorted(app.consumer.assignment())
        if not assigned:
            return
        partitions = _staging_partitions(assigned)
        try:
            ends, progress = await self._offsets(assigned, partitions)
        except KafkaError as error:
            log.debug("no log-end offsets this time: %s", error)
            return
        pipeline_watermark = await asyncio.to_thread(staging.highest_watermark)
        now = time.monotonic()
        for kafka_tp, tp in zip(assigned, partitions, strict=True):
            state = progress[tp]
            highest = max(
                (ts for ts in (state.highest_row_ts, stager.ddl_ts.get(tp)) if ts is not None),
                default=None,
            )
            view = IdleView(
                state.staged_offset,
                ends.get(kafka_tp),
                self._quiet.quiet_for(tp, state.staged_offset, now),
                highest,
                state.watermark,
                state.holding,
                pipeline_watermark,
            )
            mark = idle_watermark(view, idle_s)
            if mark is None or state.staged_offset is None:
                continue
            if await asyncio.to_thread(staging.resolve_idle, tp, state.staged_offset, mark):
                stager.idle_marks[tp] = mark
                PARTITION_WATERMARK.labels(staging.pipeline, tp.topic, str(tp.partition)).set(
                    tso_seconds(mark)
                )
                log.info(
                    "%s quiet at its end (offset %d) for %.1f s: watermark moved to %d",
                    tp.field,
                    state.staged_offset,
                    view.quiet_s,
                    mark,
                )


def _staging_partitions(assigned: list[Any]) -> list[TopicPartition]:
    """Faust's partitions as staging names them."""
    return [TopicPartition(kafka_tp.topic, kafka_tp.partition) for kafka_tp in assigned]
