"""The optional native fast paths: the ``ticdc-sink-native`` wheel, built from ``native/``.

One calling convention for every native class: it is made with a :class:`ticdc_sink_native.Model`
and whatever caches or readers it uses, passed explicitly by its Python twin; each method takes
the same arguments as the Python function it stands in for and returns None for anything it does
not take. The Python twin is the reference: it decides what is accepted and words every error.
:func:`native_first` is the one place where a None falls back to it. The tests hold each pair to
the same results. ``TICDC_SINK_NATIVE=0`` turns the native paths off.

A wheel is used whole or not at all: :func:`native_module` takes it only when it was built from
these sources, its :data:`API_VERSION` and member layout (``STAGING_LAYOUT_VERSION``) this code's;
any other wheel is declined, with one warning, and the Python twins do all the work.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

from core.model import Op, Resolved, RowChange

if TYPE_CHECKING:
    from ticdc_sink_native import Model

log = logging.getLogger("ticdc_sink.native")

NATIVE_ENV = "TICDC_SINK_NATIVE"
# What this code calls of the wheel (its classes, functions and their arguments): the wheel
# exports the same number (``API_VERSION``, native/src/lib.rs). Bump both with any change there.
API_VERSION = 3

First = TypeVar("First")
Second = TypeVar("Second")
Result = TypeVar("Result")


def native_module() -> ModuleType | None:
    """``ticdc_sink_native`` when it is installed, built from these sources and not turned off,
    else None."""
    if os.environ.get(NATIVE_ENV, "1") == "0":
        return None
    return _installed_module()


@functools.cache
def _installed_module() -> ModuleType | None:
    """The installed wheel, checked once. A wheel built from other sources is declined rather
    than refused: the Python twins do the same work, only slower, and a stale wheel is a build
    step behind, not a broken one."""
    try:
        import ticdc_sink_native
    except ImportError:
        return None
    found = wheel_versions(ticdc_sink_native)
    if found == expected_versions():
        return ticdc_sink_native
    log.warning(
        "ticdc_sink_native is API version %s, member layout %s; this code calls API version "
        "%s, member layout %s: the wheel is not used (rebuild it: make, or pip install ./native)",
        *found,
        *expected_versions(),
    )
    return None


def wheel_versions(module: ModuleType) -> tuple[object, object]:
    """What ``module`` says it was built as: its API version and member layout (None for what
    it does not say)."""
    return getattr(module, "API_VERSION", None), getattr(module, "STAGING_LAYOUT_VERSION", None)


def expected_versions() -> tuple[int, int]:
    """The API version and member layout a wheel must have to be used."""
    # Imported here: core.staging imports this module.
    from core.staging.layout import LAYOUT_VERSION

    return API_VERSION, LAYOUT_VERSION


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
    alone without ``native``. The fallback is one closure call: a native decode is short enough
    that a method around it would add a measurable share of its cost."""
    if native is None:
        return python

    def first(first: First, second: Second) -> Result:
        found = native(first, second)
        return python(first, second) if found is None else found

    return first
