"""What differs between the servers the sink writes into (MariaDB, MySQL, TiDB), picked from the
server's ``VERSION()``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Server(StrEnum):
    """The MySQL-compatible servers the sink knows apart."""

    MARIADB = "mariadb"
    MYSQL = "mysql"
    TIDB = "tidb"


# Spark's JDBC writer sets READ_UNCOMMITTED on its connections unless told otherwise; TiDB refuses
# that level (error 8048, "The isolation level 'READ-UNCOMMITTED' is not supported").
SPARK_DEFAULT_ISOLATION = "READ_UNCOMMITTED"
# What a staging load into TiDB runs at instead: nothing else writes a staging table while it loads.
TIDB_ISOLATION = "READ_COMMITTED"


@dataclass(frozen=True)
class Dialect:
    """One server's ways, as the sink needs them."""

    server: Server
    version: str

    def spark_write_options(self) -> dict[str, str]:
        """Options for Spark's JDBC writer on top of the common ones."""
        level = TIDB_ISOLATION if self.server is Server.TIDB else SPARK_DEFAULT_ISOLATION
        return {"isolationLevel": level}


def dialect_for(version: str) -> Dialect:
    """The dialect of a server whose ``VERSION()`` is ``version``: TiDB says
    ``8.0.11-TiDB-v8.5.0``, MariaDB ``10.11.14-MariaDB-0+deb12u2``, MySQL ``8.0.36``."""
    lowered = version.lower()
    if "-tidb-" in lowered:
        return Dialect(Server.TIDB, version)
    if "mariadb" in lowered:
        return Dialect(Server.MARIADB, version)
    return Dialect(Server.MYSQL, version)


def server_dialect(cursor: Any) -> Dialect:
    """The dialect of the server ``cursor`` is connected to."""
    cursor.execute("SELECT VERSION()")
    return dialect_for(str(cursor.fetchone()[0]))
