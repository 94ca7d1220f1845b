"""TiCDC's Avro protocol with a Confluent schema registry: ``wire.py`` the frames and names,
``types.py`` the columns' types and values, ``plans.py`` how a registered schema reads,
``codec.py`` the codec (reading), ``encoder.py`` its writing, ``registry.py`` what it needs of a
registry."""

from __future__ import annotations

from streams.codecs.avro.codec import AvroCodec
from streams.codecs.avro.registry import MemoryRegistry, Registry
from streams.codecs.avro.types import BigintUnsignedMode, DecimalMode

__all__ = ["AvroCodec", "BigintUnsignedMode", "DecimalMode", "MemoryRegistry", "Registry"]
