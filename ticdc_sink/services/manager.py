"""`ticdc-sink services up|down|status`: all local services at once."""

from __future__ import annotations

from collections.abc import Callable

from ticdc_sink.services.base import LocalService, ServiceState
from ticdc_sink.services.cluster import cluster_services, cluster_up
from ticdc_sink.services.kafka import KafkaService
from ticdc_sink.services.mariadb import MariaDBService
from ticdc_sink.services.redis import RedisService
from ticdc_sink.services.registry import RegistryService
from ticdc_sink.services.secure import SecureRegistryService, secure_services, write_secure_env
from ticdc_sink.services.secure_cluster import (
    secure_redis_cluster_up,
    secure_redis_nodes,
    write_secure_cluster_env,
)
from ticdc_sink.services.spark import spark_cluster
from ticdc_sink.services.tidb_server import TiDBService

# What `services up` tells of each service as it comes up.
Report = Callable[[LocalService, ServiceState], None]


def all_services(
    secure: bool = False,
    spark: bool = False,
    tidb: bool = False,
    registry: bool = False,
    cluster: bool = False,
) -> list[LocalService]:
    """Every service the project runs against, in start order: the plain ones; with ``tidb``
    TiDB (after them: its first start builds it from source); with ``secure`` the secured
    variants (beside the plain ones, on their own ports); with ``spark`` the Spark cluster; with
    ``registry`` the schema registry (last: nothing else needs it), and with both ``secure``
    and ``registry`` its secured front; with ``cluster`` the Redis Cluster's and the Kafka
    cluster's nodes (and with ``secure`` too the secured Redis Cluster's)."""
    plain: list[LocalService] = [RedisService(), MariaDBService(), KafkaService()]
    return (
        plain
        + ([TiDBService()] if tidb else [])
        + (secure_services() if secure else [])
        + (spark_cluster() if spark else [])
        + ([RegistryService()] if registry else [])
        + ([SecureRegistryService()] if secure and registry else [])
        + (cluster_services() if cluster else [])
        + (list(secure_redis_nodes()) if cluster and secure else [])
    )


def services_up(
    secure: bool = False,
    spark: bool = False,
    tidb: bool = False,
    report: Report | None = None,
    registry: bool = False,
    cluster: bool = False,
) -> list[tuple[LocalService, ServiceState]]:
    """Start what is not answering yet (installing what is missing), in order, and ``report``
    each one as it is up; the first that does not come up raises ServiceError. With ``secure``,
    also write the settings that reach the secured services (secure.env); with ``cluster``,
    start the clusters (their nodes together) and write cluster.env, and with both the secured
    Redis Cluster too (cluster-secure.env)."""
    started = []
    for service in all_services(secure, spark, tidb, registry):
        state = service.up()
        if report is not None:
            report(service, state)
        started.append((service, state))
    if secure:
        write_secure_env()
    if cluster:
        clusters = cluster_up() + (secure_redis_cluster_up() if secure else [])
        for service, state in clusters:
            if report is not None:
                report(service, state)
            started.append((service, state))
        if secure:
            write_secure_cluster_env()
    return started


def services_down() -> list[tuple[LocalService, bool]]:
    """Stop what we started, newest first; services we did not start are left alone."""
    return [
        (service, service.down())
        for service in reversed(all_services(True, True, True, True, True))
    ]


def services_status(secure: bool = False) -> list[tuple[LocalService, ServiceState]]:
    """Each service's state: the plain ones, TiDB, the Spark cluster, the schema registry and
    the clusters' nodes,
    the secured ones only with ``secure``."""
    return [(service, service.state()) for service in all_services(secure, True, True, True, True)]


def state_text(service: LocalService, state: ServiceState) -> str:
    """How `services status` shows ``state``: a stopped service that plain `services up` does
    not start says which option starts it."""
    if state is ServiceState.STOPPED and service.start_option:
        return f"not started (ticdc-sink services up {service.start_option} starts it)"
    return str(state)
