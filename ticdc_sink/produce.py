"""`ticdc-sink produce`: write a scenario to Kafka the way a TiCDC changefeed does.

Rows go to the partition TiCDC's partition dispatcher gives them (``dispatchers.py``: by table
unless told otherwise, as TiCDC's default); DDL and resolved events go to every partition;
each partition's codec batches as TiCDC's does (16 rows per Open Protocol message). Optionally a
share of messages is sent twice and older resolved events are replayed, as TiCDC does after its
own restarts. The expected downstream state is written to a JSON file for `ticdc-sink verify`.

Avro (``protocol=avro``) is one topic per table, ``<topic>_<schema>_<table>`` as TiCDC's topic
dispatcher names them, its schemas registered in the schema registry; its DDL and checkpoint
messages go to every partition of every table's topic. TiCDC's Avro protocol cannot carry a
delete of a table without a handle key, so such a table is left out of an Avro stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import random
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from config.errors import ConfigError
from config.settings import Protocol, Settings
from core.kafka_client import kafka_options, riding_out
from core.model import ColumnType, MySQLType, Resolved, RowChange, Value
from core.outage import Outage
from streams.codecs import Codec, KafkaMessage, codec_for
from streams.codecs.debezium_values import carried_decimal
from streams.codecs.values import b64encode
from ticdc_sink.dispatchers import Dispatcher, partition_of
from ticdc_sink.scenario import KEYLESS_TABLES, START_TS, Scenario, Transaction
from ticdc_sink.topic_dispatch import TopicDispatcher, TopicRouter

if TYPE_CHECKING:
    from streams.codecs.avro import Registry

log = logging.getLogger("ticdc_sink.produce")

# TiCDC sends resolved events every second; here every this many transactions.
RESOLVED_EVERY = 10
# aiokafka's default largest request, and room for a record batch's headers around one message.
PRODUCER_REQUEST_BYTES = 1 << 20
REQUEST_OVERHEAD = 64 << 10


def scenario_messages(
    scenario: Scenario,
    protocol: str,
    partitions: int,
    duplicates: float = 0.0,
    seed: int = 1,
    dispatcher: Dispatcher = Dispatcher.DEFAULT,
    codec: Callable[[], Codec] | None = None,
) -> tuple[list[tuple[int, KafkaMessage]], int]:
    """Every message of the scenario with its partition, in send order, and the last resolved ts
    (each partition's messages encoded by a codec of ``codec``'s, by default ``protocol``'s)."""
    history = scenario.history()
    return history_messages(history, protocol, partitions, duplicates, seed, dispatcher, codec)


def history_messages(
    history: Iterable[Transaction],
    protocol: str,
    partitions: int,
    duplicates: float = 0.0,
    seed: int = 1,
    dispatcher: Dispatcher = Dispatcher.DEFAULT,
    codec: Callable[[], Codec] | None = None,
    router: TopicRouter | None = None,
) -> tuple[list[tuple[int, KafkaMessage]], int]:
    """Every message of ``history`` with its partition, in send order, and the last resolved ts,
    as :func:`scenario_messages` gives a scenario's. With ``router`` each message names its topic
    as TiCDC's topic dispatcher gives it (:func:`routed_messages`)."""
    if router is not None:
        return routed_messages(history, partitions, seed, dispatcher, codec, router, duplicates)
    rng = random.Random(seed)
    codecs = [codec() if codec else codec_for(protocol) for _ in range(partitions)]
    skipped = _skipped_tables(protocol)
    pending: list[list[RowChange]] = [[] for _ in range(partitions)]
    out: list[tuple[int, KafkaMessage]] = []
    # What may be sent again: a re-sent row of a table without a key is a second identical row
    # (nothing tells the two apart, for this sink as for TiCDC's own MySQL sink).
    sent: list[list[KafkaMessage]] = [[] for _ in range(partitions)]
    last_ts = 0

    def emit(partition: int, messages: Sequence[KafkaMessage], again: bool = True) -> None:
        for message in messages:
            out.append((partition, message))
            if again:
                sent[partition].append(message)

    def flush(resolved: int) -> None:
        for partition in range(partitions):
            rows = pending[partition]
            keyed = [row for row in rows if row.table not in KEYLESS_TABLES]
            if keyed:
                emit(partition, codecs[partition].encode(keyed))
            if len(keyed) < len(rows):
                keyless = [row for row in rows if row.table in KEYLESS_TABLES]
                emit(partition, codecs[partition].encode(keyless), again=False)
            pending[partition] = []
            if duplicates and sent[partition] and rng.random() < duplicates:
                # At-least-once upstream: an earlier message again, and an old resolved ts.
                emit(partition, [rng.choice(sent[partition])])
            emit(partition, codecs[partition].encode([Resolved(resolved)]))

    for count, txn in enumerate(history, 1):
        if txn.ddl is not None and txn.ddl.table in skipped:
            last_ts = txn.commit_ts
            continue
        if txn.ddl is not None:
            flush(last_ts)
            for partition in range(partitions):
                emit(partition, codecs[partition].encode([txn.ddl]))
            last_ts = txn.commit_ts
            continue
        for row in txn.rows:
            if row.table not in skipped:
                pending[partition_of(row, partitions, dispatcher)].append(row)
        last_ts = txn.commit_ts
        if count % RESOLVED_EVERY == 0:
            flush(last_ts)
    flush(last_ts)
    return out, last_ts


def routed_messages(
    history: Iterable[Transaction],
    partitions: int,
    seed: int,
    dispatcher: Dispatcher,
    codec: Callable[[], Codec] | None,
    router: TopicRouter,
    duplicates: float = 0.0,
) -> tuple[list[tuple[int, KafkaMessage]], int]:
    """:func:`history_messages` routed to topics as TiCDC routes them (``topic_dispatch.py``):
    rows to their table's topic, DDL to the default topic or its table's (old) topic, every
    checkpoint to the default topic and the topics of the tables that exist, the checkpoint
    after a DDL at its commit ts to those that existed before it. Each (topic, partition) has a
    codec of its own, as TiCDC has an encoder per partition."""
    rng = random.Random(seed)
    protocol = router.protocol
    skipped = _skipped_tables(protocol)
    codecs: dict[tuple[str, int], Codec] = {}
    pending: dict[tuple[str, int], list[RowChange]] = {}
    sent: dict[tuple[str, int], list[KafkaMessage]] = {}
    out: list[tuple[int, KafkaMessage]] = []
    last_ts = 0

    def encoder(place: tuple[str, int]) -> Codec:
        if place not in codecs:
            codecs[place] = codec() if codec else codec_for(protocol)
        return codecs[place]

    def emit(place: tuple[str, int], events: Sequence[Any], again: bool = True) -> None:
        for message in encoder(place).encode(list(events)):
            routed = dataclasses.replace(message, topic=place[0])
            out.append((place[1], routed))
            if again:
                sent.setdefault(place, []).append(routed)

    checkpoints = [0]

    def checkpoint(resolved: int, topics: Sequence[str]) -> None:
        if resolved <= checkpoints[-1]:
            return  # sent already (TiCDC sends a checkpoint once)
        checkpoints.append(resolved)
        for topic in topics:
            for partition in range(partitions):
                emit((topic, partition), [Resolved(resolved)], again=False)

    def flush(resolved: int) -> None:
        for place, rows in pending.items():
            keyed = [row for row in rows if row.table not in KEYLESS_TABLES]
            if keyed:
                emit(place, keyed)
            if len(keyed) < len(rows):
                emit(place, [row for row in rows if row.table in KEYLESS_TABLES], again=False)
            if duplicates and sent.get(place) and rng.random() < duplicates:
                out.append((place[1], rng.choice(sent[place])))
        pending.clear()
        checkpoint(resolved, router.checkpoint_topics())

    for count, txn in enumerate(history, 1):
        if txn.ddl is not None and txn.ddl.table in skipped:
            last_ts = txn.commit_ts
            continue
        if txn.ddl is not None:
            flush(last_ts)
            before = router.checkpoint_topics()
            renamed = (txn.ddl.schema or "", txn.renamed_from) if txn.renamed_from else None
            topic, ddl_partitions = router.ddl(txn.ddl, renamed)
            for partition in ddl_partitions:
                emit((topic, partition), [txn.ddl], again=False)
            checkpoint(txn.commit_ts, before)
            last_ts = txn.commit_ts
            continue
        for row in txn.rows:
            if row.table not in skipped:
                topic = router.topic_of(row.schema, row.table)
                place = (topic, partition_of(row, partitions, dispatcher))
                pending.setdefault(place, []).append(row)
        last_ts = txn.commit_ts
        if count % RESOLVED_EVERY == 0:
            flush(last_ts)
    flush(last_ts)
    return out, last_ts


def expected_state(scenario: Scenario, protocol: str = "open") -> dict[str, Any]:
    """The downstream tables the scenario should leave, as JSON-ready data (DECIMAL as far as
    ``protocol`` carries it: TiCDC's Debezium encoder sends it as a double)."""
    lossy_decimal = protocol == Protocol.DEBEZIUM
    skipped = _skipped_tables(protocol)

    def cell(kind: ColumnType, value: Value) -> Any:
        if isinstance(value, bytes):
            return {"base64": b64encode(value)}
        if lossy_decimal and isinstance(value, str) and kind.mysql_type == MySQLType.NEWDECIMAL:
            return carried_decimal(value)
        return value

    return {
        f"{scenario.databases[table]}.{scenario.names[table]}": {
            "columns": list(scenario.columns[table]),
            "rows": [
                [cell(kind, row[c]) for c, kind in scenario.columns[table].items()]
                for row in rows.values()
            ],
        }
        for table, rows in scenario.state.items()
        if table not in skipped
    }


def _skipped_tables(protocol: str) -> frozenset[str]:
    """The scenario's tables a protocol cannot carry: Avro sends a delete as its key alone."""
    return KEYLESS_TABLES if protocol == Protocol.AVRO else frozenset()


def avro_topics(topic: str, scenario: Scenario) -> list[str]:
    """The topic of each table of an Avro stream (TiCDC's ``<topic>_{schema}_{table}``), once
    ``scenario``'s history is written (a renamed table has a topic under each name)."""
    from streams.codecs.avro.wire import topic_for

    skipped = _skipped_tables(Protocol.AVRO)
    return [
        topic_for(topic, scenario.databases[table], name)
        for table in scenario.columns
        if table not in skipped
        for name in sorted({table, scenario.names[table]})
    ]


async def send(
    settings: Settings,
    topic: str,
    partitions: int,
    messages: list[tuple[int, KafkaMessage]],
    topics: Sequence[str] = (),
) -> None:
    """Create the topics if needed and send every message to its partition, in order: to its
    own topic where it names one, else to each of ``topics`` (default: ``topic``). An empty
    value is sent as none (a tombstone)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    every = list(topics) or [topic]
    outage = Outage("Kafka", log)
    admin = AIOKafkaAdminClient(**kafka_options(settings))
    await admin.start()
    try:
        # On every broker up to three (aiokafka cannot ask for the brokers' default).
        cluster = await riding_out(admin.describe_cluster, "describing the cluster", outage)
        replication = min(len(cluster["brokers"]), 3)
        for name in every:
            describe = functools.partial(admin.describe_topics, [name])
            (described,) = await riding_out(describe, f"describing topic {name}", outage)
            if described["error_code"]:
                new = NewTopic(name, partitions, replication)
                with contextlib.suppress(TopicAlreadyExistsError):
                    await riding_out(
                        functools.partial(admin.create_topics, [new]),
                        f"creating topic {name}",
                        outage,
                    )
            else:
                _check_partitions(name, len(described["partitions"]), partitions)
    finally:
        await admin.close()
    # A message larger than the producer's default request (1 MiB) is sent whole, as TiCDC sends
    # one up to its max-message-bytes; the topic must accept it (its max.message.bytes).
    largest = max((len(m.value or b"") + len(m.key or b"") for _, m in messages), default=0)
    producer = AIOKafkaProducer(
        **kafka_options(
            settings,
            enable_idempotence=True,
            linger_ms=5,
            max_request_size=max(PRODUCER_REQUEST_BYTES, largest + REQUEST_OVERHEAD),
        )
    )
    await producer.start()
    try:
        for partition, message in messages:
            value = message.value or None
            for name in [message.topic] if message.topic else every:
                await producer.send(name, value, key=message.key, partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


def _check_partitions(topic: str, has: int, asked: int) -> None:
    """Refuse a stream for another partition count than the topic's: rows sent past its last
    partition fail, and a partition left without resolved events holds the pipeline back."""
    if has != asked:
        raise ConfigError(
            f"--partitions {asked}: topic {topic!r} already has {has} partitions; "
            f"give --partitions {has}, or another topic"
        )


def check_expected_path(expected: Path, default: Path) -> None:
    """Refuse a state file in a directory that does not exist (a mistyped path), but for the
    default one, which ``produce`` creates."""
    if expected != default and not expected.parent.is_dir():
        raise ConfigError(f"--expected {expected}: no directory {expected.parent}")


def run_produce(
    settings: Settings,
    topic: str,
    protocol: str,
    partitions: int,
    transactions: int,
    seed: int,
    expected: Path,
    duplicates: float = 0.0,
    schema: str = "shop",
    start_ts: int = START_TS,
    dispatcher: Dispatcher = Dispatcher.DEFAULT,
    registry: Registry | None = None,
    drop_column: bool = False,
    topic_dispatcher: str | None = None,
    table_changes: bool = False,
) -> tuple[int, int]:
    """Produce a scenario; returns (messages sent, final resolved ts). Avro registers its
    schemas in ``registry`` and writes to a topic per table named after ``topic``. With
    ``topic_dispatcher`` (a :class:`TopicDispatcher` value) the messages go to the topics TiCDC
    gives them (``topic_dispatch.py``), ``topic`` the default one."""
    scenario = Scenario(
        seed=seed,
        transactions=transactions,
        schema=schema,
        start_ts=start_ts,
        drop_column=drop_column,
        table_changes=table_changes,
    )
    codec: Callable[[], Codec] | None = None
    topics: list[str] = []
    if protocol == Protocol.AVRO:
        from streams.codecs.avro import AvroCodec

        codec = functools.partial(AvroCodec, registry, topic_prefix=topic)
    if topic_dispatcher is not None:
        routing = TopicDispatcher(topic_dispatcher)
        if protocol == Protocol.AVRO and routing is not TopicDispatcher.TABLE:
            # TiCDC's own check (topic/expression.go ValidateForAvro).
            raise ConfigError("--topic-dispatcher: Avro needs a topic per table, {schema}_{table}")
        router = TopicRouter(topic, routing, partitions, protocol)
        messages, final = routed_messages(
            scenario.history(), partitions, seed, dispatcher, codec, router, duplicates
        )
        topics = sorted({m.topic for _, m in messages if m.topic} | {topic})
    else:
        messages, final = scenario_messages(
            scenario, protocol, partitions, duplicates, seed, dispatcher, codec
        )
        if protocol == Protocol.AVRO:
            # Once the history is written: the tables it creates and renames have topics too.
            topics = avro_topics(topic, scenario)
    asyncio.run(send(settings, topic, partitions, messages, topics))
    expected.parent.mkdir(parents=True, exist_ok=True)
    expected.write_bytes(orjson.dumps(expected_state(scenario, protocol)))
    return len(messages), final
