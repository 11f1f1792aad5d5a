"""Double-double arithmetic for the float64 kernels (hand-written; no SymPy).

A value is a pair ``(hi, lo)`` of float64 with ``hi = fl(hi + lo)``: about 106 significant
bits. The generated float64 kernels evaluate their formulas in it and round once at the end,
so cancellation inside a formula (GeLU's derivative near its minimum adds terms of opposite
sign three times larger than the result) no longer costs float64 accuracy.

Error-free transformations (Knuth's TwoSum, Dekker's product with Veltkamp's split) give
exact sums and products. Elementary functions are the libm value at ``hi`` corrected to
first order by ``lo`` (``exp(h + l) = exp(h)(1 + l)``, ...): the libm error (a few ULPs at
most, glibc's stated goal) stays, but the argument's rounding errors no longer get
amplified.

Non-finite values: an operation whose leading part is inf or NaN returns ``(hi, 0.0)``,
so IEEE semantics of the leading part are kept and no ``inf - inf`` appears in ``lo``.
Splitting is exact for |a| < 2^996; beyond that the product falls back to plain float64.
"""

from __future__ import annotations

import math

from numba import njit

#: Veltkamp's splitting constant 2^27 + 1, and the magnitude above which splitting overflows.
_SPLITTER = 134217729.0
_SPLIT_LIMIT = 2.0**996
_TWO_OVER_SQRT_PI = 1.1283791670955126


@njit(cache=True)
def two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly (Knuth)."""
    s = a + b
    if not math.isfinite(s):
        return s, 0.0
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@njit(cache=True)
def quick_two_sum(a, b):
    """``two_sum`` for |a| >= |b| (Dekker)."""
    s = a + b
    if not math.isfinite(s):
        return s, 0.0
    return s, b - (s - a)


@njit(cache=True)
def _split(a):
    t = _SPLITTER * a
    high = t - (t - a)
    return high, a - high


@njit(cache=True)
def two_prod(a, b):
    """``(p, e)`` with ``p = fl(a b)`` and ``p + e = a b`` exactly (Dekker, Veltkamp)."""
    p = a * b
    if not math.isfinite(p) or abs(a) >= _SPLIT_LIMIT or abs(b) >= _SPLIT_LIMIT:
        return p, 0.0
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


@njit(cache=True)
def dd_add(ah, al, bh, bl):
    s, e = two_sum(ah, bh)
    if not math.isfinite(s):
        return s, 0.0
    t, f = two_sum(al, bl)
    e += t
    s, e = quick_two_sum(s, e)
    e += f
    return quick_two_sum(s, e)


@njit(cache=True)
def dd_sub(ah, al, bh, bl):
    return dd_add(ah, al, -bh, -bl)


@njit(cache=True)
def dd_mul(ah, al, bh, bl):
    p, e = two_prod(ah, bh)
    if not math.isfinite(p):
        return p, 0.0
    e += ah * bl + al * bh
    return quick_two_sum(p, e)


@njit(cache=True)
def dd_div(ah, al, bh, bl):
    q1 = ah / bh
    if not math.isfinite(q1) or q1 == 0.0:
        return q1, 0.0
    ph, pl = dd_mul(q1, 0.0, bh, bl)
    rh, rl = dd_sub(ah, al, ph, pl)
    q2 = rh / bh
    ph, pl = dd_mul(q2, 0.0, bh, bl)
    rh, rl = dd_sub(rh, rl, ph, pl)
    q3 = rh / bh
    q1, q2 = quick_two_sum(q1, q2)
    return dd_add(q1, q2, q3, 0.0)


@njit(cache=True)
def dd_exp(ah, al):
    e = math.exp(ah)
    if not math.isfinite(e) or e == 0.0:
        return e, 0.0
    return quick_two_sum(e, e * al)


@njit(cache=True)
def dd_log(ah, al):
    v = math.log(ah)
    if not math.isfinite(v):
        return v, 0.0
    return two_sum(v, al / ah)


@njit(cache=True)
def dd_erf(ah, al):
    v = math.erf(ah)
    return two_sum(v, _TWO_OVER_SQRT_PI * math.exp(-ah * ah) * al)


@njit(cache=True)
def dd_erfc(ah, al):
    v = math.erfc(ah)
    if v == 0.0:
        return v, 0.0
    return two_sum(v, -_TWO_OVER_SQRT_PI * math.exp(-ah * ah) * al)


@njit(cache=True)
def dd_tanh(ah, al):
    t = math.tanh(ah)
    return two_sum(t, (1.0 - t) * (1.0 + t) * al)


@njit(cache=True)
def dd_sqrt(ah, al):
    s = math.sqrt(ah)
    if not math.isfinite(s) or s == 0.0:
        return s, 0.0
    p, e = two_prod(s, s)
    return quick_two_sum(s, ((ah - p) - e + al) / (2.0 * s))


@njit(cache=True)
def dd_abs(ah, al):
    if ah < 0.0:
        return -ah, -al
    return ah, al
