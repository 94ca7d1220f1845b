"""What each subcommand of ``ticdc-sink`` runs, from its parsed arguments to its exit code (the
work itself is in the command's own module; ``cli.py`` parses and dispatches)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from config.choices import LogLevel
from config.errors import ConfigError
from config.logs import configure_logging
from config.settings import Protocol, Settings, load_settings
from ticdc_sink.exit_codes import EXIT_FAILURE

if TYPE_CHECKING:
    from streams.schema_registry import SchemaRegistry

# The long-running processes: they wait for a service rather than stop at once.
SERVICE_COMMANDS = frozenset({"worker", "apply"})
# Where `produce` writes the expected state and `verify` reads it unless told otherwise.
DEFAULT_EXPECTED = ".ticdc-sink/expected.json"


def checked_settings(
    args: argparse.Namespace, *, kafka: bool = False, redis: bool = False, downstream: bool = False
) -> Settings:
    """The settings, once the services a command needs took their TLS and credentials: a
    misconfiguration stops the command with one line naming the setting."""
    settings = settings_from(args)
    if args.command not in SERVICE_COMMANDS:
        # A one-shot command does not wait for a service as the worker and the sink do.
        from ticdc_sink.failures import check_reachable

        check_reachable(settings, kafka=kafka, redis=redis, downstream=downstream)
        if kafka and settings.logging.level is not LogLevel.DEBUG:
            # The command's own line says what failed; aiokafka's would say it once more.
            logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
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


def services(args: argparse.Namespace) -> int:
    from ticdc_sink.services import services_down, services_status, services_up, state_dir
    from ticdc_sink.services.manager import state_text

    if args.action == "up":
        services_up(
            secure=args.secure,
            spark=args.spark_cluster,
            tidb=args.tidb,
            registry=args.registry,
            report=lambda service, state: print(
                f"{service.name:22} {service.endpoint}  {state}", flush=True
            ),
            cluster=args.cluster,
        )
        if args.secure:
            from ticdc_sink.services.secure import SECURE_ENV

            print(f"settings for the secured services: source {state_dir() / SECURE_ENV}")
        if args.cluster:
            from ticdc_sink.services.cluster import CLUSTER_ENV

            print(f"settings for the clusters: source {state_dir() / CLUSTER_ENV}")
        if args.cluster and args.secure:
            from ticdc_sink.services.secure_cluster import CLUSTER_SECURE_ENV

            print(
                f"settings for the secured Redis Cluster: source {state_dir() / CLUSTER_SECURE_ENV}"
            )
    elif args.action == "down":
        for service, stopped in services_down():
            print(f"{service.name:22} {'stopped' if stopped else 'not ours or not running'}")
    else:
        for service, state in services_status(secure=args.secure):
            print(f"{service.name:22} {service.endpoint}  {state_text(service, state)}")
    return 0


def decode(args: argparse.Namespace) -> int:
    from ticdc_sink.decode_command import run_decode

    registry = _registry(settings_from(args)) if args.protocol == Protocol.AVRO else None
    return run_decode(args.protocol, args.key, args.values, args.stream, registry)


def _registry(settings: Settings) -> SchemaRegistry:
    """The schema registry ``TICDC_SINK_SCHEMA_REGISTRY`` names, checked: a one-shot command
    waits for one that is away as long as a starting worker would, then stops with one line."""
    from streams.schema_registry import SchemaRegistry

    registry = SchemaRegistry.from_settings(settings, patience=settings.startup_timeout)
    registry.check()
    return registry


def demo(args: argparse.Namespace) -> int:
    from ticdc_sink.demo import run_demo

    return run_demo(checked_settings(args, kafka=True, redis=True, downstream=True), args.config)


def worker(args: argparse.Namespace) -> int:
    from streams.worker.run import run_worker

    return run_worker(checked_settings(args, kafka=True, redis=True))


def status(args: argparse.Namespace) -> int:
    from ticdc_sink.status_command import run_status

    return run_status(
        checked_settings(args, kafka=True, redis=True, downstream=True), as_json=args.json
    )


def deadletters(args: argparse.Namespace) -> int:
    from ticdc_sink import deadletters_command as command

    settings = checked_settings(args, redis=True)
    if args.action == "list":
        return command.run_list(settings, args.limit)
    if args.action == "show":
        return command.run_show(settings, args.id)
    if args.action == "export":
        return command.run_export(settings, args.output)
    if args.action == "replay":
        return command.run_replay(settings, args.id, args.key, args.value, args.keep)
    return command.run_purge(settings, args.ids, args.yes)


def config(args: argparse.Namespace) -> int:
    from ticdc_sink.config_command import run_describe

    return run_describe(settings_from(args), as_json=args.json)


def apply(args: argparse.Namespace) -> int:
    from spark_sink.run import run_sink

    return run_sink(checked_settings(args, redis=True, downstream=True), once=args.once)


def skip_ddl(args: argparse.Namespace) -> int:
    from core.redis_client import redis_client
    from core.staging import Staging
    from spark_sink.ddl.skip import request_skip_ddl

    settings = checked_settings(args, redis=True, downstream=True)
    staging = Staging(redis_client(settings), settings.group)
    print(request_skip_ddl(settings, staging, args.ts, replace=args.replace))
    return 0


def recover(args: argparse.Namespace) -> int:
    from ticdc_sink.recover import run_recover

    return run_recover(
        checked_settings(args, kafka=True, redis=True, downstream=True),
        dry_run=args.dry_run,
        assume_yes=args.yes,
    )


def produce(args: argparse.Namespace) -> int:

    from ticdc_sink.dispatchers import Dispatcher
    from ticdc_sink.produce import check_expected_path, run_produce

    check_expected_path(Path(args.expected), Path(DEFAULT_EXPECTED))
    settings = checked_settings(args, kafka=True)
    topic = args.topic or (settings.kafka.topics[0] if settings.kafka.topics else None)
    if topic is None:
        raise ConfigError("name the topic: --topic or TICDC_SINK_TOPICS")
    protocol = args.protocol or settings.kafka.protocol.value
    registry = _registry(settings) if protocol == Protocol.AVRO else None
    sent, final = run_produce(
        settings,
        topic,
        protocol,
        args.partitions,
        args.transactions,
        args.seed,
        Path(args.expected),
        args.duplicates,
        args.schema,
        start_ts=args.start_ts,
        dispatcher=Dispatcher(args.dispatcher),
        registry=registry,
        drop_column=args.drop_column,
        topic_dispatcher=args.topic_dispatcher,
        table_changes=args.table_changes,
    )
    if args.topic_dispatcher in (None, "none"):
        where = f"the topics {topic}_<schema>_<table>" if registry is not None else topic
    else:
        where = f"{topic} and the topics {topic}_{args.topic_dispatcher}"
    print(f"sent {sent} messages to {where}; final resolved ts {final}")
    print(f"expected downstream state: {args.expected}")
    return 0


def verify(args: argparse.Namespace) -> int:

    from ticdc_sink.verify import verify

    if args.db or args.truth_db:
        if args.expected is not None:
            raise ConfigError(
                "--expected compares with a state file, --db/--truth-db with a database: "
                "give one or the other"
            )
        return verify_against_truth(args)
    if args.workload:
        raise ConfigError("--workload runs into --truth-db: give --db and --truth-db with it")
    ok, report = verify(
        checked_settings(args, downstream=True), Path(args.expected or DEFAULT_EXPECTED)
    )
    print("\n".join(report))
    print("verify: match" if ok else "verify: MISMATCH")
    return 0 if ok else EXIT_FAILURE


def check(args: argparse.Namespace) -> int:
    from config.settings import parse_table_patterns
    from ticdc_sink.check.run import CheckRequest, run_check

    request = CheckRequest(
        upstream=args.upstream,
        patterns=parse_table_patterns(args.tables or ""),
        chunk_rows=args.chunk_rows,
        threads=args.threads,
        rate_limit=args.rate_limit,
        as_json=args.json,
        fix_sql=Path(args.fix_sql) if args.fix_sql else None,
        metrics_file=Path(args.metrics_file) if args.metrics_file else None,
    )
    return run_check(checked_settings(args, downstream=True), request)


def verify_against_truth(args: argparse.Namespace) -> int:

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


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings for this invocation (``--config`` plus the environment); logging from
    then on is in their level and format, each record naming the pipeline."""
    settings = load_settings(args.config)
    configure_logging(settings.logging.level, settings.logging.format, settings.group)
    # Kept with the arguments: an error the command does not handle is explained with them.
    args.settings = settings
    return settings
