"""The ``--downstream`` option the sink benchmarks share: which server they write into.

A benchmark's sink and its raw-upsert baseline write into the same server in the same run, so the
ratio compares the sink with what that server does anyway.
"""

from __future__ import annotations

import argparse
import os

from config.settings import ENV_PREFIX, Settings, load_settings
from spark_sink.db.connection import connect

DOWNSTREAM_ENV = f"{ENV_PREFIX}DOWNSTREAM"


def add_downstream_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--downstream",
        metavar="mysql://USER[:PASSWORD]@HOST:PORT/",
        help=f"the server to write into (default: the settings' downstream, {DOWNSTREAM_ENV})",
    )


def settings_for(downstream: str | None) -> Settings:
    """The settings with ``downstream`` (when given) as the downstream, checked as the variable
    is; it goes into this process's environment, so the processes a benchmark starts use it too."""
    if downstream:
        os.environ[DOWNSTREAM_ENV] = downstream
    return load_settings()


def server_version(settings: Settings) -> str:
    """The downstream's ``VERSION()``, printed with the results (MariaDB, MySQL or TiDB)."""
    with connect(settings, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT VERSION()")
        return str(cursor.fetchone()[0])
