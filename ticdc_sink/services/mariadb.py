"""MariaDB from Debian's ``mariadb-server``: root over TCP without a password, in UTC.

The passwordless root is for local development only; point ``TICDC_SINK_DOWNSTREAM`` at a real
server with its own credentials anywhere else.
"""

from __future__ import annotations

from pathlib import Path

from config.settings import default_of
from ticdc_sink.services.base import (
    Endpoint,
    LocalService,
    apt_install,
    make_private_folder,
    require_binary,
    run_logged,
    socket_path,
)

# Large enough for bulk statements and the 200k-row benchmark table to stay in memory.
BUFFER_POOL = "1G"
MAX_PACKET = "256M"
# Tables kept open and their definitions cached: a sink writing more tables than these (the
# defaults are 2,000 and 400) reopens tables in every batch (docs/scaling.md). The open tables
# are bounded by the open files the server may have (20,000 here, for 500 connections).
TABLE_OPEN_CACHE = 9_000
TABLE_DEFINITION_CACHE = 20_000


class MariaDBService(LocalService):
    name = "mariadb"
    endpoint = Endpoint("127.0.0.1", 3306)

    @property
    def datadir(self) -> str:
        return str(self.home / "data")

    @property
    def socket(self) -> Path:
        return socket_path(self.home, "mariadb.sock")

    def install(self) -> None:
        self.binary = require_binary("mariadbd", "mariadb-server", self.log_file)
        self.install_db = require_binary("mariadb-install-db", "mariadb-server", self.log_file)
        # Spark's JDBC writer needs Connector/J; it comes with the database, not with Spark.
        if not Path(default_of("jdbc_jar")).exists():
            apt_install("libmariadb-java", log=self.log_file)

    def prepare(self) -> None:
        make_private_folder(self.socket.parent)
        if (self.home / "data" / "mysql").is_dir():
            return
        run_logged(
            "creating MariaDB's system tables",
            [
                self.install_db,
                # The machine's /etc/mysql would put the bootstrap's pid file in /run/mysqld.
                "--no-defaults",
                f"--datadir={self.datadir}",
                f"--tmpdir={self.tmp_dir}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            self.log_file,
        )

    def command(self) -> list[str]:
        return [
            self.binary,
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--socket={self.socket}",
            f"--tmpdir={self.tmp_dir}",
            f"--port={self.endpoint.port}",
            f"--bind-address={self.endpoint.host}",
            f"--pid-file={self.home / 'mariadbd.pid'}",
            "--user=root",
            "--default-time-zone=+00:00",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_bin",
            f"--innodb-buffer-pool-size={BUFFER_POOL}",
            f"--max-allowed-packet={MAX_PACKET}",
            "--max-connections=500",
            f"--table-open-cache={TABLE_OPEN_CACHE}",
            f"--table-definition-cache={TABLE_DEFINITION_CACHE}",
        ]
