"""The Redis staging contract between the workers and the sink, in one package.

- ``keys.py``: :class:`Keys`, the only place a key name is formed; :class:`TopicPartition`.
- ``layout.py``: the member and script-argument layout (``LAYOUT_VERSION``, shared with
  ``native/src/staging.rs``).
- ``*.lua`` (loaded by ``scripts.py``): the stage, resolve-idle, hold and trim scripts.
- ``framing.py``: a message's staging encoded as command arguments (Python or native).
- ``writer.py``: the worker's writes; ``watermarks.py``: progress reads; ``reader.py``: the
  sink's release and trim; ``members.py``: release's merge by commit ts and member reading;
  ``origins.py``: the Kafka message a released row came in; ``dead_letters.py``: the
  dead-letter stream.
- ``protocols.py``: what the stager and the sink's planning need, for in-memory fakes.
- ``area.py``: :class:`Staging`, all of it over one client.

docs/architecture.md ("The Redis contract") lists every key with its writers and readers.
"""

from core.staging.area import Staging
from core.staging.dead_letters import (
    DeadLetter,
    DeadLetters,
    LetterKind,
    MessageLetter,
    RowLetter,
)
from core.staging.framing import FramedMessage, StagedMessage, frame_message, frame_packed
from core.staging.keys import Keys, TopicPartition
from core.staging.layout import LAYOUT_VERSION, row_member, ts_hex
from core.staging.protocols import ReleaseSource, StagerStore, StagingRoundTrip
from core.staging.reader import Barrier, StagingReader
from core.staging.watermarks import PartitionProgress, Standing, WatermarkReader, past_retired
from core.staging.writer import HeldMessage, StagingBatch, StagingWriter

__all__ = [
    "LAYOUT_VERSION",
    "Barrier",
    "DeadLetter",
    "DeadLetters",
    "FramedMessage",
    "HeldMessage",
    "Keys",
    "LetterKind",
    "MessageLetter",
    "PartitionProgress",
    "ReleaseSource",
    "RowLetter",
    "StagedMessage",
    "StagerStore",
    "Staging",
    "StagingBatch",
    "StagingReader",
    "StagingRoundTrip",
    "StagingWriter",
    "Standing",
    "TopicPartition",
    "WatermarkReader",
    "frame_message",
    "frame_packed",
    "past_retired",
    "row_member",
    "ts_hex",
]
