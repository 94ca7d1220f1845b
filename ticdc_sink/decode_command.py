"""`ticdc-sink decode`: print the events of Kafka messages as JSON lines."""

from __future__ import annotations

import base64
import binascii
import gzip
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from config.errors import DecodeError, NotYetDecodableError
from streams.codecs import Codec, codec_for
from streams.codecs.event_json import event_json

if TYPE_CHECKING:
    from streams.codecs.avro import Registry

EXIT_BAD_INPUT = 2


def _read(path: str) -> bytes:
    return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()


def _stream(path: str) -> Iterator[tuple[int, int, bytes | None, bytes]]:
    """(line number, partition, key, value) of each line of a stream file (gzip when it ends in
    ``.gz``); ``ValueError`` naming the line that is not one."""
    data = Path(path).read_bytes()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    for number, line in enumerate(data.splitlines(), 1):
        try:
            item = orjson.loads(line)
            key = None if item["k"] is None else base64.b64decode(item["k"], validate=True)
            # A null value is a tombstone: an Avro delete (the codec reads it as empty).
            value = b"" if item["v"] is None else base64.b64decode(item["v"], validate=True)
            partition = int(item["p"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, binascii.Error):
            raise ValueError(f"line {number} is not a {{p, k, v}} object") from None
        yield number, partition, key, value


def _fail(path: str, error: Exception) -> int:
    sys.stdout.buffer.flush()
    print(f"ticdc-sink decode: {path}: {error}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run_decode(
    protocol: str,
    key_paths: list[str],
    value_paths: list[str],
    stream_paths: list[str],
    registry: Registry | None = None,
) -> int:
    """Decode each value file in turn with one codec (so Simple schemas carry over), the n-th
    with the n-th key file; then each stream file's messages, a codec per partition, each event
    with its partition; Avro records with the schemas of ``registry``. Exit 2 on bad input."""
    out = sys.stdout.buffer
    if key_paths and len(key_paths) != len(value_paths):
        print(
            f"ticdc-sink decode: {len(key_paths)} --key files for {len(value_paths)} value"
            " files: give one key file per value file, in the same order",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    codec = codec_for(protocol, registry=registry)
    if not stream_paths and not value_paths:
        value_paths = ["-"]
    for index, path in enumerate(value_paths):
        key = _read(key_paths[index]) if key_paths and key_paths[index] else None
        try:
            events = codec.decode(key, _read(path))
        except (DecodeError, NotYetDecodableError) as exc:
            return _fail(path, exc)
        for event in events:
            out.write(orjson.dumps(event_json(event)) + b"\n")
    for path in stream_paths:
        codecs: dict[int, Codec] = {}
        try:
            for number, partition, key, value in _stream(path):
                partition_codec = codecs.get(partition) or codecs.setdefault(
                    partition, codec_for(protocol, registry=registry)
                )
                try:
                    events = partition_codec.decode(key, value)
                except (DecodeError, NotYetDecodableError) as exc:
                    return _fail(f"{path}: line {number}", exc)
                for event in events:
                    line = {**event_json(event), "partition": partition}
                    out.write(orjson.dumps(line) + b"\n")
        except ValueError as exc:
            return _fail(path, exc)
    out.flush()
    return 0
