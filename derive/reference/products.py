"""The correctly rounded VJP of an elementwise module, ``g * f'(x)``, at pairs of float16
or of bfloat16 values.

Fast enough for all 2^32 pairs (``liptable certify --quantity vjp``): one float64 product
per pair from the format's exhaustive table of ``f'``, decided by an error interval; the
pairs near a rounding boundary settled against it exactly, from the ball of ``f'``; and the
generic references (:func:`derive.reference.core.reference_array`) for the rest.
"""

from __future__ import annotations

import functools

import numpy as np
import sympy as sp

from derive.reference.balls import enclose, exact_form, signs
from derive.reference.core import bfloat16_table, float16_table, reference_array
from derive.reference.formats import BFLOAT16, round_float64

__all__ = ["vjp_reference"]

#: Product error of :func:`vjp_reference`: |p - g f'(x)| <= 2^-52 |p| (1 + 2^-52) from the
#: float64 product and the float64 rounding of f'(x); the margin is twice that, which also
#: covers the rounding of p -+ w. The absolute part covers float64's subnormal range: |g|
#: (below 2^16 for float16, 2^128 for bfloat16) times f'(x)'s error of at most 2^-1075,
#: plus the product's 2^-1075.
_RELATIVE_MARGIN = 2.0**-51
_ABSOLUTE_MARGIN = {np.dtype(np.float16): 2.0**-1050, BFLOAT16: 2.0**-940}
#: Below this |f'(x)|, every g gives |g f'(x)| < 2^-872, far below half the smallest
#: subnormal of either format: the product rounds to a zero.
_TINY_DERIVATIVE = 2.0**-1000
#: The significand bits of g: a float64 d whose low bits (this many) are zero times g fits.
_SIGNIFICAND_BITS = {np.dtype(np.float16): 11, BFLOAT16: 8}
#: Half the smallest subnormal of the format: a magnitude below it rounds to a zero.
_HALF_SMALLEST = {np.dtype(np.float16): 2.0**-25, BFLOAT16: 2.0**-134}
_TABLES = {np.dtype(np.float16): float16_table, BFLOAT16: bfloat16_table}
#: Cover the rounding of ``|g| err`` and of ``g d - m`` (each within 2^-52 relative), and
#: the underflow of ``|g| err``.
_SLACK = 1.0 + 2.0**-40
_TINY = 2.0**-1074


