"""`ticdc-sink decode`: print the events of Kafka messages as JSON lines."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from config.errors import DecodeError
from streams.codecs import codec_for
from streams.codecs.event_json import event_json

EXIT_BAD_INPUT = 2


def _read(path: str) -> bytes:
    return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()


def run_decode(protocol: str, key_path: str | None, value_paths: list[str]) -> int:
    """Decode each value file in turn (one codec, so Simple schemas carry over); exit 2 on error."""
    codec = codec_for(protocol)
    key = _read(key_path) if key_path else None
    out = sys.stdout.buffer
    for path in value_paths or ["-"]:
        try:
            events = codec.decode(key, _read(path))
        except DecodeError as exc:
            out.flush()
            print(f"ticdc-sink decode: {path}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        for event in events:
            out.write(orjson.dumps(event_json(event)) + b"\n")
    out.flush()
    return 0
