"""The one exception hierarchy of ticdc-sink.

Every error the project raises on purpose derives from :class:`TicdcSinkError`, so a caller can
catch the family, and each layer adds the specific errors it needs here, in one place.
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from typing import Any

# How much of a value an error message shows: enough to find it in the message, bounded however
# large or deeply nested the input is (a builtin repr of JSON nested 1,000 deep recurses past
# Python's limit, and of an integer past 4,300 digits raises).
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel = 2
_SHOWN.maxdict = _SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxset = 4
_SHOWN.maxstring = _SHOWN.maxlong = _SHOWN.maxother = 40
# An integer of more bits is shown by its size: the builtin repr refuses past 4,300 digits.
_SHOWN_BITS = 256


class TicdcSinkError(Exception):
    """Base of every error raised on purpose by ticdc-sink."""


def one_line(command: str, error: BaseException) -> str:
    """How a process reports the error that stops it: one line, ``ticdc-sink <command>: ...``
    (a supervisor's log shows each line on its own; a message's own line breaks become "; ")."""
    text = "; ".join(part.strip() for part in str(error).splitlines() if part.strip())
    return f"ticdc-sink {command}: {text or type(error).__name__}"


def shown(value: object) -> str:
    """``value`` as an error message names it: a repr cut short, whatever the input's depth or
    size (every error naming a value from a message renders it here)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _SHOWN_BITS:
        return f"<an integer of {value.bit_length()} bits>"
    try:
        return _SHOWN.repr(value)
    except Exception:  # a value whose own repr fails: its type still says what it is
        return f"<{type(value).__name__}>"


class StopRequested(BaseException):
    """SIGTERM or SIGINT arrived: unwind (``finally`` blocks run) and exit without a traceback.

    A BaseException, so that ``except Exception`` on the way up does not swallow it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by signal {signum}")


class ConfigError(TicdcSinkError):
    """A setting is missing or has a value that is not allowed."""


class ServiceError(TicdcSinkError):
    """A local service could not be installed, started or reached."""


class DecodeError(TicdcSinkError):
    """A message does not decode under its protocol.

    ``protocol`` names the codec, ``event_index`` the event within the message (when known) and
    ``where`` the byte offset or field at which decoding failed.
    """

    def __init__(
        self,
        protocol: str,
        reason: str,
        *,
        event_index: int | None = None,
        where: str | None = None,
    ) -> None:
        self.protocol = protocol
        self.reason = reason
        self.event_index = event_index
        self.where = where
        parts = [f"{protocol}: {reason}"]
        if event_index is not None:
            parts.append(f"event {event_index}")
        if where is not None:
            parts.append(f"at {where}")
        super().__init__(", ".join(parts))


class GrammarError(DecodeError):
    """A message of a shape its protocol's encoder never writes (well-formed bytes and JSON):
    ``rule`` names the rule of the protocol's grammar it breaks (``streams/codecs/*_grammar.py``),
    as its dead letter says."""

    def __init__(
        self,
        protocol: str,
        rule: str,
        reason: str,
        *,
        event_index: int | None = None,
        where: str | None = None,
    ) -> None:
        self.rule = rule
        super().__init__(
            protocol, f"breaks rule {rule}: {reason}", event_index=event_index, where=where
        )


class NotYetDecodableError(TicdcSinkError):
    """A hold signal, not bad input: the message decodes once something it depends on has
    arrived (its table's schema). The worker holds it, capping its partition's progress just
    below ``commit_ts``, and stages it then. Deliberately not a :class:`DecodeError`, so that no
    handler of undecodable messages can dead-letter it."""

    def __init__(self, protocol: str, reason: str, commit_ts: int) -> None:
        self.protocol = protocol
        self.reason = reason
        self.commit_ts = commit_ts
        super().__init__(f"{protocol}: {reason}")


class MissingSchemaError(NotYetDecodableError):
    """A Simple protocol DML message arrived before the table schema version it was encoded
    with (a consumer that started mid-stream: the schema comes with a later BOOTSTRAP or DDL)."""

    def __init__(
        self, protocol: str, schema: str, table: str, version: int, commit_ts: int
    ) -> None:
        super().__init__(
            protocol,
            f"no table schema yet for {schema}.{table} at version {version}, at schemaVersion",
            commit_ts,
        )
        self.schema = schema
        self.table = table
        self.version = version


class LargeMessageError(DecodeError):
    """A message TiCDC cut down for size (``large-message-handle-option``) cannot be made whole:
    its claim-check object is unreadable, or its handle-key-only row cannot be read upstream."""


class HaltedError(TicdcSinkError):
    """The worker stopped at a message it could not stage, as ``TICDC_SINK_ON_ERROR=halt`` asks."""


class EncodeError(TicdcSinkError):
    """Events cannot be encoded under a protocol (a value of the wrong type, say)."""


class StagingError(TicdcSinkError):
    """Redis staging failed or holds data that breaks an invariant."""


class StagingLostError(StagingError):
    """Redis no longer holds what was staged after the downstream checkpoint (it was flushed or
    replaced): applying on would skip changes, so the sink stops until a recovery replays them."""


class ApplyError(TicdcSinkError):
    """The downstream rejected a batch in a way that retrying will not fix."""


class TransientApplyError(ApplyError):
    """A step of applying a batch failed in a way a retry may fix (a Spark load whose JDBC
    connections were cut, say): the batch is retried from its staging load."""


class TransactionTooLargeError(TransientApplyError):
    """One upstream transaction is larger than the downstream takes in one transaction: nothing
    of it was applied; the sink waits (the operator raises the limit) and tries again."""

    @classmethod
    def of(cls, resolved_ts: int, error: BaseException, limit: str) -> TransactionTooLargeError:
        """The one line that says the transaction at ``resolved_ts`` outgrew the downstream,
        naming the ``limit`` to raise."""
        return cls(
            f"the upstream transaction at ts {resolved_ts} is larger than the downstream takes "
            f"in one transaction ({error}): raise {limit}; nothing of it was applied, the sink "
            "tries again"
        )


class PartsRestartError(ApplyError):
    """The parts of a transaction larger than a chunk were rolled back to be applied again
    another way (every image staged); nothing of them was applied, nothing is wrong."""


class BatchAbandonedError(ApplyError):
    """A batch applied beside others was rolled back because a batch before it failed an
    attempt: nothing of it was applied, nothing is wrong with it; the loop reads it again
    from the checkpoint."""


class LostLeadershipError(ApplyError):
    """Another sink instance has taken over this pipeline (a newer epoch is recorded)."""


class BatchTooLargeError(ApplyError):
    """A batch outgrew the downstream's transaction size limit (TiDB's txn-total-size-limit):
    nothing of it was applied; the sink cuts its batches smaller and applies them again."""

    def __init__(self, message: str, resolved_ts: int = 0) -> None:
        super().__init__(message)
        self.resolved_ts = resolved_ts


class DDLError(ApplyError):
    """A DDL cannot be made to run downstream, or the downstream refused it."""


class SchemaDriftError(ApplyError):
    """The upstream's changes name a table or column the downstream does not have."""


