"""The optional native fast paths: the ``ticdc-sink-native`` wheel, built from ``native/``.

One calling convention for every native class: it is made with a :class:`ticdc_sink_native.Model`
and whatever caches or readers it uses, passed explicitly by its Python twin; each method takes
the same arguments as the Python function it stands in for and returns None for anything it does
not take. The Python twin is the reference: it decides what is accepted and words every error.
:func:`native_first` is the one place where a None falls back to it. The tests hold each pair to
the same results. ``TICDC_SINK_NATIVE=0`` turns the native paths off.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

from core.model import Op, Resolved, RowChange

if TYPE_CHECKING:
    from ticdc_sink_native import Model

NATIVE_ENV = "TICDC_SINK_NATIVE"

First = TypeVar("First")
Second = TypeVar("Second")
Result = TypeVar("Result")


def native_module() -> ModuleType | None:
    """``ticdc_sink_native`` when it is installed and not turned off, else None."""
    if os.environ.get(NATIVE_ENV, "1") == "0":
        return None
    try:
        import ticdc_sink_native
    except ImportError:
        return None
    return ticdc_sink_native


def native_model(enabled: bool = True) -> Model | None:
    """The event model as the native classes build it, or None without the native module
    (``enabled`` False turns it off for one caller)."""
    module = native_module() if enabled else None
    if module is None:
        return None
    # Checks that the model's classes are what the native side builds.
    model: Model = module.Model(RowChange, Resolved, Op.INSERT, Op.UPDATE, Op.DELETE)
    return model


def native_first(
    native: Callable[[First, Second], Result | None] | None,
    python: Callable[[First, Second], Result],
) -> Callable[[First, Second], Result]:
    """``native``, falling back to ``python`` for whatever it returns None for; ``python``
    alone without ``native``. The fallback is one closure call (Simple JSON decodes a message
    in ~2.5 us; a method around the native call measured a tenth of that)."""
    if native is None:
        return python

    def first(first: First, second: Second) -> Result:
        found = native(first, second)
        return python(first, second) if found is None else found

    return first
