"""The ``ticdc-sink`` command: one entry point, a subcommand per job."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, NoReturn

from config.errors import ConfigError, StopRequested, TicdcSinkError, one_line
from config.logs import configure_logging
from config.settings import Protocol
from config.signals import STDERR_FD, STOP_SIGNALS
from ticdc_sink import __version__, commands
from ticdc_sink.arguments import positive, share, stream_id, tso
from ticdc_sink.check.arguments import add_check_parser
from ticdc_sink.dispatchers import Dispatcher
from ticdc_sink.exit_codes import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_SIGNALLED
from ticdc_sink.scenario import START_TS

log = logging.getLogger("ticdc_sink.cli")

# Processes a supervisor runs and stops (commands.SERVICE_COMMANDS): asked to stop, they exit 0
# even when the signal comes while they still start (before the worker's Faust or the sink's
# loop took the signals over).
SERVICE_COMMANDS = commands.SERVICE_COMMANDS

Handler = Callable[[argparse.Namespace], int]


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
    subcommands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )

    services = subcommands.add_parser("services", help="install, start and stop local services")
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
    services.add_argument(
        "--tidb",
        action="store_true",
        help="with up: also TiDB on 127.0.0.1:4000, built from source the first time",
    )
    services.add_argument(
        "--registry",
        action="store_true",
        help="with up: also a schema registry (Apicurio, Confluent API at "
        "http://127.0.0.1:8081/apis/ccompat/v7)",
    )
    services.add_argument(
        "--cluster",
        action="store_true",
        help="with up: also a Redis Cluster on 127.0.0.1:7000-7005 and a 3-broker Kafka on "
        "127.0.0.1:9192-9194 (settings: <state dir>/cluster.env)",
    )
    services.set_defaults(handler=commands.services)

    decode = subcommands.add_parser("decode", help="print the events of Kafka messages as JSON")
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
    decode.set_defaults(handler=commands.decode)

    worker = subcommands.add_parser("worker", help="consume TiCDC topics and stage them in Redis")
    worker.set_defaults(handler=commands.worker)

    apply = subcommands.add_parser(
        "apply", help="apply staged changes to the downstream (the sink)"
    )
    apply.add_argument("--once", action="store_true", help="apply what is resolved now, then exit")
    apply.set_defaults(handler=commands.apply)

    skip_ddl = subcommands.add_parser(
        "skip-ddl", help="make the sink skip a DDL the downstream refuses (by its commit ts)"
    )
    skip_ddl.add_argument("--ts", type=tso, required=True, help="the DDL's commit ts")
    skip_ddl.add_argument(
        "--replace", action="store_true", help="replace a skip asked for before, not done yet"
    )
    skip_ddl.set_defaults(handler=commands.skip_ddl)

    recover = subcommands.add_parser(
        "recover", help="after Redis lost its data: replay Kafka from the downstream checkpoint"
    )
    recover.add_argument(
        "--dry-run",
        action="store_true",
        help="show what would be rewound and cleared, change nothing",
    )
    recover.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    recover.set_defaults(handler=commands.recover)

    produce = subcommands.add_parser("produce", help="write a seeded TiCDC-like stream to Kafka")
    produce.add_argument("--topic", help="topic (default: the first of TICDC_SINK_TOPICS)")
    produce.add_argument("--protocol", choices=[p.value for p in Protocol])
    produce.add_argument(
        "--partitions",
        type=positive,
        default=4,
        help="the topic's partitions (an existing topic must have as many)",
    )
    produce.add_argument("--transactions", type=positive, default=300)
    produce.add_argument("--seed", type=int, default=1)
    produce.add_argument(
        "--duplicates",
        type=share,
        default=0.0,
        help="chance, 0 to 1, that an earlier message is sent again after each flush",
    )
    produce.add_argument("--schema", default="shop", help="upstream database of the workload")
    produce.add_argument(
        "--dispatcher",
        choices=[d.value for d in Dispatcher],
        default="default",
        help="TiCDC's partition dispatcher for rows (default: TiCDC's own, by table)",
    )
    produce.add_argument(
        "--topic-dispatcher",
        choices=["{schema}_{table}", "{schema}", "none"],
        help="TiCDC's topic dispatcher, the topic expression after `<topic>_`: rows to their "
        "table's (schema's) topic, database DDL and every checkpoint to <topic>, a table's DDL "
        "to its topic, checkpoints to the topics of the tables that exist; none: all to <topic>"
        " (default: none's routing of earlier versions, every DDL to every partition)",
    )
    produce.add_argument(
        "--start-ts",
        type=positive,
        default=START_TS,
        help="commit ts the workload starts after (a second workload: past the first's final "
        "resolved ts)",
    )
    produce.add_argument(
        "--drop-column",
        action="store_true",
        help="drop a column of orders three quarters of the way (after the ADD COLUMN halfway)",
    )
    produce.add_argument(
        "--table-changes",
        action="store_true",
        help="rename customers to clients and truncate orders three fifths of the way, drop "
        "events and create it again with a column more seven tenths of the way; a second "
        "database <schema>_b with a table accounts a fifth of the way, dropped (DROP DATABASE) "
        "four fifths of the way and made again, its table with a column more, nine tenths",
    )
    produce.add_argument("--expected", default=commands.DEFAULT_EXPECTED, help="state file")
    produce.set_defaults(handler=commands.produce)

    verify = subcommands.add_parser(
        "verify",
        help="compare the downstream with the expected state",
        description="Compare the downstream that TICDC_SINK_DOWNSTREAM names (MariaDB, MySQL or"
        " TiDB: the local TiDB is mysql://root@127.0.0.1:4000/) with the state `produce` expected,"
        " or a replicated database with a truth database on the same server, row for row.",
    )
    verify.add_argument(
        "--expected",
        help=f"the state file `produce --expected` wrote (default: {commands.DEFAULT_EXPECTED})",
    )
    verify.add_argument("--db", help="a replicated database, compared with --truth-db instead")
    verify.add_argument("--truth-db", help="the database holding the truth, row for row")
    verify.add_argument(
        "--workload", help="first run this SQL workload (JSON lines, {DB}) into --truth-db"
    )
    verify.set_defaults(handler=commands.verify)

    add_check_parser(subcommands, positive, commands.check)

    status = subcommands.add_parser(
        "status", help="per-partition progress and the global resolved ts"
    )
    status.add_argument("--json", action="store_true", help="print one JSON document")
    status.set_defaults(handler=commands.status)

    _add_deadletters(subcommands)

    config = subcommands.add_parser(
        "config", help="describe every setting: its variable, its value here, what it means"
    )
    config.add_argument("action", choices=["describe"])
    config.add_argument("--json", action="store_true", help="print one JSON document")
    config.set_defaults(handler=commands.config)

    demo = subcommands.add_parser(
        "demo",
        help="run the pipeline end to end on local services",
        description="Produce a TiCDC Open Protocol stream to a fresh topic, replicate it with a"
        " worker and a sink into the downstream TICDC_SINK_DOWNSTREAM names (MariaDB by default;"
        " TICDC_SINK_DOWNSTREAM=mysql://root@127.0.0.1:4000/ for the local TiDB), and verify it.",
    )
    demo.set_defaults(handler=commands.demo)

    for command in subcommands.choices.values():
        # --config after the subcommand too; SUPPRESS keeps one given before it from being reset.
        command.add_argument(
            "--config", metavar="PATH", default=argparse.SUPPRESS, help="TOML settings file"
        )
    return parser


def _add_deadletters(subcommands: Any) -> None:
    from ticdc_sink.deadletters_command import DEFAULT_LIST_LIMIT

    deadletters = subcommands.add_parser(
        "deadletters", help="list, show, export, replay or purge the dead letters"
    )
    deadletters.set_defaults(handler=commands.deadletters)
    actions = deadletters.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the oldest dead letters, one a line")
    listing.add_argument("--limit", type=positive, default=DEFAULT_LIST_LIMIT, help="how many")
    show = actions.add_parser("show", help="one dead letter in full")
    show.add_argument("id", type=stream_id, help="its stream id (see list)")
    export = actions.add_parser("export", help="every dead letter as JSON lines (base64 bytes)")
    export.add_argument("--output", default="-", metavar="FILE", help="file (default: stdout)")
    replay = actions.add_parser(
        "replay", help="decode a dead letter again (fixed from files) and stage its rows"
    )
    replay.add_argument("id", type=stream_id, help="its stream id (see list)")
    replay.add_argument("--key", metavar="FILE", help="the fixed Kafka key")
    replay.add_argument("--value", metavar="FILE", help="the fixed Kafka value")
    replay.add_argument("--keep", action="store_true", help="keep the dead letter once staged")
    purge = actions.add_parser("purge", help="delete dead letters (all, after confirmation)")
    purge.add_argument("ids", nargs="*", metavar="ID", type=stream_id, help="only these")
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    for action in actions.choices.values():
        action.add_argument(
            "--config", metavar="PATH", default=argparse.SUPPRESS, help="TOML settings file"
        )


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
    # A process that seems stuck shows where, and runs on (as a JVM's thread dump): written
    # by the interpreter itself, so even a main thread blocked in C answers.
    faulthandler.register(signal.SIGQUIT, STDERR_FD, all_threads=True)
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
    except BrokenPipeError:
        return _reader_gone()
    except EOFError:
        print(
            f"ticdc-sink {args.command}: no answer at the prompt (end of input): nothing changed",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    except Exception as exc:
        return _failed(args, exc)


# The packages of this project: a module of one of them that is missing is a bug, not an install
# without the extra that brings it.
_OWN_PACKAGES = frozenset({"config", "core", "streams", "spark_sink", "ticdc_sink"})
# The extra (pyproject.toml) that installs what each command needs beyond the shared clients.
_EXTRAS = {"worker": "worker", "apply": "sink", "demo": "worker,sink"}


def missing_extra(command: str, error: ModuleNotFoundError) -> str | None:
    """The line for a package that an extra installs and this installation lacks, or None when
    the missing module is the project's own."""
    package = (error.name or "").partition(".")[0]
    if not package or package in _OWN_PACKAGES:
        return None
    extra = _EXTRAS.get(command, "worker,sink")
    return (
        f"the Python package {package!r} is not installed: install 'ticdc-sink[{extra}]' "
        "(README, Install)"
    )


def _failed(args: argparse.Namespace, error: Exception) -> int:
    """One line for an error no handler of the command explained: a package of an extra not
    installed, a file the operator named, a service that is down or refuses the settings, else a
    bug (its traceback kept in a file)."""
    if isinstance(error, ModuleNotFoundError) and (line := missing_extra(args.command, error)):
        print(f"ticdc-sink {args.command}: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from ticdc_sink.failures import bug_report, service_failure

    if isinstance(error, OSError) and error.filename is not None:
        print(f"ticdc-sink {args.command}: {error.filename}: {error.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    settings = getattr(args, "settings", None)
    found = service_failure(settings, error) if settings is not None else None
    if found is not None:
        print(f"ticdc-sink {args.command}: {found.text}", file=sys.stderr)
        return found.code
    log.debug("unexpected error", exc_info=error)
    print(f"ticdc-sink {args.command}: {bug_report(error)}", file=sys.stderr)
    return EXIT_FAILURE


def _reader_gone() -> int:
    """The reader of stdout went away (``decode ... | head``): stop quietly as Unix tools do,
    with no second error when Python flushes stdout at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # stdout is not a file (captured in a test): nothing is flushed to a pipe at exit
    return EXIT_SIGNALLED + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
