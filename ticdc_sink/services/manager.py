"""`ticdc-sink services up|down|status`: all local services at once."""

from __future__ import annotations

from ticdc_sink.services.base import LocalService, ServiceState
from ticdc_sink.services.kafka import KafkaService
from ticdc_sink.services.mariadb import MariaDBService
from ticdc_sink.services.redis import RedisService
from ticdc_sink.services.tidb_server import TiDBService


def all_services() -> list[LocalService]:
    """Every service the project runs against, in start order (TiDB last: its first start
    builds it from source)."""
    return [RedisService(), MariaDBService(), KafkaService(), TiDBService()]


def services_up() -> list[tuple[LocalService, ServiceState]]:
    """Start what is not answering yet (installing what is missing); report each one."""
    return [(service, service.up()) for service in all_services()]


def services_down() -> list[tuple[LocalService, bool]]:
    """Stop what we started, newest first; services we did not start are left alone."""
    return [(service, service.down()) for service in reversed(all_services())]


def services_status() -> list[tuple[LocalService, ServiceState]]:
    return [(service, service.state()) for service in all_services()]
