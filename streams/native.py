"""The optional native fast paths: the ``ticdc-sink-native`` wheel, built from ``native/``.

A native decoder takes the well-formed messages and hands anything else back to its Python codec,
which stays the reference: it decides what is accepted and words every error; the native reader
of staged rows does the same with :func:`streams.packed.unpack_row`. The tests hold each pair to
the same results. ``TICDC_SINK_NATIVE=0`` turns the native paths off.
"""

from __future__ import annotations

import os
from functools import cache
from types import ModuleType
from typing import Any

from streams.model import Op, Resolved, RowChange

NATIVE_ENV = "TICDC_SINK_NATIVE"


def native_module() -> ModuleType | None:
    """``ticdc_sink_native`` when it is installed and not turned off, else None."""
    if os.environ.get(NATIVE_ENV, "1") == "0":
        return None
    try:
        import ticdc_sink_native
    except ImportError:
        return None
    return ticdc_sink_native


def native_decoder(name: str, *extra: Any, enabled: bool = True) -> Any | None:
    """The native class ``name`` made for the model (and ``extra``), or None."""
    module = native_module() if enabled else None
    if module is None:
        return None
    return getattr(module, name)(_model(module), *extra)


@cache
def _model(module: ModuleType) -> Any:
    # Checks once that the model's classes are what the native side builds.
    return module.Model(RowChange, Resolved, Op.INSERT, Op.UPDATE, Op.DELETE)