@functools.cache
def _derivative_facts(
    expr: sp.Expr, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(d, exact, err, side)`` at every bit pattern of the 16-bit ``dtype``: f'(x)
    correctly rounded to float64 (the exhaustive table's); whether that float64 is f'(x)
    itself (proven by a ball of radius 0 or an exact form; NaN inputs are never exact); a
    bound on ``|f'(x) - d|`` (inf where none is known); and the sign of ``f'(x) - d`` where
    the ball proves it (0 where it does not, or where ``d`` is exact)."""
    table = _TABLES[dtype](expr)
    d = table.exact
    with np.errstate(invalid="ignore"):  # bfloat16's signaling NaNs, widened to be tested
        finite = np.isfinite(table.inputs.astype(np.float32))
    exact = np.zeros(d.size, dtype=bool)
    err = np.full(d.size, np.inf)
    side = np.zeros(d.size, dtype=np.int8)
    if exact_form(expr) is not None:
        exact[finite] = True
        err[finite] = 0.0
    else:
        where = np.flatnonzero(finite)
        points = table.inputs[where].astype(np.float64)
        balls = enclose(expr, points, 128)
        same = balls.hi == d[where]
        exact[where] = (balls.err == 0) & same
        err[where] = np.where(same, balls.err, np.inf)
        side[where] = np.where(same, balls.side, 0)
        # the side the ball's margin leaves open (x near 0: f'(x) = d + O(x^2)), exactly
        open_side = ~exact[where] & (side[where] == 0) & np.isfinite(d[where])
        rest = where[open_side]
        side[rest] = signs(expr, points[open_side], d[rest], 448)
    return d, exact, err, side


def _boundary(low: np.ndarray, high: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The one rounding boundary of ``dtype`` between its values ``low`` and ``high`` (as
    float64), where they are neighbours; NaN where they are not (equal, or farther apart)
    or the boundary is not finite."""
    a, b = low.astype(np.float64), high.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        m = 0.5 * (a + b)  # exact: both have at most 11 significant bits
        below = round_float64(np.nextafter(m, -np.inf), dtype).astype(np.float64)
        above = round_float64(np.nextafter(m, np.inf), dtype).astype(np.float64)
        neighbours = (below == a) & (above == b) & (a != b) & np.isfinite(m)
    return np.where(neighbours, m, np.nan)


def _settle(d, err, side, g, low, high, dtype) -> tuple[np.ndarray, np.ndarray]:
    """``(result, settled)`` for products ``g f'(x)`` whose interval holds a rounding
    boundary ``m`` (between the format's neighbours ``low`` and ``high``): the side of ``m``
    the exact product lies on, from ``g d - m`` computed exactly and ``|g (f'(x) - d)| <=
    |g| err``. ``g d = g d_hi + g d_lo`` with ``d_hi`` (``d`` with its low bits cleared) and
    ``d_lo`` each short enough for an exact product with g's significand; ``g d_hi - m`` is
    exact (Sterbenz: the two lie within a factor 2), and the sum's rounding keeps its sign.
    Where ``g d = m`` exactly, the side is ``sign(g) sign(f'(x) - d)`` (the ball's), and
    with ``f'(x) = d`` exactly it is a tie, rounded to even."""
    m = _boundary(low, high, dtype)
    clear = np.uint64((1 << _SIGNIFICAND_BITS[dtype]) - 1)
    d_hi = (d.view(np.uint64) & ~clear).view(np.float64)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        gap = (g * d_hi - m) + g * (d - d_hi)
        reach = np.abs(g) * err * _SLACK + _TINY  # the product may underflow
        up = (gap > reach) | ((gap == 0) & (np.sign(g) * side > 0))
        down = (gap < -reach) | ((gap == 0) & (np.sign(g) * side < 0))
        tie = (gap == 0) & (err == 0)
    result = np.where(up, high, low)
    result[tie] = round_float64(m[tie], dtype)
    return result, (up | down | tie) & (m == m)


def vjp_reference(derivative: sp.Expr, xs: np.ndarray, gs: np.ndarray) -> np.ndarray:
    """``g * f'(x)`` correctly rounded to the format of ``xs`` and ``gs`` (finite float16 or
    bfloat16 values) for ``f'(x)`` = ``derivative`` (a SymPy expression in ``x``).

    With ``d`` = f'(x) correctly rounded to float64, the product ``p = g d`` in float64 is
    within ``w = 2^-51 |p| + 2^-1050`` of ``g f'(x)``; where ``p - w`` and ``p + w`` round to
    the same value of the format (rounding is monotone), so does ``g f'(x)``, and the result
    is ``p`` rounded. ``p`` is the product itself, rounded once, where ``d`` is exact and its
    significand short enough (the low 11 of its 52 bits zero for a float16 g, 8 for bfloat16)
    for ``g d`` to fit in float64.
    Where ``|d| < 2^-1000`` or ``p = +-0``, ``g f'(x)`` is below 2^-872, and where
    ``|p| + w`` is below half the format's smallest subnormal, so is ``|g f'(x)|``; the result
    is then the zero of ``p``'s sign, IEEE's ``sign(g) sign(d)`` (``d`` has the sign of f'(x);
    for ``g = 0`` or ``f'(x) = 0`` the exact product 0 has no sign of its own). A pair
    whose interval holds a rounding boundary (an odd subnormal g times f'(x) = 1/2 + O(x)
    near x = 0 in GeLU, about 10^6 pairs per module) is settled against it from the exact
    ``g d`` and the ball of ``f'(x)`` (:func:`_settle`); the few left are evaluated as
    ``g f'(x)`` by balls and mpmath (:func:`derive.reference.core.reference_array`).
    """
    dtype = np.dtype(xs.dtype)
    d_all, exact_all, err_all, side_all = _derivative_facts(sp.sympify(derivative), dtype)
    bits = xs.view(np.uint16)
    d, exact = d_all[bits], exact_all[bits]
    g = gs.astype(np.float64)
    with np.errstate(over="ignore", under="ignore"):
        p = g * d
        short = (d.view(np.uint64) & np.uint64((1 << _SIGNIFICAND_BITS[dtype]) - 1)) == 0
        product_exact = exact & short & ((np.abs(p) >= 2.0**-1022) | (p == 0))
        # |g f'(x)| < 2^128 2^-1000 rounds to the zero of p's sign: d has f'(x)'s sign
        # (a nonzero float64 within 2^-1075 of it, or its signed zero), p = g d has g d's
        w = np.abs(p) * _RELATIVE_MARGIN + _ABSOLUTE_MARGIN[dtype]
        # and so does every product whose interval lies below half the smallest subnormal
        tiny = np.abs(p) + w < _HALF_SMALLEST[dtype]
        signed_zero = (np.abs(d) < _TINY_DERIVATIVE) | (p == 0) | tiny
        low, high = round_float64(p - w, dtype), round_float64(p + w, dtype)
        out = round_float64(p, dtype)  # also the zero's sign, which p + 0 would lose
    straddles = low.view(np.uint16) != high.view(np.uint16)
    near = np.flatnonzero(~product_exact & ~signed_zero & straddles)
    b = bits[near]
    settled_values, settled = _settle(
        d[near], err_all[b], side_all[b], g[near], low[near], high[near], dtype
    )
    out[near[settled]] = settled_values[settled]
    for i in near[~settled]:
        scaled = sp.piecewise_fold(sp.Rational(float(gs[i])) * derivative)
        out[i] = reference_array(scaled, xs[i : i + 1], dtype)[0]
    return out
