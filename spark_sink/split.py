"""A transaction the downstream refuses as too large, committed in chunks: the opt-in
``TICDC_SINK_SPLIT_LARGE_TXN``, which gives up that transaction's atomicity as TiCDC's own MySQL
sink does (another reader sees it half-applied until its last chunk commits).

The sink first tries the transaction whole (in parts inside one downstream transaction when it
is larger than a chunk, :mod:`spark_sink.batches`); only the downstream's refusal of it as too
large (:class:`~config.errors.TransactionTooLargeError`) makes the loop split it. Within one
upstream transaction every removal must come before every new image (a key deleted by one row
event may be inserted again by another, TiCDC's split primary-key update), so the split makes
two passes over the transaction's staged changes, read from Redis each time (they stay staged
until the checkpoint passes the transaction): every chunk's removals, then every chunk's new
images. Each chunk of ``TICDC_SINK_CHUNK_ROWS`` changes (in release order, which staging gives
the same every time) is a downstream transaction of its own that records where it ends (commit
ts, pass, changes of the pass done: :mod:`spark_sink.db.split_position`) and the leader's epoch;
so a crash resumes at the next chunk, never applying one twice nor skipping one. A last
transaction advances the checkpoint past the transaction and clears the position. A chunk the
downstream refuses too is halved, down to one change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TypeVar

from config.errors import BatchTooLargeError
from core.model import Op, RowChange
from core.staging import Staging
from core.tso import describe_tso
from spark_sink.db.split_position import SplitPass, SplitPosition
from spark_sink.metrics import record_batch
from spark_sink.plan import TablePlan, Unplannable, plan_batch
from spark_sink.target import Target
from spark_sink.unplannable import dead_letter_all

log = logging.getLogger("ticdc_sink.sink")

Item = TypeVar("Item")


def chunks(changes: Iterable[Item], skip: int, size: int) -> Iterator[tuple[list[Item], int]]:
    """``changes`` past the first ``skip``, in lists of at most ``size``, each with how many of
    ``changes`` are done once it is."""
    done = 0
    chunk: list[Item] = []
    for change in changes:
        if done < skip:
            done += 1
            continue
        chunk.append(change)
        if len(chunk) >= size:
            done += len(chunk)
            yield chunk, done
            chunk = []
    if chunk:
        yield chunk, done + len(chunk)


def pass_changes(changes: Iterable[RowChange], pass_: SplitPass) -> list[RowChange]:
    """What of ``changes`` the pass plans. A table with a key: every change, as it is (the
    planner keeps a key's removal apart from its new image). A key-less table: each change's
    side of the pass alone, its old image's removal or its new image's insert, so the passes
    never net one against the other: a chunk holding the -1 and +1 copy of one image would
    cancel them in one pass, while the other pass, its chunks cut elsewhere (a resumed split,
    a chunk halved), would not."""
    sided = []
    for change in changes:
        if any(kind.is_key for kind in change.columns.values()):
            sided.append(change)
        elif pass_ is SplitPass.REMOVALS and change.op is not Op.INSERT and change.old:
            sided.append(replace(change, op=Op.DELETE, new=None))
        elif pass_ is SplitPass.IMAGES and change.op is not Op.DELETE and change.new:
            sided.append(replace(change, op=Op.INSERT, old=None))
    return sided


def pass_plans(plans: Sequence[TablePlan], pass_: SplitPass) -> list[TablePlan]:
    """What of ``plans`` the pass applies: their removals, or their new images (a key-less
    table's copies go with both: each side reads its own keys' counts)."""
    if pass_ is SplitPass.REMOVALS:
        return [replace(plan, upserts={}) for plan in plans if plan.deletes]
    return [replace(plan, deletes={}) for plan in plans if plan.upserts]


def apply_split(
    staging: Staging,
    target: Target,
    commit_ts: int,
    chunk_rows: int,
    epoch: int,
    stop: threading.Event,
) -> bool:
    """Commit the transaction at ``commit_ts`` in chunks from where its position says (from its
    start when none is recorded for it), then advance the checkpoint past it; False when
    ``stop`` came first (the chunks committed so far stay, the next sink goes on from them)."""
    started = time.perf_counter()
    size = chunk_rows
    while True:
        found = target.split_position()
        position = (
            found
            if found is not None and found.commit_ts == commit_ts
            else SplitPosition(commit_ts, SplitPass.REMOVALS, 0)
        )
        try:
            changes = _apply_chunks(staging, target, position, size, epoch, stop)
        except BatchTooLargeError as error:
            if size == 1:
                raise target.too_large(commit_ts, error.__cause__ or error) from error
            size = max(1, size // 2)
            log.warning("%s; chunks of %d changes from now on", error, size)
            continue
        if changes is None:
            log.info(
                "stopping: the split transaction at ts %s goes on from its position", commit_ts
            )
            return False
        target.finish_split(commit_ts, epoch, staging.replay_offsets(commit_ts))
        record_batch(target.settings.group, changes, time.perf_counter() - started, commit_ts)
        log.info(
            "applied the split transaction at ts %s: its last chunk committed, the checkpoint "
            "advanced",
            describe_tso(commit_ts),
        )
        return True


def _apply_chunks(
    staging: Staging,
    target: Target,
    position: SplitPosition,
    size: int,
    epoch: int,
    stop: threading.Event,
) -> int | None:
    """Every chunk after ``position``, pass by pass; the transaction's changes (None:
    stopped)."""
    ts = position.commit_ts
    total = 0
    for pass_ in SplitPass:
        if pass_ < position.pass_:
            continue
        total = skip = position.done if pass_ is position.pass_ else 0
        # A DDL is a transaction of its own: nothing but row changes shares its commit ts.
        released = (c for c in staging.release(ts - 1, ts) if isinstance(c, RowChange))
        for chunk, done in chunks(released, skip, size):
            if stop.is_set():
                return None
            chunk_start = time.perf_counter()
            unplannable: list[Unplannable] = []
            planned = plan_batch(pass_changes(chunk, pass_), unplannable)
            if pass_ is SplitPass.REMOVALS:
                # Once per transaction: the images pass meets the same changes again.
                settings = target.settings
                dead_letter_all(
                    staging, settings.group, unplannable, settings.redis.dead_letter_max_entries
                )
            plans = pass_plans(planned, pass_)
            target.apply_chunk(plans, SplitPosition(ts, pass_, done), epoch)
            total = done
            log.info(
                "applied the chunk of changes %d-%d of the split transaction at ts %s, %s pass, "
                "in %.3f s; committed",
                done - len(chunk) + 1,
                done,
                ts,
                pass_.name.lower(),
                time.perf_counter() - chunk_start,
            )
    return total
