"""`ticdc-sink services up|down|status`: all local services at once."""

from __future__ import annotations

from ticdc_sink.services.base import LocalService, ServiceState
from ticdc_sink.services.kafka import KafkaService
from ticdc_sink.services.mariadb import MariaDBService
from ticdc_sink.services.redis import RedisService
from ticdc_sink.services.secure import secure_services, write_secure_env
from ticdc_sink.services.spark import spark_cluster
from ticdc_sink.services.tidb_server import TiDBService


def all_services(secure: bool = False, spark: bool = False) -> list[LocalService]:
    """Every service the project runs against, in start order (TiDB after the plain ones: its
    first start builds it from source); ``secure`` adds the secured variants (beside the plain
    ones, on their own ports), ``spark`` the Spark cluster."""
    plain: list[LocalService] = [RedisService(), MariaDBService(), KafkaService(), TiDBService()]
    return plain + (secure_services() if secure else []) + (spark_cluster() if spark else [])


def services_up(
    secure: bool = False, spark: bool = False
) -> list[tuple[LocalService, ServiceState]]:
    """Start what is not answering yet (installing what is missing); report each one. With
    ``secure``, also write the settings that reach the secured services (secure.env)."""
    started = [(service, service.up()) for service in all_services(secure, spark)]
    if secure:
        write_secure_env()
    return started


def services_down() -> list[tuple[LocalService, bool]]:
    """Stop what we started, newest first; services we did not start are left alone."""
    return [(service, service.down()) for service in reversed(all_services(True, True))]


def services_status(secure: bool = False) -> list[tuple[LocalService, ServiceState]]:
    return [(service, service.state()) for service in all_services(secure, spark=True)]
