"""Rows in parallel where the work pays for the threads; serially, in a twin, elsewhere.

A ``parallel=True`` loop of the norms runs its rows (or blocks of rows) with ``prange``.
For a small input the threads cost more than they give, and so does compiling: Numba
compiles a ``parallel=True`` loop about twice as slowly as the same loop without it
(measured, empty cache: BatchNorm's float64 forward and VJP 7.5 s and 9.2 s against 5.5 s
and 3.3 s serially). :func:`loop_for` therefore picks, per call, between the loop and its
serial twin: the same Python function compiled with the same options but ``parallel``
(``prange`` then runs as ``range``, in order), under a name of its own so that the two keep
separate Numba caches. The twin runs when the work is below :data:`GRAIN` elements or
Numba runs one thread (the report's workers); the loop, under
:func:`kernels._threads.thread_safe`, otherwise.

Same bits either way: every row's (every block's) arithmetic is written in the loop body and
does not depend on which thread runs it, or in what order (the tests compare the two at
sizes above the grain, for every loop and path). PyTorch's CPU kernels make the same
choice with the same threshold (``at::internal::GRAIN_SIZE``, 32,768 elements).

Tried and reverted (commit 98c3802): one ``nogil`` loop per path over a share of its rows,
run as two parts at once on the calling thread and a thread pool. It compiled every norm in
a third of the time (69 s of CPU against 215 s, empty cache), but ran LayerNorm's float32
forward + VJP 6-7% slower at (4096, 1024) and 10-15% slower at (256, 4096) than a
``prange`` over the same two parts, interleaved in one process: Numba's OpenMP threads spin
between loops, and a pool thread is woken for every call (about 40 us a call here, and
more on an idle virtual CPU).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numba
from numba.core.dispatcher import Dispatcher

from kernels._threads import thread_safe

__all__ = ["GRAIN", "loop_for", "one_thread", "serial"]

#: Below this many elements of work a call runs serially.
GRAIN = 1 << 15

_TWINS: dict[int, Dispatcher] = {}


def serial(loop: Dispatcher) -> Dispatcher:
    """``loop``'s serial twin (built once; compiled on its first call), or ``loop`` itself
    if it is not a parallel loop.

    >>> from kernels._generated import layernorm
    >>> twin = serial(layernorm.forward_f64)
    >>> twin.targetoptions["parallel"], twin.py_func.__qualname__
    (False, 'forward_f64__serial')
    >>> serial(layernorm.jacobian_f64) is layernorm.jacobian_f64
    True
    """
    if not loop.targetoptions.get("parallel"):
        return loop
    twin = _TWINS.get(id(loop))
    if twin is None:
        function = loop.py_func
        clone = types.FunctionType(
            function.__code__,
            function.__globals__,
            function.__name__,
            function.__defaults__,
            function.__closure__,
        )
        # its own qualified name: Numba's cache files are named by it
        clone.__qualname__ = f"{function.__qualname__}__serial"
        clone.__module__ = function.__module__
        clone.__doc__ = function.__doc__
        options = {k: v for k, v in loop.targetoptions.items() if k != "nopython"}
        options["parallel"] = False
        twin = _TWINS[id(loop)] = numba.njit(cache=True, **options)(clone)
    return twin


def loop_for(loop: Dispatcher, work: int) -> Callable[..., Any]:
    """What to call for ``work`` elements: :func:`serial` (``loop``) below :data:`GRAIN` or
    on one Numba thread, else ``loop`` made :func:`~kernels._threads.thread_safe`."""
    if work < GRAIN or numba.get_num_threads() == 1:
        return serial(loop)
    return thread_safe(loop)


@contextmanager
def one_thread() -> Iterator[None]:
    """Numba's loops on one thread for the calling thread while the block runs
    (``numba.set_num_threads`` is per calling thread; :func:`loop_for` then picks the serial
    twins), the previous count restored afterwards, also on an error."""
    previous = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(previous)
