"""The parallel drivers of the elementwise loops that work a block at a time.

A ``_loop`` runs its ``_block`` function over the blocks of ``BLOCK`` elements in parallel;
the block functions (the bounded ones of :mod:`derive.codegen.generate`, the selecting ones
of :mod:`derive.codegen.exact`) hold the arithmetic. The driver itself stays small: Numba's
parallel passes and LLVM then work on a short function. ``{x}`` and ``{g}`` name the
arrays (the bounded loops call the bits of halves ``bits``, the selecting ones ``x``).
"""

from __future__ import annotations

PARALLEL_UNARY = """\
@njit(cache=True, parallel=True, error_model="numpy")
def {q}_{suffix}_loop({x}, out):
    n = {x}.size
    for b in prange((n + BLOCK - 1) // BLOCK):
        lo, hi = b * BLOCK, min(n, (b + 1) * BLOCK)
        {q}_{suffix}_block({x}[lo:hi], out[lo:hi])
"""

PARALLEL_VJP = """\
@njit(cache=True, parallel=True, error_model="numpy")
def vjp_{suffix}_loop({x}, {g}, out):
    n = {x}.size
    for b in prange((n + BLOCK - 1) // BLOCK):
        lo, hi = b * BLOCK, min(n, (b + 1) * BLOCK)
        vjp_{suffix}_block({x}[lo:hi], {g}[lo:hi], out[lo:hi])
"""
