"""Calls into the ``parallel=True`` Numba loops, safe from several Python threads at once.

Numba runs a ``prange`` loop on its threading layer: TBB or OpenMP, which accept parallel
launches from several threads at once, or ``workqueue`` (its fallback without either, or
chosen with ``NUMBA_THREADING_LAYER=workqueue``), which aborts the whole process when two
threads launch parallel loops at the same time ("the workqueue threading layer is not
threadsafe"). :func:`thread_safe` wraps a parallel loop so that on workqueue one such call
runs at a time (one lock shared by every wrapped loop, since the layer's state is shared);
on TBB and OpenMP it adds nothing but a check.

Numba chooses the layer when it first compiles or loads a parallel loop, so before that
``numba.threading_layer()`` is unknown: the calls made until then take the lock too.
Serializing changes no result: a loop's arithmetic does not depend on which threads run it,
or when.

Wrap the loop where it is defined, above its ``@njit(..., parallel=True)``, or where it is
looked up (the generated loops): ``thread_safe(getattr(generated, name))(...)``. A wrapped
loop is a Python function, callable from Python only (the wrapped dispatcher is its
``__wrapped__``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numba

__all__ = ["UNSAFE_LAYERS", "needs_lock", "thread_safe"]

#: The threading layers that abort on concurrent parallel launches.
UNSAFE_LAYERS = frozenset({"workqueue"})

#: One lock for every wrapped loop: the workqueue layer's state is global to the process.
#: Reentrant, so a wrapped loop may be called while the lock is held by its caller.
_LOCK = threading.RLock()

Loop = TypeVar("Loop", bound=Callable[..., Any])


def needs_lock() -> bool:
    """Whether parallel launches must take turns: the layer is workqueue, or not chosen yet
    (the launch about to run may choose workqueue)."""
    try:
        return numba.threading_layer() in UNSAFE_LAYERS
    except ValueError:  # "Threading layer is not initialized."
        return True


def thread_safe(loop: Loop) -> Loop:
    """``loop`` (a ``parallel=True`` dispatcher), called under the shared lock whenever the
    threading layer cannot take concurrent launches (see the module docstring)."""

    def call(*args: Any) -> Any:
        if not needs_lock():
            return loop(*args)
        with _LOCK:
            return loop(*args)

    # not functools.wraps: that would copy the dispatcher's own __dict__ onto the wrapper
    functools.update_wrapper(call, loop, updated=())
    return call  # type: ignore[return-value]
