"""Vectorizable float64 arithmetic that carries a proven bound on its own error.

The elementwise kernels round a float64 evaluation to float32 or float16 once. With
libm's ``exp`` every element costs a call, and LLVM cannot vectorize the loop. The fast
path here follows correctly rounded math libraries instead: evaluate in float64 with
branch-free code that LLVM vectorizes, carry along an upper bound ``e`` on the absolute
error of every value (running error analysis, Wilkinson), and accept the rounded result
only where the whole interval ``[v - e, v + e]`` rounds to one value of the target format
(rounding is monotone, so the exact value rounds to it too). The rare undecided elements,
and every NaN, inf or out-of-range input (their bounds are NaN or inf), go through the
kernel's scalar path.

Error model (u = 2^-53, the unit roundoff of float64 round-to-nearest): one operation on
values ``a +- ea`` and ``b +- eb`` returns ``v`` with the bound

* ``a + b``: ``ea + eb + U |v| + TINY``
* ``a b``: ``|a| eb + |b| ea + ea eb + U |v| + TINY``
* ``1 / b``: ``q^2 eb RECIPROCAL_SLACK + U |q| + TINY`` while ``|q| eb <= RECIPROCAL_LIMIT``
  (``q`` the computed reciprocal; beyond that limit inf), and ``a / b`` as ``a (1 / b)``
* ``exp(a)``: :func:`exp_bounded`, ``|v| (EXP_REL_ERROR + 1.002 ea) + EXP_ABS_ERROR``
* ``erfc(a)``: :func:`erfc_bounded`, from ``exp(-z^2)`` and the proven polynomials of
  ``erfc(z) exp(z^2)`` (``ERFC_REL_ERROR``); the argument's error ``ea`` moves the value
  by at most ``ERFC_SLOPE ea`` (``sup |erfc'| = 2/sqrt(pi)``) and, for ``a >= 0``, by at
  most the relative ``ea (2a + 1.5)`` (Abramowitz and Stegun 7.1.13 gives
  ``|erfc'(z)/erfc(z)| < z + sqrt(z^2 + 2) <= 2z + sqrt(2)`` for z >= 0, and erfc >= 1
  with ``|erfc'| <= 1.13`` for z < 0)

with ``U = 2^-52 = 2u`` (twice the rounding error: the bound's own arithmetic, a dozen
roundings of nonnegative values, is covered by the slack) and ``TINY = 2^-1022`` for the
absolute error of a result in the subnormal range (at most 2^-1075). TINY is the smallest
normal float64 rather than the smallest subnormal so that the bounds' arithmetic stays on
normal numbers: an Intel core (Cascade Lake here) takes a microcode assist for a
multiply-add with a subnormal operand, and with ``2^-1074`` Swish's bounded derivative took
85 ns an element against 10 (a larger TINY only widens the bounds, by nothing that a
float32 or half result can see). :func:`decided_float32` widens the
interval to ``v -+ (2e + U |v|)`` before rounding its ends, which covers the rounding of
the ends themselves (and of the bound's computation) whatever ``e`` it is given.

``EXP_REL_ERROR`` and ``ERFC_REL_ERROR`` are proven in ``proofs/vmath.py`` (python-flint's
arb) for the range reduction and the polynomials below; ``tests/kernels/test_vmath.py``
checks the constants here against those proofs and the functions against mpmath.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import types
from numba.extending import intrinsic

from kernels._f16 import reinterpret
from kernels._generated.erfc_table import (
    ERFC_DEGREE,
    ERFC_INTERVALS,
    ERFC_TABLE,
    ERFC_WIDTH,
    ERFC_Z_MAX,
)

__all__ = [
    "BLOCK",
    "ERFC_REL_ERROR",
    "ERFC_SLOPE",
    "EXP_ABS_ERROR",
    "EXP_COEFFICIENTS",
    "EXP_DEGREE",
    "EXP_HIGH",
    "EXP_LOW",
    "EXP_REL_ERROR",
    "LN2_HI",
    "LN2_LO",
    "LOG2E",
    "RECIPROCAL_LIMIT",
    "RECIPROCAL_SLACK",
    "TINY",
    "U",
    "decided_float32",
    "erfc_bounded",
    "exp_bounded",
    "float32_boundary",
    "float32_settled",
    "fma",
]

#: Elements per block of the fast loops: one block is decided together, and its undecided
#: elements (if any) are recomputed on the scalar path.
BLOCK = 1024

#: Relative rounding bound used for every operation (2u) and a bound on the absolute error
#: of a result rounded into the subnormal range, normal itself (see above).
U = 2.0**-52
TINY = 2.0**-1022

#: Reciprocal bounds: |1/b_true - 1/b| <= q^2 eb / (1 - |q| eb), and 1/(1 - d) <= 1 + 2d
#: for d <= RECIPROCAL_LIMIT = 2^-20 (the computed |q| is within a factor 1 + u of 1/|b|,
#: inside the slack of U).
RECIPROCAL_LIMIT = 2.0**-20
RECIPROCAL_SLACK = 1.0 + 2.0**-19

#: Range reduction a = k ln2 + r: ln2 split as fdlibm does (LN2_HI has 32 significant bits,
#: so k LN2_HI is exact for |k| < 2^21), log2(e) rounded to float64, and the constant
#: 1.5 2^52 whose addition rounds a float below 2^51 in magnitude to an integer.
LOG2E = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01
LN2_LO = 1.90821492927058770002e-10
_ROUND_SHIFT = 6755399441055744.0
_ROUND_SHIFT_BITS = int(np.float64(_ROUND_SHIFT).view(np.int64))

#: exp(r) on |r| <= ln2/2 by its Taylor polynomial of this degree; coefficients 1/i!
#: (each the float64 nearest to it: i! is exact in float64 for i <= 18), evaluated by
#: Estrin's scheme (:func:`exp_bounded`).
EXP_DEGREE = 13
EXP_COEFFICIENTS = tuple(1.0 / float(math.factorial(i)) for i in range(EXP_DEGREE + 1))
(_C0, _C1, _C2, _C3, _C4, _C5, _C6, _C7, _C8, _C9, _C10, _C11, _C12, _C13) = EXP_COEFFICIENTS

#: exp_bounded's domain: below EXP_LOW exp(a) < 2^-1075 and 0 is within EXP_ABS_ERROR;
#: above EXP_HIGH the bound is inf (the scalar path decides).
EXP_LOW = -745.2
EXP_HIGH = 709.0
#: Proven bounds (proofs/vmath.py): relative error on normal results, absolute error of a
#: result in (or rounded into) the subnormal range: at most 2^-1075 there, bounded by the
#: smallest normal float64 as TINY is (no subnormal operand in the bounds' arithmetic).
EXP_REL_ERROR = 2.0**-50
EXP_ABS_ERROR = 2.0**-1022
#: Largest argument error exp_bounded accepts: e^ea - 1 <= 1.002 ea below it.
_EXP_MAX_ARGUMENT_ERROR = 2.0**-10


@intrinsic
def fma(typingctx, a, b, c):
    """``a b + c`` with one rounding (LLVM's ``llvm.fma.f64``: a fused multiply-add
    instruction where the processor has one, else libm's correctly rounded ``fma``)."""
    if not all(isinstance(t, types.Float) for t in (a, b, c)):
        return None

    def codegen(context, builder, signature, args):
        double = context.get_value_type(types.float64)
        args = [
            context.cast(builder, v, t, types.float64)
            for v, t in zip(args, signature.args, strict=True)
        ]
        signature_ir = ir.FunctionType(double, [double, double, double])
        function = builder.module.declare_intrinsic("llvm.fma", [double], signature_ir)
        return builder.call(function, args)

    return types.float64(a, b, c), codegen


@njit(cache=True, inline="always", error_model="numpy")
def exp_bounded(a, ea):
    """``(v, e)``: ``exp`` of a value known as ``a`` with absolute error at most ``ea``.

    ``v`` approximates ``exp(a)`` and ``|v - exp(a_true)| <= e`` for every ``a_true`` within
    ``ea`` of ``a``. Branch-free: NaN or inf ``a``, ``a > EXP_HIGH`` and ``ea > 2^-10`` give
    a NaN or inf ``e``.

    ``s = c LOG2E + 1.5 2^52`` lies in [2^52, 2^53), where the spacing is 1: its bits minus
    those of 1.5 2^52 are the integer ``k`` (AVX2 has no vector float64-to-int64
    conversion; integer subtraction vectorizes). The polynomial is ``1 + r q(r)`` with
    ``q = c_1 + c_2 r + ... + c_13 r^12`` by Estrin's scheme (pairs ``c_i + c_(i+1) r``,
    joined by ``r^2``, ``r^4``, ``r^8``): after ``r^8``, a chain of two fused multiply-adds
    where Horner's rule has thirteen in all. ``proofs/vmath.py`` counts the roundings on
    each coefficient's path through this tree; with Estrin's roundings degree 12 no longer
    meets ``EXP_REL_ERROR``, degree 13 does (2^-50.46).
    """
    c = min(max(a, EXP_LOW), EXP_HIGH)
    s = c * LOG2E + _ROUND_SHIFT
    k = s - _ROUND_SHIFT
    r = (c - k * LN2_HI) - k * LN2_LO
    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    p1 = fma(_C2, r, _C1)
    p3 = fma(_C4, r, _C3)
    p5 = fma(_C6, r, _C5)
    p7 = fma(_C8, r, _C7)
    p9 = fma(_C10, r, _C9)
    p11 = fma(_C12, r, _C11)
    q1 = fma(p3, r2, p1)
    q5 = fma(p7, r2, p5)
    q9 = fma(p11, r2, p9)
    q = fma(fma(_C13, r4, q9), r8, fma(q5, r4, q1))
    p = fma(q, r, _C0)
    ki = reinterpret(s, np.int64) - _ROUND_SHIFT_BITS
    half = ki >> 1  # 2^k as 2^half 2^(k - half): both normal for k down to -1076
    v = p * reinterpret((half + 1023) << 52, np.float64)
    v = v * reinterpret((ki - half + 1023) << 52, np.float64)
    v = 0.0 if a < EXP_LOW else v
    e = v * (EXP_REL_ERROR + 1.002 * ea) + EXP_ABS_ERROR + (a - a)
    out_of_range = (a > EXP_HIGH) | (ea > _EXP_MAX_ARGUMENT_ERROR)
    return v, (np.inf if out_of_range else e)


#: Proven (proofs/vmath.py): relative error of the polynomial value of erfc(z) exp(z^2),
#: the reduction to t and Horner's rounding included.
ERFC_REL_ERROR = 2.0**-47
#: An upper bound on sup |erfc'| = 2/sqrt(pi) = 1.12837...
ERFC_SLOPE = 1.1284
_ERFC_CENTRE_SCALE = 2.0 / ERFC_WIDTH
_ERFC_INDEX_SCALE = 1.0 / ERFC_WIDTH


@njit(cache=True, inline="always", error_model="numpy")
def erfc_bounded(a, ea):
    """``(v, e)``: ``erfc`` of a value known as ``a`` with absolute error at most ``ea``.

    ``erfc(z) = exp(-z^2) h(z)`` for ``z = |a|`` with ``h`` from the polynomial of z's
    interval (``kernels/_generated/erfc_table.py``), ``z^2 = s + tail`` split exactly by a
    fused multiply-add and ``exp(-z^2) = exp(-s) (1 - tail)`` to second order, and
    ``erfc(a) = 2 - erfc(|a|)`` for ``a < 0`` (a result in (1, 2): no cancellation).
    Beyond ``ERFC_Z_MAX`` the table's last point is used and ``exp(-z^2)`` is 0 within its
    bound (``erfc(27.5) < 2^-1080``).
    Branch-free; a NaN or inf ``a`` gives a NaN ``e``.
    """
    z = abs(a)
    z = z if z < ERFC_Z_MAX else ERFC_Z_MAX  # NaN too: the index below stays in range
    k = min(np.int64(z * _ERFC_INDEX_SCALE), ERFC_INTERVALS - 1)
    t = (z - (k + 0.5) * ERFC_WIDTH) * _ERFC_CENTRE_SCALE
    h = ERFC_TABLE[k, ERFC_DEGREE]
    for j in range(ERFC_DEGREE - 1, -1, -1):
        h = fma(h, t, ERFC_TABLE[k, j])
    s = z * z
    square_tail = fma(z, z, -s)  # z^2 = s + square_tail exactly
    g0, g0_e = exp_bounded(-s, 0.0)
    c = 1.0 - square_tail  # exp(-tail) within tail^2 of 1 - tail, |tail| <= 2^-43
    c_e = square_tail * square_tail + U * c
    g = g0 * c
    g_e = g0 * c_e + c * g0_e + g0_e * c_e + U * g + TINY
    y = g * h
    h_e = h * ERFC_REL_ERROR
    y_e = h * g_e + g * h_e + g_e * h_e + U * y + TINY
    spread = ea * ERFC_SLOPE
    relative = ea * (2.0 * z + 1.5)
    shifted = (y + y_e) * 1.002 * relative if relative <= _EXP_MAX_ARGUMENT_ERROR else spread
    v = y if a >= 0.0 else 2.0 - y
    e = y_e + (shifted if a >= 0.0 else spread + U * v + TINY)
    return v, e + (a - a)


@njit(cache=True, inline="always", error_model="numpy")
def decided_float32(v, e):
    """``(y, ok)``: ``y = float32(v)``; ``ok`` when every real within ``e`` of ``v`` rounds
    to ``y`` (then ``y`` is the correctly rounded value). The ends are compared as bits, so
    an interval that straddles 0 (``-0.0`` and ``+0.0``) is undecided; NaN or inf ``e`` is
    never ok."""
    w = 2.0 * e + U * abs(v)  # wide enough that rounding v -+ w cannot move an end inwards
    low = np.float32(v - w)
    high = np.float32(v + w)
    same = reinterpret(low, np.int32) == reinterpret(high, np.int32)
    return np.float32(v), same & (low == high)  # the float comparison is False for NaN


@njit(cache=True, inline="always", error_model="numpy")
def float32_boundary(v, e):
    """The rounding boundary between two neighbouring float32 numbers inside the interval
    of :func:`decided_float32` (``v`` -+ ``2e + U |v|``), exactly; NaN where the interval
    holds none, more than one, or an infinite one. The undecided elements of the bounded
    loops settle against it: a float64 evaluation of x/2 + x^2/4 at a float32 subnormal x
    gives the midpoint x/2 exactly, and one a few float64 steps off it may sit on the wrong
    side of it."""
    w = 2.0 * e + U * abs(v)
    low = np.float64(np.float32(v - w))
    high = np.float64(np.float32(v + w))
    m = 0.5 * (low + high)
    below = np.float64(np.float32(np.nextafter(m, -np.inf)))
    above = np.float64(np.float32(np.nextafter(m, np.inf)))
    adjacent = below == low and above == high and low != high
    return m if adjacent and abs(m) < np.inf else np.nan


@njit(cache=True, inline="always", error_model="numpy")
def float32_settled(v, m, offset):
    """``float32(v)``, unless ``m`` (:func:`float32_boundary`) is a boundary and ``offset``,
    an estimate of the exact value minus ``m``, is nonzero: then the float32 number on that
    side of ``m``."""
    if m == m and offset != 0.0:
        return np.float32(np.nextafter(m, np.inf if offset > 0.0 else -np.inf))
    return np.float32(v)
