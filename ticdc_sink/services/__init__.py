"""Real Kafka, Redis, MariaDB and TiDB on loopback, and on request secured variants and a Spark
standalone cluster, installed and started by the project itself."""

from ticdc_sink.services.base import LocalService, ServiceState, state_dir
from ticdc_sink.services.manager import all_services, services_down, services_status, services_up

__all__ = [
    "LocalService",
    "ServiceState",
    "all_services",
    "services_down",
    "services_status",
    "services_up",
    "state_dir",
]
