"""Every Redis key name of a pipeline, formed in one place.

Per pipeline (the consumer group), every key is ``tcs:{<pipeline>}:<name>``: the hash tag puts
all of them in one Redis Cluster slot, so one transaction or script touches any of them
atomically. A partition's own keys and hash fields name it ``<topic>:<partition>``.
"""

from __future__ import annotations

from dataclasses import dataclass

# The namespace of every key this project writes.
KEY_NAMESPACE = "tcs"


@dataclass(frozen=True, slots=True)
class TopicPartition:
    """A Kafka partition, as staging names it."""

    topic: str
    partition: int

    @property
    def field(self) -> str:
        """Its name in hash fields and key names: ``<topic>:<partition>``."""
        return f"{self.topic}:{self.partition}"


@dataclass(frozen=True, slots=True)
class Keys:
    """The key names of one pipeline's staging area (see docs/architecture.md for each)."""

    pipeline: str

    def _name(self, name: str) -> str:
        return f"{KEY_NAMESPACE}:{{{self.pipeline}}}:{name}"

    @property
    def pattern(self) -> str:
        """A SCAN pattern matching every key of the pipeline."""
        return self._name("*")

    def rows(self, tp: TopicPartition) -> str:
        """Sorted set of a partition's staged rows (all scores 0, ordered by member)."""
        return self._name(f"rows:{tp.field}")

    def resolved(self, tp: TopicPartition) -> str:
        """Sorted set of a partition's watermark advances: resolved ts + Kafka offset."""
        return self._name(f"resolved:{tp.field}")

    @property
    def layout(self) -> str:
        """The member layout (``LAYOUT_VERSION``) the staged members were written in."""
        return self._name("layout")

    @property
    def ddl(self) -> str:
        return self._name("ddl")

    @property
    def ddl_ids(self) -> str:
        return self._name("ddl-ids")

    @property
    def offsets(self) -> str:
        return self._name("offsets")

    @property
    def watermarks(self) -> str:
        return self._name("watermarks")

    @property
    def partitions(self) -> str:
        return self._name("partitions")

    @property
    def retired(self) -> str:
        """Hash topic -> commit ts (16 hex) of the DROP or RENAME TABLE that took its table away
        (core/staging/retired.py)."""
        return self._name("retired")

    @property
    def dropped_databases(self) -> str:
        """Hash commit ts (16 hex) of a DROP DATABASE -> the topic it was read from: the topics
        standing at that ts are retired (core/staging/retired.py)."""
        return self._name("dropped-databases")

    @property
    def staged(self) -> str:
        return self._name("staged")

    @property
    def held(self) -> str:
        return self._name("held")

    @property
    def held_ts(self) -> str:
        return self._name("held-ts")

    @property
    def schemas(self) -> str:
        return self._name("schemas")

    @property
    def registry_schemas(self) -> str:
        """Hash of Avro schemas fetched from a schema registry, by registry and schema id."""
        return self._name("registry-schemas")

    @property
    def dead_letters(self) -> str:
        return self._name("deadletters")

    @property
    def trimmed(self) -> str:
        return self._name("trimmed")

    @property
    def lineage(self) -> str:
        return self._name("lineage")

    @property
    def leader(self) -> str:
        """The sink's lease (SET NX PX)."""
        return self._name("sink-leader")

    @property
    def leader_epoch(self) -> str:
        """The counter of lease acquisitions, recorded with the checkpoint (fencing)."""
        return self._name("sink-leader:epoch")
