"""`ticdc-sink check`'s arguments (``cli.py`` builds every other command's parser)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Rows per checksummed key range: one range's rows are what a check holds at once.
DEFAULT_CHUNK_ROWS = 10_000


def add_check_parser(
    subcommands: Any, positive: Callable[[str], int], handler: Callable[..., int]
) -> None:
    check = subcommands.add_parser(
        "check",
        help="compare the downstream with the upstream TiDB at the checkpoint's ts",
        description="Compare every replicated table downstream (TICDC_SINK_DOWNSTREAM, in one "
        "consistent-snapshot read) with the upstream TiDB read at exactly the checkpoint ts that "
        "snapshot holds, safe while the pipeline runs: key ranges checksummed in SQL on both, "
        "differing ranges read row by row. Exit 0 on a match, 1 on a difference, 2 on bad usage.",
    )
    check.add_argument(
        "--upstream",
        required=True,
        metavar="URL",
        help="the upstream TiDB: mysql://user@host:4000/",
    )
    check.add_argument(
        "--tables",
        metavar="PATTERN",
        help="only upstream db.table names matching these shell patterns (comma list)",
    )
    check.add_argument(
        "--chunk-rows",
        type=positive,
        default=DEFAULT_CHUNK_ROWS,
        help="rows per checksummed key range",
    )
    check.add_argument(
        "--threads", type=positive, default=1, help="tables compared at once (a session each)"
    )
    check.add_argument(
        "--rate-limit", type=positive, metavar="ROWS/S", help="rows read per second, both sides"
    )
    check.add_argument("--json", action="store_true", help="print one JSON document")
    check.add_argument(
        "--fix-sql",
        metavar="FILE",
        help="write the REPLACE/DELETE statements that would make the downstream equal (never run)",
    )
    check.add_argument(
        "--metrics-file",
        metavar="FILE",
        help="also write the result as Prometheus metrics (node_exporter's textfile collector)",
    )
    check.set_defaults(handler=handler)