class ReplayRefusedError(TicdcSinkError):
    """A dead letter cannot be replayed as it stands (it does not decode, or the sink has
    moved past it)."""


class NothingToCompareError(TicdcSinkError):
    """``verify`` was asked to compare something that is not there (a missing database, one
    without tables, a database with itself): a match over nothing would prove nothing."""


class SchemaRegistryError(TicdcSinkError):
    """A schema registry answered, but not with what was asked: no schema by that id, a
    schema it refuses to register, an answer that is no registry's. Its message names the
    registry (password masked)."""


class UnknownSchemaError(SchemaRegistryError):
    """A message names a schema id the registry does not know (Confluent's error 40403): the
    message cannot be decoded, and goes to the dead letters with this message."""

    def __init__(self, schema_id: int, registry: str) -> None:
        self.schema_id = schema_id
        self.registry = registry
        super().__init__(f"schema id {schema_id} is unknown to the schema registry at {registry}")


class RegistryUnavailableError(ServiceError):
    """The schema registry is away: no answer (refused, reset, timed out), 5xx, a refused login,
    a page that is no registry's. The client waits it out; it leaves the client only past the
    wait a one-shot command allows, or while the process is stopping. Never the message's
    fault: a worker must not dead-letter a message for it (it re-raises it, as a Redis
    outage)."""


class UnreachableError(ServiceError):
    """A service was still not reachable when the startup timeout ran out."""


class RowRefusedError(ApplyError):
    """The downstream refuses rows of a batch (a value out of range, an invalid date): retrying
    will not help. ``rows`` are the refused rows, each naming its table, key, column, commit ts
    and the server's error; the message names the first."""

    def __init__(self, message: str, rows: Sequence[Any]) -> None:
        super().__init__(message)
        self.rows = list(rows)
