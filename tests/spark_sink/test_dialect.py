"""Telling the downstream servers apart, and what differs for each."""

from __future__ import annotations

import pytest

from spark_sink.dialect import SPARK_DEFAULT_ISOLATION, TIDB_ISOLATION, Server, dialect_for


@pytest.mark.parametrize(
    ("version", "server"),
    [
        ("8.0.11-TiDB-v8.4.0-this-is-a-placeholder", Server.TIDB),
        ("5.7.25-TiDB-v7.5.1", Server.TIDB),
        ("10.11.14-MariaDB-0+deb12u2", Server.MARIADB),
        ("11.4.2-MariaDB-log", Server.MARIADB),
        ("8.0.36", Server.MYSQL),
        ("8.4.0-commercial", Server.MYSQL),
    ],
)
def test_the_server_comes_from_its_version(version: str, server: Server) -> None:
    dialect = dialect_for(version)
    assert (dialect.server, dialect.version) == (server, version)


def test_only_tidb_loads_spark_at_another_isolation_level() -> None:
    tidb = dialect_for("8.0.11-TiDB-v8.5.0").spark_write_options()
    assert tidb == {"isolationLevel": TIDB_ISOLATION}
    for version in ("10.11.14-MariaDB", "8.0.36"):
        assert dialect_for(version).spark_write_options() == {
            "isolationLevel": SPARK_DEFAULT_ISOLATION
        }
