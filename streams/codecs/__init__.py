"""Decoders and encoders for every protocol TiCDC writes to Kafka.

The codecs know nothing of Faust, Redis or Spark: bytes in, :mod:`core.model` events out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from config.settings import Protocol
from streams.codecs.base import Codec, KafkaMessage
from streams.codecs.open_protocol import OpenProtocolCodec

if TYPE_CHECKING:
    from streams.codecs.avro.registry import Registry
    from streams.codecs.simple_schema import SchemaStore


def codec_for(
    protocol: Protocol | str,
    schemas: SchemaStore | None = None,
    *,
    registry: Registry | None = None,
) -> Codec:
    """A new codec for ``protocol``; the Simple and Debezium codecs keep table schemas in
    ``schemas``, the Avro codec reads and registers its records' schemas in ``registry``."""
    protocol = Protocol(protocol)
    if protocol is Protocol.AVRO:
        from streams.codecs.avro import AvroCodec

        return AvroCodec(registry)
    if protocol is Protocol.OPEN:
        return OpenProtocolCodec()
    if protocol is Protocol.CRAFT:
        from streams.codecs.craft import CraftCodec

        return CraftCodec()
    if protocol is Protocol.SIMPLE:
        from streams.codecs.simple import SimpleJSONCodec

        return SimpleJSONCodec(schemas)
    if protocol is Protocol.SIMPLE_AVRO:
        from streams.codecs.simple_avro import SimpleAvroCodec

        return SimpleAvroCodec(schemas)
    if protocol is Protocol.DEBEZIUM:
        from streams.codecs.debezium import DebeziumCodec

        return DebeziumCodec(schemas)
    from streams.codecs.canal_json import CanalJSONCodec

    return CanalJSONCodec()


__all__ = ["Codec", "KafkaMessage", "codec_for"]
