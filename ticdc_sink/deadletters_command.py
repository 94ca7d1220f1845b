"""`ticdc-sink deadletters list|show|export|replay|purge`: the dead-letter stream by hand, both
kinds of letter (``core/staging/dead_letters.py``).

A row letter's replay writes the row downstream (``row_replay.py``). A message letter's replay
decodes the message (as it was, or a fixed key or value from a file) with the
pipeline's codec and stages its rows at their place in commit order; the sink applies them on
its next round. That is only sound while the downstream checkpoint is below the message's
commit ts and no sink runs (it could move past them while they are staged), which it checks.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import orjson

from config.errors import ConfigError, DecodeError, NotYetDecodableError, ReplayRefusedError
from config.settings import Protocol, Settings
from core.model import DDLEvent, RowChange
from core.redis_client import redis_client
from core.staging import DeadLetter, DeadLetters, MessageLetter, RowLetter, Staging
from core.tso import describe_tso
from streams.codecs import codec_for
from streams.large_messages import LargeMessages
from streams.schema_store import RedisSchemaStore
from ticdc_sink.status_command import read_checkpoint

# Characters of an error a listing shows (``show`` prints it whole).
LIST_ERROR_CHARS = 80
# Entries a listing shows unless told otherwise.
DEFAULT_LIST_LIMIT = 20


def _store(settings: Settings) -> tuple[Staging, DeadLetters]:
    staging = Staging(redis_client(settings), settings.group)
    return staging, staging.dead_letters


def _letter(store: DeadLetters, entry: str, pipeline: str) -> DeadLetter:
    letter = store.get(entry)
    if letter is None:
        raise ConfigError(f"no dead letter {entry!r} in pipeline {pipeline!r} (see: list)")
    return letter


def run_list(settings: Settings, limit: int) -> int:
    _, store = _store(settings)
    letters = store.entries(limit)
    print(f"pipeline {settings.group}: {store.count()} dead letters")
    for letter in letters:
        error = letter.error[:LIST_ERROR_CHARS]
        print(f"{letter.id:20} {letter.time}  {letter.kind:7}  {letter.where}  {error}")
    return 0


def run_show(settings: Settings, entry: str) -> int:
    _, store = _store(settings)
    letter = _letter(store, entry, settings.group)
    print(f"id         {letter.id} (dead-lettered {letter.time})")
    print(f"kind       {letter.kind}")
    if isinstance(letter, RowLetter):
        print(f"table      {letter.table} (downstream {letter.target or 'not recorded'})")
        print(f"key        {letter.key}")
        print(f"column     {letter.column or 'unknown'}")
        print(f"commit ts  {letter.commit_ts}")
        if letter.tp is not None:
            print(f"message    {letter.tp.field} offset {letter.offset}")
        print(f"error      {letter.error}")
        print(f"row        {letter.row}")
        print(f"before     {letter.before if letter.before is not None else 'not recorded'}")
        return 0
    print(f"message    {letter.tp.field} offset {letter.offset}")
    print(f"error      {letter.error}")
    for name, data in (("key", letter.key), ("value", letter.value)):
        print(f"{name:10} {_printable(data)}")
    return 0


def _printable(data: bytes) -> str:
    """Bytes as text when they are UTF-8 without control characters, else base64."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        text = None
    if text is not None and all(c.isprintable() or c in "\n\t" for c in text):
        return f"({len(data)} B, text) {text}"
    return f"({len(data)} B, base64) {base64.b64encode(data).decode()}"


def run_export(settings: Settings, output: str) -> int:
    """Every dead letter as one JSON object a line (key and value in base64)."""
    _, store = _store(settings)
    lines = [orjson.dumps(letter.document()).decode() for letter in store.entries()]
    text = "".join(line + "\n" for line in lines)
    if output == "-":
        sys.stdout.write(text)
    else:
        Path(output).write_text(text)
        print(f"exported {len(lines)} dead letters to {output}", file=sys.stderr)
    return 0


