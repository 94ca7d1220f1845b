"""The ``ticdc-sink`` command: one entry point, a subcommand per job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from config.errors import ConfigError, TicdcSinkError
from config.settings import Protocol, Settings, load_settings
from ticdc_sink import __version__

# Exit codes: 2 is argparse's and the decoder's "bad input"; 1 is any other failure.
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2

Handler = Callable[[argparse.Namespace], int]


def _services(args: argparse.Namespace) -> int:
    from ticdc_sink.services import services_down, services_status, services_up

    if args.action == "up":
        for service, state in services_up():
            print(f"{service.name:8} {service.endpoint}  {state}")
    elif args.action == "down":
        for service, stopped in services_down():
            print(f"{service.name:8} {'stopped' if stopped else 'not ours or not running'}")
    else:
        for service, state in services_status():
            print(f"{service.name:8} {service.endpoint}  {state}")
    return 0


def _decode(args: argparse.Namespace) -> int:
    from ticdc_sink.decode_command import run_decode

    return run_decode(args.protocol, args.key, args.values)


def _demo(args: argparse.Namespace) -> int:
    from ticdc_sink.demo import run_demo

    return run_demo(settings_from(args))


def _worker(args: argparse.Namespace) -> int:
    from streams.worker import run_worker

    return run_worker(settings_from(args))


def _status(args: argparse.Namespace) -> int:
    import asyncio

    import orjson
    import redis

    from spark_sink.downstream import applied_resolved_ts
    from streams.staging import Staging
    from streams.status import kafka_offsets, render, snapshot

    settings = settings_from(args)
    staging = Staging(redis.Redis.from_url(settings.redis_url), settings.group)
    committed, ends = asyncio.run(kafka_offsets(settings, staging.partitions()))
    # None until the sink has recorded a checkpoint downstream.
    checkpoint = applied_resolved_ts(settings) or None
    document = snapshot(staging, committed, ends, checkpoint_ts=checkpoint)
    print(orjson.dumps(document).decode() if args.json else render(document))
    if not document["partitions"] and not args.json:
        print("no partitions known yet: a worker records them from Kafka's metadata at start")
    return 0


def _apply(args: argparse.Namespace) -> int:
    from spark_sink.driver import run_sink

    return run_sink(settings_from(args), once=args.once)


def _recover(args: argparse.Namespace) -> int:
    from ticdc_sink.recover import run_recover

    return run_recover(settings_from(args))


def _produce(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ticdc_sink.produce import run_produce

    settings = settings_from(args)
    topic = args.topic or (settings.topics[0] if settings.topics else None)
    if topic is None:
        raise ConfigError("name the topic: --topic or TICDC_SINK_TOPICS")
    sent, final = run_produce(
        settings,
        topic,
        args.protocol or settings.protocol.value,
        args.partitions,
        args.transactions,
        args.seed,
        Path(args.expected),
        args.duplicates,
        args.schema,
    )
    print(f"sent {sent} messages to {topic}; final resolved ts {final}")
    print(f"expected downstream state: {args.expected}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ticdc_sink.verify import verify

    if args.db or args.truth_db:
        return _verify_against_truth(args)
    ok, report = verify(settings_from(args), Path(args.expected))
    print("\n".join(report))
    print("verify: match" if ok else "verify: MISMATCH")
    return 0 if ok else EXIT_FAILURE


def _verify_against_truth(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ticdc_sink.truth import compare_databases, run_workload

    if not (args.db and args.truth_db):
        raise ConfigError("--db and --truth-db go together")
    settings = settings_from(args)
    if args.workload:
        run_workload(settings, Path(args.workload), args.truth_db)
    report = compare_databases(settings, args.truth_db, args.db)
    print("\n".join(report))
    print("verify: match" if not report else "verify: MISMATCH")
    return EXIT_FAILURE if report else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ticdc-sink",
        description="Replicate TiDB changes from TiCDC's Kafka topics into MySQL-compatible "
        "databases. Settings come from --config and TICDC_SINK_* variables (env wins).",
    )
    parser.add_argument("--version", action="version", version=f"ticdc-sink {__version__}")
    parser.add_argument("--config", metavar="PATH", help="TOML settings file")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    services = commands.add_parser("services", help="install, start and stop local services")
    services.add_argument("action", choices=["up", "down", "status"])
    services.set_defaults(handler=_services)

    decode = commands.add_parser("decode", help="print the events of one Kafka message as JSON")
    decode.add_argument(
        "--protocol",
        required=True,
        choices=["open", "craft", "simple", "simple-avro", "canal-json"],
    )
    decode.add_argument("--key", metavar="KEYFILE", help="the Kafka key (Open Protocol)")
    decode.add_argument(
        "values",
        nargs="*",
        metavar="VALUEFILE",
        help="Kafka value files (default: stdin, '-'); one codec decodes them in turn",
    )
    decode.set_defaults(handler=_decode)

    worker = commands.add_parser("worker", help="consume TiCDC topics and stage them in Redis")
    worker.set_defaults(handler=_worker)

    apply = commands.add_parser("apply", help="apply staged changes to the downstream (the sink)")
    apply.add_argument("--once", action="store_true", help="apply what is resolved now, then exit")
    apply.set_defaults(handler=_apply)

    recover = commands.add_parser(
        "recover", help="after Redis lost its data: replay Kafka from the downstream checkpoint"
    )
    recover.set_defaults(handler=_recover)

    produce = commands.add_parser("produce", help="write a seeded TiCDC-like stream to Kafka")
    produce.add_argument("--topic", help="topic (default: the first of TICDC_SINK_TOPICS)")
    produce.add_argument("--protocol", choices=[p.value for p in Protocol])
    produce.add_argument("--partitions", type=int, default=4)
    produce.add_argument("--transactions", type=int, default=300)
    produce.add_argument("--seed", type=int, default=1)
    produce.add_argument("--duplicates", type=float, default=0.0, help="share of re-sent messages")
    produce.add_argument("--schema", default="shop", help="upstream database of the workload")
    produce.add_argument("--expected", default=".ticdc-sink/expected.json", help="state file")
    produce.set_defaults(handler=_produce)

    verify = commands.add_parser("verify", help="compare the downstream with the expected state")
    verify.add_argument("--expected", default=".ticdc-sink/expected.json")
    verify.add_argument("--db", help="a replicated database, compared with --truth-db instead")
    verify.add_argument("--truth-db", help="the database holding the truth, row for row")
    verify.add_argument(
        "--workload", help="first run this SQL workload (JSON lines, {DB}) into --truth-db"
    )
    verify.set_defaults(handler=_verify)

    status = commands.add_parser("status", help="per-partition progress and the global resolved ts")
    status.add_argument("--json", action="store_true", help="print one JSON document")
    status.set_defaults(handler=_status)

    demo = commands.add_parser("demo", help="run the pipeline end to end on local services")
    demo.set_defaults(handler=_demo)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings for this invocation (``--config`` plus the environment)."""
    return load_settings(args.config)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except TicdcSinkError as exc:
        print(f"ticdc-sink {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
