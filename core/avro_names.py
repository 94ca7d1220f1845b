"""The names TiCDC's Avro protocol gives tables and columns: Avro names hold only
``[A-Za-z0-9_]`` (pingcap/tiflow ``pkg/sink/codec/common/helper.go`` ``SanitizeName``, called by
``pkg/sink/codec/avro/avro.go`` for the record name, the namespace and every field), so a row's
table and column names are those, not the upstream's; the DDL messages carry the upstream's."""

from __future__ import annotations

import re
from collections.abc import Iterable

_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_]")


def sanitize_name(name: str) -> str:
    """An Avro name of a TiDB name, as TiCDC makes it: every character but ``[A-Za-z0-9_]``
    becomes ``_``, and a leading digit gets a ``_`` before it."""
    cleaned = _NOT_A_NAME.sub("_", name)
    return "_" + cleaned if cleaned[:1].isdigit() else cleaned


def avro_renames(carried: Iterable[str], downstream: Iterable[str]) -> dict[str, str]:
    """For each name of ``carried`` that ``downstream`` lacks, the one downstream name (not itself
    carried) whose Avro name it is; a name that two downstream names sanitize to is left out."""
    present = set(downstream)
    carried = list(carried)
    candidates: dict[str, list[str]] = {}
    for name in present - set(carried):
        candidates.setdefault(sanitize_name(name), []).append(name)
    return {
        name: candidates[name][0]
        for name in carried
        if name not in present and len(candidates.get(name, ())) == 1
    }
