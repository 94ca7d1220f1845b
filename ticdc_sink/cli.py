"""The ``ticdc-sink`` command: one entry point, a subcommand per job."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, NoReturn

from config.errors import ConfigError, StopRequested, TicdcSinkError, one_line
from config.logs import configure_logging
from config.settings import Protocol, Settings, load_settings
from config.signals import STOP_SIGNALS
from ticdc_sink import __version__

# Exit codes: 2 is argparse's and the decoder's "bad input" (a bad argument or setting too); 1 is
# any other failure; a command stopped by a signal exits 128 + its number, as shells report it.
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_SIGNALLED = 128
# Processes a supervisor runs and stops: asked to stop, they exit 0 even when the signal comes
# while they still start (before the worker's Faust or the sink's loop took the signals over).
SERVICE_COMMANDS = frozenset({"worker", "apply"})

Handler = Callable[[argparse.Namespace], int]


def checked_settings(
    args: argparse.Namespace, *, kafka: bool = False, redis: bool = False, downstream: bool = False
) -> Settings:
    """The settings, once the services a command needs took their TLS and credentials: a
    misconfiguration stops the command with one line naming the setting."""
    settings = settings_from(args)
    if kafka:
        import asyncio

        from core.connectivity import check_kafka

        asyncio.run(check_kafka(settings))
    if redis:
        from core.connectivity import check_redis

        check_redis(settings)
    if downstream:
        from spark_sink.db.connection import check_downstream

        check_downstream(settings)
    return settings


def _services(args: argparse.Namespace) -> int:
    from ticdc_sink.services import services_down, services_status, services_up, state_dir

    if args.action == "up":
        for service, state in services_up(secure=args.secure, spark=args.spark_cluster):
            print(f"{service.name:14} {service.endpoint}  {state}")
        if args.secure:
            from ticdc_sink.services.secure import SECURE_ENV

            print(f"settings for the secured services: source {state_dir() / SECURE_ENV}")
    elif args.action == "down":
        for service, stopped in services_down():
            print(f"{service.name:14} {'stopped' if stopped else 'not ours or not running'}")
    else:
        for service, state in services_status(secure=args.secure):
            print(f"{service.name:14} {service.endpoint}  {state}")
    return 0


def _decode(args: argparse.Namespace) -> int:
    from ticdc_sink.decode_command import run_decode

    return run_decode(args.protocol, args.key, args.values, args.stream)


def _demo(args: argparse.Namespace) -> int:
    from ticdc_sink.demo import run_demo

    return run_demo(checked_settings(args, kafka=True, redis=True, downstream=True), args.config)


def _worker(args: argparse.Namespace) -> int:
    from streams.worker.app import run_worker

    return run_worker(checked_settings(args, kafka=True, redis=True))


def _status(args: argparse.Namespace) -> int:
    from ticdc_sink.status_command import run_status

    return run_status(
        checked_settings(args, kafka=True, redis=True, downstream=True), as_json=args.json
    )


def _deadletters(args: argparse.Namespace) -> int:
    from ticdc_sink import deadletters_command as command

    settings = settings_from(args)
    if args.action == "list":
        return command.run_list(settings, args.limit)
    if args.action == "show":
        return command.run_show(settings, args.id)
    if args.action == "export":
        return command.run_export(settings, args.output)
    if args.action == "replay":
        return command.run_replay(settings, args.id, args.key, args.value, args.keep)
    return command.run_purge(settings, args.ids, args.yes)


def _config(args: argparse.Namespace) -> int:
    from ticdc_sink.config_command import run_describe

    return run_describe(settings_from(args), as_json=args.json)


def _apply(args: argparse.Namespace) -> int:
    from spark_sink.run import run_sink

    return run_sink(checked_settings(args, redis=True, downstream=True), once=args.once)


def _skip_ddl(args: argparse.Namespace) -> int:
    from spark_sink.ddl.skip import request_skip_ddl

    print(request_skip_ddl(settings_from(args), args.ts))
    return 0


def _recover(args: argparse.Namespace) -> int:
    from ticdc_sink.recover import run_recover

    return run_recover(
        checked_settings(args, kafka=True, redis=True, downstream=True),
        dry_run=args.dry_run,
        assume_yes=args.yes,
    )


def _produce(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ticdc_sink.produce import run_produce

    settings = checked_settings(args, kafka=True)
    topic = args.topic or (settings.kafka.topics[0] if settings.kafka.topics else None)
    if topic is None:
        raise ConfigError("name the topic: --topic or TICDC_SINK_TOPICS")
    sent, final = run_produce(
        settings,
        topic,
        args.protocol or settings.kafka.protocol.value,
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
    ok, report = verify(checked_settings(args, downstream=True), Path(args.expected))
    print("\n".join(report))
    print("verify: match" if ok else "verify: MISMATCH")
    return 0 if ok else EXIT_FAILURE


def _verify_against_truth(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ticdc_sink.truth import compare_databases, run_workload

    if not (args.db and args.truth_db):
        raise ConfigError("--db and --truth-db go together")
    settings = checked_settings(args, downstream=True)
    if args.workload:
        run_workload(settings, Path(args.workload), args.truth_db)
    report = compare_databases(settings, args.truth_db, args.db)
    print("\n".join(report))
    print("verify: match" if not report else "verify: MISMATCH")
    return EXIT_FAILURE if report else 0


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad argument reported in one line (and a pointer to ``--help``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ticdc-sink",
        description="Replicate TiDB changes from TiCDC's Kafka topics into MySQL-compatible "
        "databases. Settings come from --config and TICDC_SINK_* variables (env wins).",
    )
    parser.add_argument("--version", action="version", version=f"ticdc-sink {__version__}")
    parser.add_argument("--config", metavar="PATH", help="TOML settings file")
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )

    services = commands.add_parser("services", help="install, start and stop local services")
    services.add_argument("action", choices=["up", "down", "status"])
    services.add_argument(
        "--secure",
        action="store_true",
        help="also TLS/SASL-secured Kafka, MariaDB and Redis (settings: <state dir>/secure.env)",
    )
    services.add_argument(
        "--spark-cluster",
        action="store_true",
        help="with up: also a Spark standalone master and two workers (spark://127.0.0.1:7077)",
    )
    services.set_defaults(handler=_services)

    decode = commands.add_parser("decode", help="print the events of Kafka messages as JSON")
    decode.add_argument("--protocol", required=True, choices=[p.value for p in Protocol])
    decode.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="KEYFILE",
        help="the Kafka key of the value file in the same place (repeat: one per value file;"
        " '' for none)",
    )
    decode.add_argument(
        "--stream",
        action="append",
        default=[],
        metavar="STREAMFILE",
        help="JSON lines {p, k, v} (base64 key and value, .gz read as gzip), as in"
        " conformance/ticdc_encoded; a codec per partition (repeatable)",
    )
    decode.add_argument(
        "values",
        nargs="*",
        metavar="VALUEFILE",
        help="Kafka value files (default without --stream: stdin, '-'); one codec decodes them"
        " in turn",
    )
    decode.set_defaults(handler=_decode)

    worker = commands.add_parser("worker", help="consume TiCDC topics and stage them in Redis")
    worker.set_defaults(handler=_worker)

    apply = commands.add_parser("apply", help="apply staged changes to the downstream (the sink)")
    apply.add_argument("--once", action="store_true", help="apply what is resolved now, then exit")
    apply.set_defaults(handler=_apply)

    skip_ddl = commands.add_parser(
        "skip-ddl", help="make the sink skip a DDL the downstream refuses (by its commit ts)"
    )
    skip_ddl.add_argument("--ts", type=int, required=True, help="the DDL's commit ts")
    skip_ddl.set_defaults(handler=_skip_ddl)

    recover = commands.add_parser(
        "recover", help="after Redis lost its data: replay Kafka from the downstream checkpoint"
    )
    recover.add_argument(
        "--dry-run",
        action="store_true",
        help="show what would be rewound and cleared, change nothing",
    )
    recover.add_argument("--yes", action="store_true", help="do not ask for confirmation")
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

    verify = commands.add_parser(
        "verify",
        help="compare the downstream with the expected state",
        description="Compare the downstream that TICDC_SINK_DOWNSTREAM names (MariaDB, MySQL or"
        " TiDB: the local TiDB is mysql://root@127.0.0.1:4000/) with the state `produce` expected,"
        " or a replicated database with a truth database on the same server, row for row.",
    )
    verify.add_argument(
        "--expected",
        default=".ticdc-sink/expected.json",
        help="the state file `produce --expected` wrote (default: %(default)s)",
    )
    verify.add_argument("--db", help="a replicated database, compared with --truth-db instead")
    verify.add_argument("--truth-db", help="the database holding the truth, row for row")
    verify.add_argument(
        "--workload", help="first run this SQL workload (JSON lines, {DB}) into --truth-db"
    )
    verify.set_defaults(handler=_verify)

    status = commands.add_parser("status", help="per-partition progress and the global resolved ts")
    status.add_argument("--json", action="store_true", help="print one JSON document")
    status.set_defaults(handler=_status)

    _add_deadletters(commands)

    config = commands.add_parser(
        "config", help="describe every setting: its variable, its value here, what it means"
    )
    config.add_argument("action", choices=["describe"])
    config.add_argument("--json", action="store_true", help="print one JSON document")
    config.set_defaults(handler=_config)

    demo = commands.add_parser(
        "demo",
        help="run the pipeline end to end on local services",
        description="Produce a TiCDC Open Protocol stream to a fresh topic, replicate it with a"
        " worker and a sink into the downstream TICDC_SINK_DOWNSTREAM names (MariaDB by default;"
        " TICDC_SINK_DOWNSTREAM=mysql://root@127.0.0.1:4000/ for the local TiDB), and verify it.",
    )
    demo.set_defaults(handler=_demo)

    for command in commands.choices.values():
        # --config after the subcommand too; SUPPRESS keeps one given before it from being reset.
        command.add_argument(
            "--config", metavar="PATH", default=argparse.SUPPRESS, help="TOML settings file"
        )
    return parser


def _add_deadletters(commands: Any) -> None:
    from ticdc_sink.deadletters_command import DEFAULT_LIST_LIMIT

    deadletters = commands.add_parser(
        "deadletters", help="list, show, export, replay or purge the dead letters"
    )
    deadletters.set_defaults(handler=_deadletters)
    actions = deadletters.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the oldest dead letters, one a line")
    listing.add_argument("--limit", type=int, default=DEFAULT_LIST_LIMIT, help="how many")
    show = actions.add_parser("show", help="one dead letter in full")
    show.add_argument("id", help="its stream id (see list)")
    export = actions.add_parser("export", help="every dead letter as JSON lines (base64 bytes)")
    export.add_argument("--output", default="-", metavar="FILE", help="file (default: stdout)")
    replay = actions.add_parser(
        "replay", help="decode a dead letter again (fixed from files) and stage its rows"
    )
    replay.add_argument("id", help="its stream id (see list)")
    replay.add_argument("--key", metavar="FILE", help="the fixed Kafka key")
    replay.add_argument("--value", metavar="FILE", help="the fixed Kafka value")
    replay.add_argument("--keep", action="store_true", help="keep the dead letter once staged")
    purge = actions.add_parser("purge", help="delete dead letters (all, after confirmation)")
    purge.add_argument("ids", nargs="*", metavar="ID", help="only these")
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    for action in actions.choices.values():
        action.add_argument(
            "--config", metavar="PATH", default=argparse.SUPPRESS, help="TOML settings file"
        )


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings for this invocation (``--config`` plus the environment); logging from
    then on is in their level and format, each record naming the pipeline."""
    settings = load_settings(args.config)
    configure_logging(settings.logging.level, settings.logging.format, settings.group)
    return settings


def _stop_requested(signum: int, _: FrameType | None) -> None:
    raise StopRequested(signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    configure_logging()
    # Unwind on SIGTERM as on Ctrl-C (``finally`` blocks stop children, release what is held);
    # the long-running commands (worker, apply) install handlers of their own over these.
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop_requested)
    try:
        return handler(args)
    except ConfigError as exc:
        print(one_line(args.command, exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    except TicdcSinkError as exc:
        print(one_line(args.command, exc), file=sys.stderr)
        return EXIT_FAILURE
    except StopRequested as stop:
        name = signal.Signals(stop.signum).name
        print(f"ticdc-sink {args.command}: stopped ({name})", file=sys.stderr)
        return 0 if args.command in SERVICE_COMMANDS else EXIT_SIGNALLED + stop.signum
    except KeyboardInterrupt:
        print(f"ticdc-sink {args.command}: interrupted", file=sys.stderr)
        return EXIT_SIGNALLED + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
