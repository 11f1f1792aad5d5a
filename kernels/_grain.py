"""The normalizations' and Softmax's loops on several threads, where the work pays for them.

Every loop of ``kernels/_generated/{layernorm,rmsnorm,centernorm,weightnorm,batchnorm}.py``
that :func:`loop_for` runs, and Softmax's row loops (``kernels/softmax.py``), take two last
arguments, ``part`` and ``parts``, and run the share of their rows (or blocks of rows, or
blocks of features) that :func:`share` gives part ``part`` of ``parts``. The loops compiled
with ``nogil=True`` (all but the norms' strict ``*_f16s`` and ``*_bf16s`` loops) run as
``parts`` parts at once, one on the calling thread and the others on a thread pool; the
others as one part.

Why threads of our own rather than ``parallel=True`` and ``prange``: Numba compiles a
``parallel=True`` loop about twice as slowly as the same loop without it, and a small input
needs the serial loop anyway (threads cost more than they give below :data:`GRAIN`); the
two compiled versions of every loop were most of the norms' compile time (BatchNorm's, from
an empty cache: 106 s of CPU with them, 55 s for the serial loops alone). One ``nogil``
function serves both now, and no Numba threading layer is involved (so the norms need no
:func:`kernels._threads.thread_safe`).

Same bits for any number of parts: every row's (every block's) arithmetic is written in the
loop body and does not depend on which part runs it, and the sums over rows are kept per
fixed block and combined in a fixed order (the tests compare 1 and 2 threads above the
grain, for every loop and path). PyTorch's CPU kernels split their work from the same
threshold (``at::internal::GRAIN_SIZE``, 32,768 elements).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numba
from numba import njit
from numba.core.dispatcher import Dispatcher

__all__ = ["GRAIN", "loop_for", "share"]

#: Below this many elements of work a call runs as one part.
GRAIN = 1 << 15

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()


@njit(cache=True)
def share(count, part, parts):
    """``(start, stop)``: the iterations of part ``part`` of ``parts`` among ``count``,
    contiguous, in order, the first ``count % parts`` parts one longer.

    >>> [share(10, part, 3) for part in range(3)]
    [(0, 4), (4, 7), (7, 10)]
    """
    base, extra = count // parts, count % parts
    start = part * base + min(part, extra)
    return start, start + base + (1 if part < extra else 0)


def _pool(workers: int) -> ThreadPoolExecutor:
    """The shared pool, with at least ``workers`` threads (a larger one replaces it; the
    old one finishes what it was given)."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < workers:
            if _POOL is not None:
                _POOL.shutdown(wait=False)
            _POOL = ThreadPoolExecutor(workers, thread_name_prefix="liptable")
            _POOL_SIZE = workers
        return _POOL


def _run(loop: Dispatcher, parts: int, *args: Any) -> None:
    futures = [_pool(parts - 1).submit(loop, *args, part, parts) for part in range(1, parts)]
    try:
        loop(*args, 0, parts)
    finally:
        for future in futures:
            future.result()


def loop_for(loop: Dispatcher, work: int) -> Callable[..., None]:
    """What to call, with the loop's other arguments, for ``work`` elements: ``loop`` as one
    part below :data:`GRAIN`, on one Numba thread (``numba.get_num_threads()``, which the
    report's workers set to 1) or for a loop compiled without ``nogil``; else as that many
    parts at once.

    >>> import numpy as np
    >>> from kernels._generated import layernorm
    >>> x, out = np.ones((2, 3)), np.empty((2, 3))
    >>> loop_for(layernorm.forward_f64, x.size)(x, np.ones(3), np.zeros(3), 1e-5, out)
    >>> out
    array([[0., 0., 0.],
           [0., 0., 0.]])
    """
    threads = numba.get_num_threads()
    if work < GRAIN or threads == 1 or not loop.targetoptions.get("nogil"):
        return functools.partial(_call_whole, loop)
    return functools.partial(_run, loop, threads)


def _call_whole(loop: Dispatcher, *args: Any) -> None:
    loop(*args, 0, 1)
