"""Decode throughput per protocol next to the bare parsing cost of the same bytes.

Prints events/s for each codec's decode and, in the same run, for ``orjson.loads`` over the same
JSON bytes (Open Protocol, Simple JSON, Canal-JSON) or fastavro over the same Avro bytes, and the
ratio. Targets: Open Protocol and Simple JSON at >= 0.50 of their orjson rate; Craft at >= 1.0 of
Open Protocol's rate for the same events. Open Protocol, Craft and Simple JSON decode natively when
``ticdc_sink_native`` is installed; Open Protocol's pure-Python rate is printed too.

    python -m benchmarks.bench_codecs [--rows N] [--repeat R]
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable

import orjson

from streams.codecs import codec_for
from streams.codecs.open_protocol import OpenProtocolCodec, split_frames
from streams.codecs.simple import avro_schema
from streams.native import native_module
from ticdc_sink.workload import make_rows


def best_rate(events: int, run: Callable[[], object], repeat: int) -> float:
    """Events per second of the fastest of ``repeat`` runs (the least disturbed by neighbours)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return events / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = make_rows(args.rows)
    table: list[tuple[str, float, str, float]] = []

    # Open Protocol: 16 events per message; the baseline parses every key and value JSON.
    open_codec = codec_for("open")
    open_messages = open_codec.encode(rows)
    frames = [
        (k, v)
        for m in open_messages
        for k, v in zip(
            split_frames(m.key or b"", 8, "key"), split_frames(m.value, 0, "value"), strict=True
        )
    ]

    def open_decode() -> None:
        decoder = codec_for("open")
        for m in open_messages:
            decoder.decode(m.key, m.value)

    def open_baseline() -> None:
        loads = orjson.loads
        for k, v in frames:
            loads(k)
            loads(v)

    def open_python() -> None:
        decoder = OpenProtocolCodec(native=False)
        for m in open_messages:
            decoder.decode(m.key, m.value)

    open_rate = best_rate(len(rows), open_decode, args.repeat)
    open_base = best_rate(len(rows), open_baseline, args.repeat)
    label = "open" if native_module() is not None else "open (no native)"
    table.append((label, open_rate, "orjson.loads", open_base))
    table.append(
        ("open, Python", best_rate(len(rows), open_python, args.repeat), "orjson.loads", open_base)
    )

    # Craft: rows batched into messages of 16 as well, so the work per message matches.
    craft = codec_for("craft")
    craft.max_batch = 16  # type: ignore[attr-defined]
    craft_messages = craft.encode(rows)

    def craft_decode() -> None:
        decoder = codec_for("craft")
        for m in craft_messages:
            decoder.decode(m.key, m.value)

    craft_rate = best_rate(len(rows), craft_decode, args.repeat)
    table.append(("craft", craft_rate, "open decode", open_rate))

    for protocol in ("simple", "canal-json"):
        messages = codec_for(protocol).encode(rows)
        primed = codec_for(protocol)

        def decode(messages=messages, primed=primed) -> None:  # type: ignore[no-untyped-def]
            for m in messages:
                primed.decode(m.key, m.value)

        def baseline(messages=messages) -> None:  # type: ignore[no-untyped-def]
            loads = orjson.loads
            for m in messages:
                loads(m.value)

        table.append(
            (
                protocol,
                best_rate(len(rows), decode, args.repeat),
                "orjson.loads",
                best_rate(len(rows), baseline, args.repeat),
            )
        )

    import fastavro

    avro_messages = codec_for("simple-avro").encode(rows)
    avro_codec = codec_for("simple-avro")
    schema = avro_schema()

    def avro_decode() -> None:
        for m in avro_messages:
            avro_codec.decode(m.key, m.value)

    def avro_baseline() -> None:
        reader = fastavro.schemaless_reader
        for m in avro_messages:
            reader(io.BytesIO(m.value), schema, None)

    table.append(
        (
            "simple-avro",
            best_rate(len(rows), avro_decode, args.repeat),
            "fastavro reader",
            best_rate(len(rows), avro_baseline, args.repeat),
        )
    )

    print(f"{len(rows)} row events, 10 columns, best of {args.repeat} runs")
    header = ("protocol", "decode ev/s", "baseline", "baseline ev/s", "ratio")
    print("{:16} {:>12} {:>16} {:>14} {:>6}".format(*header))
    for protocol, rate, name, base in table:
        print(f"{protocol:16} {rate:12,.0f} {name:>16} {base:14,.0f} {rate / base:6.2f}")


if __name__ == "__main__":
    main()