def run_replay(
    settings: Settings,
    entry: str,
    key_file: str | None,
    value_file: str | None,
    keep: bool,
) -> int:
    """A message letter: decode it (fixed from files, if given) and stage its rows. A row
    letter: write its row downstream. Then drop it, unless ``keep``."""
    staging, store = _store(settings)
    letter = _letter(store, entry, settings.group)
    if isinstance(letter, RowLetter):
        if key_file or value_file:
            raise ConfigError(f"dead letter {entry} is a row: --key and --value fix messages")
        from ticdc_sink.row_replay import replay_row

        done = replay_row(settings, letter)
        if not keep:
            store.delete([entry])
        print(done + ("" if keep else f"; dead letter {entry} removed"))
        return 0
    return _replay_message(settings, staging, store, letter, key_file, value_file, keep)


def _replay_message(
    settings: Settings,
    staging: Staging,
    store: DeadLetters,
    letter: MessageLetter,
    key_file: str | None,
    value_file: str | None,
    keep: bool,
) -> int:
    entry = letter.id
    key = Path(key_file).read_bytes() if key_file else letter.key
    value = Path(value_file).read_bytes() if value_file else letter.value
    registry = None
    if settings.kafka.protocol is Protocol.AVRO:
        from streams.schema_registry import SchemaRegistry

        registry = SchemaRegistry.from_settings(
            settings, staging, patience=settings.startup_timeout
        )
    codec = codec_for(
        settings.kafka.protocol, RedisSchemaStore(staging.schemas()), registry=registry
    )
    try:
        # Made whole as the worker makes it: claim checks read, handle-key-only rows fetched.
        events = LargeMessages.from_settings(settings).decode(codec, key or None, value)
    except (DecodeError, NotYetDecodableError) as error:
        raise ReplayRefusedError(f"dead letter {entry} still does not decode: {error}") from None
    if any(isinstance(e, DDLEvent) for e in events):
        raise ReplayRefusedError(
            f"dead letter {entry} holds DDL: run it downstream by hand, then purge it"
        )
    rows = [e for e in events if isinstance(e, RowChange)]
    if any(row.commit_ts == 0 for row in rows):
        raise ReplayRefusedError(f"dead letter {entry} has rows without a commit ts")
    if rows:
        _check_replayable(settings, staging, entry, min(row.commit_ts for row in rows))
    staged = staging.stage_late(letter.tp, letter.offset, rows)
    if not keep:
        store.delete([entry])
    print(
        f"staged {staged} rows of {letter.tp.field} offset {letter.offset}"
        + ("" if keep else f"; dead letter {entry} removed"),
    )
    return 0


def _check_replayable(settings: Settings, staging: Staging, entry: str, first_ts: int) -> None:
    """Refuse while a sink runs or once the downstream is past ``first_ts``: the rows would
    never be applied (or, applied by hand, could overwrite newer changes)."""
    if staging.sink_leads():
        raise ReplayRefusedError(
            f"a sink leads pipeline {settings.group!r}: stop it before a replay (it could move "
            "past the message while it is staged), then start it again"
        )
    checkpoint = read_checkpoint(settings)
    if checkpoint is not None and checkpoint >= first_ts:
        raise ReplayRefusedError(
            f"dead letter {entry}: the downstream is at ts {describe_tso(checkpoint)}, past the "
            f"message's commit ts {describe_tso(first_ts)}; staged now it would never be "
            "applied (export it and apply the change by hand, with care)"
        )


def run_purge(settings: Settings, entries: list[str], assume_yes: bool) -> int:
    """Delete the given dead letters, or (none given) all of them after confirmation."""
    _, store = _store(settings)
    if entries:
        deleted = store.delete(entries)
        print(f"deleted {deleted} of {len(entries)} dead letters")
        return 0
    if not assume_yes:
        if not sys.stdin.isatty():
            raise ConfigError(
                f"purge deletes every dead letter of pipeline {settings.group!r}: pass --yes "
                "to confirm (stdin is not a terminal)"
            )
        answer = input(f"delete all {store.count()} dead letters of {settings.group}? [y/N] ")
        if answer.strip().lower() not in {"y", "yes"}:
            print("nothing deleted")
            return 1
    print(f"deleted {store.purge()} dead letters")
    return 0
