"""Softmax over the last axis of ``x`` (shape (..., D)): ``y_i = exp(x_i) / sum_j exp(x_j)``.

Source: 001_76ce3a8a4b6079c3.txt, Table 2, row Softmax (Lipschitz constant printed as
"<= 1", Gao & Pavel 2017). Backward: ``dx_i = y_i (g_i - <g, y>)``; the Jacobian of one
row is ``J = diag(y) - y y^T`` (numerator layout, symmetric).

Evaluation. Every row is shifted by its maximum ``x_m`` (``m`` = the FIRST index of the
largest entry), so no exponential overflows: ``e_j = exp(x_j - x_m) <= 1``, ``e_m = 1``,
``s = sum_j e_j`` in ``[1, D]``, ``y_j = e_j / s``. Inputs of +-65504 in float16 and spreads
such as ``(1e300, -1e300)`` in float64 (where ``x_j - x_m`` overflows to ``-inf``, and
``exp(-inf) = 0`` is the correctly rounded result) are fine.

Accuracy (float64, and float32/float16 computed the same way in float64). The shift
``x_j - x_m`` is formed exactly as a double-double (two_sum, ``kernels/_dd.py``), and the
exponential of the pair is ``exp(hi) (1 + lo)``; so the spread of the row does not amplify
anything and each ``e_j`` carries only the libm error of ``exp`` (glibc: under 1 ULP).
Sums, quotients and products run in double-double and are rounded once. The libm calls
have a loop of their own; the rest runs in branch-free loops that LLVM vectorizes: each
row's sums in 64 lanes (lane k adds the leading parts of the entries k, k + 64, ... by
TwoSum, their low parts and the TwoSum errors alongside; then the lanes pairwise), and the
pair quotients and products by ``dd_div``'s, ``dd_mul``'s and ``dd_add``'s operations
without their branches (``kernels/_rownorm.py``), for every row of the forward and the
rows of the VJP whose ``g`` is finite and below 2^995 (the others keep one running sum and
the branches). Two cancellations are removed algebraically, using ``sum_j y_j = 1``:

* ``g_m - <g, y>`` at the argmax (where ``y_m`` may round to 1) is computed as
  ``c = (sum_{j != m} e_j (g_m - g_j)) / s``, and for ``i != m``,
  ``g_i - <g, y> = (g_i - g_m) + c``, so that ``dx_i = y_i ((g_i - g_m) + c)`` is
  shift-invariant in ``g`` as the exact value is. Example: ``x = (0, -46)``,
  ``g = (1, 0)`` gives ``dx_0 = y_0 y_1 = 1.0530e-20`` (a naive ``y_0 (g_0 - <g, y>)`` in
  float64 gives 0). The sum is divided by ``s`` once, after it is formed: on a constant row
  (every ``e_j = 1``) an exact zero of ``g_i - <g, y>`` then comes out as 0, where dividing
  each term first (``y_j = 1/D`` rounded) left about ``2^-106 max|g|``.
* the Jacobian's diagonal at ``m`` is ``y_m (1 - y_m)`` with ``1 - y_m`` formed as
  ``sum_{j != m} y_j``; for ``i != m``, ``y_i <= 1/2`` and ``1 - y_i`` does not cancel.

If ``max|g| >= 2^1020`` (float64 only) g is scaled by 1/8 (exactly) and the result back,
so ``g_i - g_m`` cannot overflow. float32 and float16 ("mixed", the default) inputs are
computed in float64 this way and rounded once.

Fast path (float32, float16 and bfloat16 input, mixed mode). The double-double path costs a
libm ``exp`` call per entry, which does not vectorize, and some hundred operations. For
float32 input (and float16 and bfloat16, widened exactly to float32) each row is first
evaluated in plain float64 by branch-free loops that LLVM vectorizes
(``kernels/_vmath.exp_bounded``; no libm call, no fast-math flag), carrying a rigorous bound
``e`` on the absolute error of every value ``v`` (running error analysis, the rules of
``kernels/_vmath.py``); the output is ``float32(v)`` only where ``v -+ (2e + U|v|)`` round
to the same float32 bits (``_vmath.decided_float32``; for ``y >= 0`` the lower end is cut at
+0, so a ``y`` below the float32 range is decided as +0), or for float16 (bfloat16) input to
the same half (bfloat16) bits (``_f16.float64_to_half_bits``,
``_bf16.float64_to_bfloat16_bits``, which round from float64 directly). float16 rows are
read as their bits and widened a row at a time, and their results stored as half bits. Every
real within ``e`` of ``v`` then rounds to that value, the exact one included: the output is
correctly rounded. The undecided entries are taken from the double-double path: every entry
of a row that holds a NaN or an inf of either sign (masked rows included), the exact zeros
of ``dx`` (their interval holds -0 and +0), and the rare entries within their bound of a
float32 midpoint. So the result is the double-double path's, bit for bit, except where that
path (which rounds a float64 once more) is not correctly rounded. Rows longer than 2^20,
float64 input (whose correct rounding would need more than float64) and ``strict_fp16=True``
keep their paths.

Error analysis of the fast path, row by row (u = 2^-53, U = 2u, TINY = 2^-1022; ``A = 2^-1022``
is exp_bounded's absolute error below the normal range). The bounds are evaluated in
float64 from nonnegative terms; their own rounding (a few dozen ulps of the bound) and the
first-order ``1 + O(D u)`` factors dropped below are covered by the factor 2 that
``decided_float32`` applies to ``e``.

* Scan: the maximum, its first index ``m`` and any NaN or inf, from the float32 bits as
  integers (exact; integer max and or reductions vectorize without any flag).
* Shift: ``t_j = fl(x_j - x_m)`` with its exact error ``tau_j`` (TwoSum).
  ``T = max |tau_j|`` over ``t_j >= EXP_LOW``; 0 for the usual rows, whose float32
  differences are exact in float64.
* ``E_j = exp_bounded(t_j)`` is within ``rho E_j + A`` of ``exp(x_j - x_m)``, where
  ``rho = EXP_REL_ERROR + 1.002 T``: ``EXP_REL_ERROR = 2^-50`` is proven in
  ``proofs/vmath.py``, ``1.002 T >= e^T - 1``. For
  ``t_j < EXP_LOW``, ``E_j = 0`` and the exact exponential is below 2^-1075 (its argument is
  below ``EXP_LOW (1 - u)``).
* ``s = sum_j E_j`` in a fixed order (no reassociation): 64 lanes, lane k adding entries
  k, k + 64, ... from 0, then the lanes pairwise. Each term goes through at most
  ``d = ceil(D/64) + 5`` roundings, so the forward's plain lanes give
  ``|s - sum_j E_j| <= d u sum_j E_j`` (to first order) and ``es = (d U + rho) s + D A``.
  The VJP's pass makes every addition a TwoSum whose exact error is summed alongside and
  added at the end; with ``d2 = ceil(D/64) + 12`` additions per error term,
  ``|s - sum_j E_j| <= u s + d d2 u^2 sum_j E_j``, so ``es = (U + (d2 U)^2 + rho) s + D A``.
  The forward's ``y_j`` see only the relative error of ``s``. At D = 1024 the plain
  lanes' ``21 u`` leaves a few more entries undecided (four draws of N(0, 1) rows: 5
  against 3 in 4 x 4096 x 1024 entries; at D = 4096, 7 against 1 in 4 x 256 x 4096), and
  the exponentials' pass takes 0.6 of the time it takes with TwoSum lanes (one core,
  4096 x 1024: 7.3 against 11.8 ms). The VJP keeps the compensated sum, whose smaller
  error also narrows the bound of ``dx`` where ``g_i`` nearly cancels ``<g, y>``
  (measured: the plain sum there left 3.5 times as many entries undecided). (The bound of
  a sum in any order, ``(D - 1) u s``, would be 2^-43 s at D = 1024, fifty times the plain
  lanes': fast-math reassociation would cost far more fallbacks than it saves.)
* ``inv = fl(1 / s)`` with ``einv = inv es / (s - es) + U inv + TINY`` (quotient rule;
  ``s >= 1``), ``y_j = fl(E_j inv)`` with
  ``ey_j = E_j (einv + rho inv + rho einv) + U y_j + (inv + einv) A + TINY`` (product rule):
  for the usual rows about ``2^-47 y_j`` in the forward at D = 1024, ``2^-48.5 y_j`` in the
  VJP.
* VJP, in the form of the double-double path, summed in the exponentials' pass:
  ``q_j = fl(E_j fl(g_m - g_j))`` (0 at ``j = m``), ``C = sum_j q_j`` by the compensated
  lanes and ``B = sum_j |q_j|`` by plain ones (``B' = (1 + d U) B`` covers its rounding).
  By the product rule for each ``q_j`` (the difference errs by ``U |g_m - g_j|``, and
  ``|g_m - g_j| < 2^129`` for float32 and float16 g), ``C`` is within
  ``eC = U |C| + (d2 U)^2 B' + (2U + rho)(B' + D TINY) + D (2^129 A + TINY)`` of
  ``sum_j exp(x_j - x_m)(g_m - g_j)``; ``c = fl(C inv)`` (product rule) is
  ``sum_{j != m} y_j (g_m - g_j)`` within ``ec``, and
  ``dx_i = fl(y_i fl(fl(g_i - g_m) + c))`` by the sum and product rules. The cancellation
  in ``g_i - <g, y>`` is not hidden: the bound of ``(g_i - g_m) + c`` is absolute, about
  ``2^-49 sum_j y_j |g_m - g_j| + 2^-51 |g_i - g_m|``, so an entry whose ``g_i`` nearly
  cancels ``<g, y>`` is undecided and comes from the double-double path.

Measured on rows of N(0, 1) input and gradient (four draws, seeds 0-3 of NumPy's
``default_rng``): 5 undecided entries of the forward and 27 of the VJP in 4 x 4096 x 1024,
7 and 12 in 4 x 256 x 4096.

``strict_fp16=True`` (float16 or bfloat16 input) runs the same algorithm in the input's
format, each difference, ``exp``, partial sum (sequential, left to right), quotient and
product rounded to it (``kernels/_strict.narrow``). Where float16 breaks (measured, see
``tests/kernels/test_softmax.py``): the partial sums of ``s`` stop growing at 2048, where the
spacing of halves is 2 and ``2048 + 1`` rounds back to 2048, so a constant row of
``D > 2048`` gives ``y = 1/2048`` instead of ``1/D`` (D = 4096: every y_i twice too large);
``s`` never overflows, it stalls first. The shifted exponents lose accuracy with the spread
(``x_j - x_m`` is rounded to 11 bits, so ``e_j`` is off by up to ``|x_j - x_m| 2^-11``
relative), values below ``2^-24`` flush to 0, and in the backward pass ``g_i - g_m``
overflows to inf for ``g = (65504, -65504)`` (mixed mode: finite). Without the max shift
(not done here), ``exp`` would overflow to inf past ``x = 11.09``. bfloat16's 8 bits
stall the sum at 256 (``256 + 1`` rounds back to 256), so a constant row of ``D > 256``
gives ``y = 1/256``.

Conventions (``-inf`` masks, PyTorch's ``masked_fill(-inf)`` idiom):

* an entry equal to ``-inf`` gets ``y = 0`` and ``dx = 0`` (for finite g) and zero rows and
  columns in the Jacobian;
* a FULLY masked row (all ``-inf``) is defined as ``y = 0``, ``dx = 0`` (g is not read) and
  Jacobian 0 -- not PyTorch's NaN: a fully masked query attends to nothing;
* a NaN anywhere in a row makes that row's ``y``, ``dx`` and Jacobian NaN;
* ``+inf`` anywhere in a row makes that row NaN too (the shift is ``inf - inf``; the limit
  is not taken);
* non-finite ``g`` propagates through the formula per IEEE: an inf in ``g`` gives inf or
  NaN entries in its row of ``dx`` (``g = (1, inf)`` at ``x = (0, 0)``: ``(-inf, NaN)``),
  and at a masked entry ``0 * inf = NaN`` reaches the whole row through ``c``.

D = 1: ``y = 1`` (0 if masked), ``dx = 0``, ``J = [[0]]``.

The Jacobian is symmetric positive semi-definite (``v^T J v`` is the variance of v under
the weights y) with eigenvalues in ``[0, 1/2]`` (Gershgorin: row i's disc lies in
``[0, 2 y_i (1 - y_i)]``), so the 2-norm Lipschitz constant is at most 1/2, approached as
``y -> (1/2, 1/2, 0, ...)``: Table 2's "<= 1" holds, loosely.

>>> import numpy as np
>>> from kernels import softmax
>>> softmax.forward(np.array([[0.0, 0.0], [0.0, -np.inf]]))
array([[0.5, 0.5],
       [1. , 0. ]])
>>> dx = softmax.vjp(np.array([0.0, -46.0]), np.array([1.0, 0.0]))
>>> f"{dx[0]:.10e}"
'1.0530617358e-20'
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange, types
from numba.extending import overload
from numpy.typing import ArrayLike

from kernels._bf16 import (
    BFLOAT16,
    bfloat16_bits_to_float64,
    float64_to_bfloat16_bits,
    round_to_bfloat16,
)
from kernels._dd import dd_add, dd_div, dd_exp, dd_mul, dd_sub, two_sum
from kernels._f16 import (
    float64_to_half_bits,
    reinterpret,
)
from kernels._rownorm import (
    dd_add_select,
    dd_div_select,
    dd_mul_select,
    read_row,
    row_buffer,
    two_sum_select,
)
from kernels._strict import bfloat16_kernel, is_bfloat16, narrow
from kernels._threads import thread_safe
from kernels._validate import float_array, strict_mode
from kernels._vmath import (
    EXP_ABS_ERROR,
    EXP_LOW,
    EXP_REL_ERROR,
    TINY,
    U,
    decided_float32,
    exp_bounded,
)
from kernels.cast import widen

__all__ = ["forward", "jacobian", "vjp"]

#: Row kinds found by the scan.
_FINITE_MAX, _NAN_ROW, _MASKED_ROW = 0, 1, 2

#: Above this max|g| (float64) g is scaled by G_SCALE so that g_i - g_m cannot overflow.
_G_SCALE_LIMIT = 2.0**1020
_G_SCALE = 0.125
#: Below this max|g| (and with g finite) the float64 VJP runs branch-free: ``|g_i - g_m|``
#: and ``|g_i - <g, y>|`` stay below ``kernels._dd``'s splitting limit 2^996.
_G_VECTOR_LIMIT = 2.0**995


# --- one row ------------------------------------------------------------------------------


@njit(cache=True)
def _scan(row):
    """``(kind, m)``: the row's kind and the first index ``m`` of its maximum."""
    m = 0
    best = row[0]
    for j in range(row.size):
        v = row[j]
        if math.isnan(v) or v == math.inf:
            return _NAN_ROW, 0
        if v > best:
            best = v
            m = j
    if best == -math.inf:
        return _MASKED_ROW, 0
    return _FINITE_MAX, m


@njit(cache=True)
def _special_row(row, out):
    """``(m, done)``: a row with a NaN or +inf fills ``out`` (its outputs: a row, or a
    Jacobian block) with NaN, a fully masked row fills it with 0, and is done; otherwise
    ``m`` is the first index of the row's maximum and ``out`` is left to the caller."""
    kind, m = _scan(row)
    if kind == _NAN_ROW:
        out[:] = math.nan
        return m, True
    if kind == _MASKED_ROW:
        out[:] = 0.0
        return m, True
    return m, False


@njit(cache=True, error_model="numpy")
def _exponentials_dd(row, m, eh, el):
    """``e_j = exp(x_j - x_m)`` into the double-double pairs ``(eh, el)`` (a libm call each,
    in a loop of its own); returns their sum ``s``, a pair: 64 lanes, lane k adding the
    ``eh_j`` of ``j = k, k + 64, ...`` by TwoSum, the ``el_j`` and the TwoSum errors
    alongside, then the lanes pairwise (:func:`_combine_dd`). Every ``e_j`` is in [0, 1],
    so nothing overflows, and the loop vectorizes where one running double-double sum
    (``dd_add``, a chain of some twenty dependent operations per entry) did not."""
    top = row[m]
    size = row.size
    for j in range(size):
        th, tl = two_sum(row[j], -top)  # exact (or -inf): the spread costs nothing
        eh[j], el[j] = dd_exp(th, tl)
    acc, comp = np.zeros(_LANES), np.zeros(_LANES)
    full = size - size % _LANES
    for b in range(0, full, _LANES):
        for k in range(_LANES):
            _add_compensated(acc, comp, k, eh[b + k])
            comp[k] += el[b + k]
    for j in range(full, size):
        _add_compensated(acc, comp, j - full, eh[j])
        comp[j - full] += el[j]
    return _combine_dd(acc, comp)


@njit(cache=True, error_model="numpy")
def _weights(row, m, yh, yl):
    """``y_j = exp(x_j - x_m) / s`` into the double-double pairs ``(yh, yl)`` (``dd_div``'s
    operations, branch-free: the loop vectorizes)."""
    sh, sl = _exponentials_dd(row, m, yh, yl)
    for j in range(row.size):
        yh[j], yl[j] = dd_div_select(yh[j], yl[j], sh, sl)


@njit(cache=True)
def _weights_strict(row, m, y, bf):
    """The same in half precision (bfloat16 if ``bf``): every operation rounded, the sum
    left to right."""
    top = row[m]
    s = 0.0
    for j in range(row.size):
        e = narrow(math.exp(narrow(row[j] - top, bf)), bf)
        y[j] = e
        s = narrow(s + e, bf)
    for j in range(row.size):
        y[j] = narrow(y[j] / s, bf)


@njit(cache=True, error_model="numpy")
def _vjp_row(row, g, m, eh, el, sh, sl, dx):
    """``dx_i = y_i ((g_i - g_m) + c)``, ``c = (sum_{j != m} e_j (g_m - g_j)) / s``, from the
    exponentials ``e`` and their sum ``s``: the sum is divided once, after it is formed, so
    that where the terms are exact (``e_j = 1`` at every ``x_j = x_m``: a constant row) an
    exact zero of ``g_i - <g, y>`` comes out as 0, not as the rounding of ``1/s`` times the
    size of ``g`` (dividing each term, ``y_j = e_j / s``, left ``2^-106 |g|`` there). Rows
    whose ``g`` is finite and below :data:`_G_VECTOR_LIMIT` take branch-free loops, which
    vectorize: the sum in lanes, as in :func:`_exponentials_dd`, and ``dd_div``,
    ``dd_mul`` and ``dd_add``'s operations without their branches
    (``kernels._rownorm.dd_div_select``, ...); the others :func:`_vjp_row_general`."""
    size = row.size
    small = 0
    for j in range(size):
        small += abs(g[j]) < _G_VECTOR_LIMIT  # False for NaN and inf
    if small < size:
        _vjp_row_general(row, g, m, eh, el, sh, sl, dx)
        return
    gm = g[m]
    acc, comp = np.zeros(_LANES), np.zeros(_LANES)
    full = size - size % _LANES
    for b in range(0, full, _LANES):
        for k in range(_LANES):
            ph, pl = _weighted_difference(eh, el, g, gm, b + k)
            _add_compensated(acc, comp, k, ph)
            comp[k] += pl
    for j in range(full, size):
        ph, pl = _weighted_difference(eh, el, g, gm, j)
        _add_compensated(acc, comp, j - full, ph)
        comp[j - full] += pl
    ch, cl = _combine_dd(acc, comp)
    ch, cl = dd_div(ch, cl, sh, sl)
    for i in range(size):
        yh, yl = dd_div_select(eh[i], el[i], sh, sl)
        dh, dl = two_sum_select(g[i], -gm)
        dh, dl = dd_add_select(dh, dl, ch, cl)
        if i == m:
            dh, dl = ch, cl
        dx[i] = dd_mul_select(yh, yl, dh, dl)[0]


@njit(cache=True, inline="always", error_model="numpy")
def _weighted_difference(eh, el, g, gm, j):
    """``e_j (g_m - g_j)`` as a pair (0 at ``j = m``), for finite ``|g| < 2^995``."""
    dh, dl = two_sum_select(gm, -g[j])
    return dd_mul_select(eh[j], el[j], dh, dl)


@njit(cache=True)
def _vjp_row_general(row, g, m, eh, el, sh, sl, dx):
    """:func:`_vjp_row` for any ``g`` (NaN, inf, magnitudes up to the float64 maximum):
    one running double-double sum, ``g`` scaled by :data:`_G_SCALE` past
    :data:`_G_SCALE_LIMIT`, every ``e_j`` divided by ``s``."""
    gmax = 0.0
    for j in range(row.size):
        gmax = max(gmax, abs(g[j]))
    scale = _G_SCALE if gmax >= _G_SCALE_LIMIT else 1.0
    gm = g[m] * scale
    ch, cl = 0.0, 0.0
    for j in range(row.size):
        if j != m:
            dh, dl = two_sum(gm, -(g[j] * scale))
            ph, pl = dd_mul(eh[j], el[j], dh, dl)
            ch, cl = dd_add(ch, cl, ph, pl)
    ch, cl = dd_div(ch, cl, sh, sl)
    for j in range(row.size):
        eh[j], el[j] = dd_div(eh[j], el[j], sh, sl)
    for i in range(row.size):
        if i == m:
            dh, dl = ch, cl
        else:
            dh, dl = two_sum(g[i] * scale, -gm)
            dh, dl = dd_add(dh, dl, ch, cl)
        ph, pl = dd_mul(eh[i], el[i], dh, dl)
        dx[i] = ph / scale


@njit(cache=True)
def _vjp_row_strict(g, m, y, dx, bf):
    gm = g[m]
    c = 0.0
    for j in range(y.size):
        if j != m:
            c = narrow(c + narrow(y[j] * narrow(gm - g[j], bf), bf), bf)
    for i in range(y.size):
        d = c if i == m else narrow(narrow(g[i] - gm, bf) + c, bf)
        dx[i] = narrow(y[i] * d, bf)


# --- all rows -------------------------------------------------------------------------------


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _forward_rows(rows, out):
    n, size = rows.shape
    for r in prange(n):
        m, done = _special_row(rows[r], out[r])
        if not done:
            yh, yl = np.empty(size), np.empty(size)
            _weights(rows[r], m, yh, yl)
            out[r, :] = yh


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _forward_rows_strict(rows, out, bf):
    for r in prange(rows.shape[0]):
        m, done = _special_row(rows[r], out[r])
        if not done:
            _weights_strict(rows[r], m, out[r], bf)


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _vjp_rows(rows, grows, out):
    n, size = rows.shape
    for r in prange(n):
        m, done = _special_row(rows[r], out[r])
        if not done:
            eh, el = np.empty(size), np.empty(size)
            sh, sl = _exponentials_dd(rows[r], m, eh, el)
            _vjp_row(rows[r], grows[r], m, eh, el, sh, sl, out[r])


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _vjp_rows_strict(rows, grows, out, bf):
    n, size = rows.shape
    for r in prange(n):
        m, done = _special_row(rows[r], out[r])
        if not done:
            y = np.empty(size)
            _weights_strict(rows[r], m, y, bf)
            _vjp_row_strict(grows[r], m, y, out[r], bf)


@njit(cache=True, error_model="numpy")
def _jacobian_row(row, out):
    """``diag(y) - y y^T``; the diagonal at m as ``y_m sum_{j != m} y_j``."""
    size = row.size
    m, done = _special_row(row, out)
    if done:
        return
    yh, yl = np.empty(size), np.empty(size)
    _weights(row, m, yh, yl)
    rh, rl = 0.0, 0.0  # 1 - y_m
    for j in range(size):
        if j != m:
            rh, rl = dd_add(rh, rl, yh[j], yl[j])
    for i in range(size):
        for k in range(size):
            if i != k:
                out[i, k] = 0.0 - dd_mul(yh[i], yl[i], yh[k], yl[k])[0]
            elif i == m:
                out[i, i] = dd_mul(yh[i], yl[i], rh, rl)[0]
            else:
                qh, ql = dd_sub(1.0, 0.0, yh[i], yl[i])
                out[i, i] = dd_mul(yh[i], yl[i], qh, ql)[0]


@njit(cache=True, error_model="numpy")
def _jacobian_row_strict(row, out, bf):
    size = row.size
    m, done = _special_row(row, out)
    if done:
        return
    y = np.empty(size)
    _weights_strict(row, m, y, bf)
    rest = 0.0
    for j in range(size):
        if j != m:
            rest = narrow(rest + y[j], bf)
    for i in range(size):
        for k in range(size):
            if i != k:
                out[i, k] = 0.0 - narrow(y[i] * y[k], bf)
            elif i == m:
                out[i, i] = narrow(y[i] * rest, bf)
            else:
                out[i, i] = narrow(y[i] * narrow(1.0 - y[i], bf), bf)


# --- float32, float16 and bfloat16 (mixed mode): the bounded fast path --------------------

#: The fast path's output formats: float32, half (float16 input) and bfloat16 (bfloat16
#: input in mixed mode); the loops take one as ``fmt``.
_FLOAT32, _HALF, _BFLOAT16 = 0, 1, 2

#: Lanes of the fixed-order row sums (a power of two), and log2 of it.
_LANES, _LANE_LEVELS = 64, 6
#: Longest row the fast path takes (its depth-times-U factors stay below 2^-30).
_FAST_MAX_DIM = 2**20
#: A bound on |g_m - g_j| for float32 and float16 g (|g| < 2^128).
_G_DIFF = 2.0**129
#: float32 bits: the magnitude mask, the exponent field of inf and NaN.
_F32_MAGNITUDE, _F32_SPECIAL = 0x7FFFFFFF, 0x7F800000


@njit(cache=True, error_model="numpy")
def _scan_float32(row):
    """``(special, m)``: whether the row holds a NaN or an inf (either sign), and the first
    index of its maximum; both from the bits, in one vectorizable integer pass."""
    size = row.size
    best = np.int64(-(2**63))  # below every (key << 32) | index
    special = np.int64(0)
    for j in range(size):
        bits = np.int64(reinterpret(row[j], np.int32))
        special |= np.int64((bits & _F32_MAGNITUDE) >= _F32_SPECIAL)
        key = bits ^ ((bits >> 31) & _F32_MAGNITUDE)  # ordered as the floats (-0 < +0)
        best = max(best, (key << 32) | (size - 1 - j))  # ties: the largest size - 1 - j
    return special != 0, size - 1 - (best & 0xFFFFFFFF)


@njit(cache=True, error_model="numpy")
def _sum_depth(size):
    """Roundings a term of a plain lane sum (:func:`_combine`) goes through, at most."""
    return (size + _LANES - 1) // _LANES - 1 + _LANE_LEVELS


@njit(cache=True, error_model="numpy")
def _sum_bounds(size):
    """``(grow, square)``: a sum of error bounds by lanes is multiplied by ``grow`` (its own
    rounding); ``square A`` bounds the second-order error of a compensated lane sum of
    terms of absolute sum ``A`` (``d d2 u^2 <= (d2 U)^2``, ``d2`` >= the additions an
    error term goes through)."""
    d = _sum_depth(size)
    d2 = (size + _LANES - 1) // _LANES + 2 * _LANE_LEVELS
    return 1.0 + d * U, (d2 * U) * (d2 * U)


@njit(cache=True, inline="always", error_model="numpy")
def _add_compensated(acc, comp, k, v):
    """Lane k: ``acc[k] + v`` by TwoSum (Knuth, branch-free), the exact rounding error
    added to ``comp[k]``."""
    a = acc[k]
    t = a + v
    z = t - a
    comp[k] += (a - (t - z)) + (v - z)
    acc[k] = t


@njit(cache=True, error_model="numpy")
def _combine(acc):
    """The lanes added pairwise (``_LANE_LEVELS`` levels)."""
    half = _LANES // 2
    while half:
        for k in range(half):
            acc[k] += acc[k + half]
        half //= 2
    return acc[0]


@njit(cache=True, error_model="numpy")
def _combine_dd(acc, comp):
    """The lanes added pairwise by TwoSum, the errors alongside; ``acc + comp`` at the end,
    as a double-double pair (TwoSum)."""
    half = _LANES // 2
    while half:
        for k in range(half):
            _add_compensated(acc, comp, k, acc[k + half])
            comp[k] += comp[k + half]
        half //= 2
    return two_sum(acc[0], comp[0])


@njit(cache=True, error_model="numpy")
def _combine_compensated(acc, comp):
    """:func:`_combine_dd`'s leading part: ``acc + comp``, rounded."""
    return _combine_dd(acc, comp)[0]


@njit(cache=True, inline="always", error_model="numpy")
def _shifted_exp(x, top):
    """``(E, bits)``: ``E = exp_bounded(fl(x - top))`` and, as int64 bits (ordered as the
    nonnegative floats), the exact error of that shift (TwoSum; 0 below EXP_LOW). The row
    is finite and ``top`` its maximum, so ``fl(x - top) <= 0`` and exp_bounded's own bound
    is finite: it is not read (the bound used is ``rho``, see the module docstring)."""
    a = np.float64(x)
    t = a - top
    z = t - a
    tail = (a - (t - z)) + (-top - z)
    v = exp_bounded(t, 0.0)[0]
    tail = abs(tail) if t >= EXP_LOW else 0.0
    return v, reinterpret(tail, np.int64)


@njit(cache=True, error_model="numpy")
def _exponentials(row, m, ev, acc):
    """``E_j = exp(x_j - x_m)`` into ``ev``, summed by plain lanes in the same pass; returns
    ``(s, es, rho)``: the sum, a bound on its error and the relative error bound of every
    E_j (each E_j is within ``rho E_j + EXP_ABS_ERROR`` of the exact value)."""
    size = row.size
    top = np.float64(row[m])
    acc[:] = 0.0
    far = np.int64(0)
    full = size - size % _LANES
    for b in range(0, full, _LANES):
        for k in range(_LANES):
            v, bits = _shifted_exp(row[b + k], top)
            ev[b + k] = v
            acc[k] += v
            far = max(far, bits)
    for j in range(full, size):
        v, bits = _shifted_exp(row[j], top)
        ev[j] = v
        acc[j - full] += v
        far = max(far, bits)
    s = _combine(acc)
    rho = EXP_REL_ERROR + 1.002 * reinterpret(far, np.float64)
    return s, (_sum_depth(size) * U + rho) * s + size * EXP_ABS_ERROR, rho


@njit(cache=True, error_model="numpy")
def _exponentials_and_gradient(row, grow, m, ev, lanes):
    """:func:`_exponentials` for the VJP, with two more sums in the same pass:
    ``C = sum_j E_j (g_m - g_j)`` (compensated lanes) and ``B = sum_j |E_j (g_m - g_j)|``
    (plain lanes); returns ``(s, es, rho, C, eC)``, ``eC`` a bound on C's error."""
    size = row.size
    top, gm = np.float64(row[m]), np.float64(grow[m])
    lanes[:] = 0.0
    acc, comp, cacc, ccomp, babs = lanes[0], lanes[1], lanes[2], lanes[3], lanes[4]
    far = np.int64(0)
    full = size - size % _LANES
    for b in range(0, full, _LANES):
        for k in range(_LANES):
            v, bits = _shifted_exp(row[b + k], top)
            ev[b + k] = v
            _add_compensated(acc, comp, k, v)
            q = v * (gm - np.float64(grow[b + k]))  # 0 at j = m
            _add_compensated(cacc, ccomp, k, q)
            babs[k] += abs(q)
            far = max(far, bits)
    for j in range(full, size):
        v, bits = _shifted_exp(row[j], top)
        ev[j] = v
        _add_compensated(acc, comp, j - full, v)
        q = v * (gm - np.float64(grow[j]))
        _add_compensated(cacc, ccomp, j - full, q)
        babs[j - full] += abs(q)
        far = max(far, bits)
    s = _combine_compensated(acc, comp)
    big_c = _combine_compensated(cacc, ccomp)
    grow_, square = _sum_bounds(size)
    total = _combine(babs) * grow_  # >= sum_j |q_j|
    rho = EXP_REL_ERROR + 1.002 * reinterpret(far, np.float64)
    es = (U + square + rho) * s + size * EXP_ABS_ERROR
    terms = (2.0 * U + rho) * (total + size * TINY) + size * (EXP_ABS_ERROR * _G_DIFF + TINY)
    return s, es, rho, big_c, U * abs(big_c) + square * total + terms


@njit(cache=True, error_model="numpy")
def _reciprocal(s, es, rho):
    """``(inv, einv, ke, alpha)``: ``inv = fl(1 / s)`` within ``einv`` of ``1 / S`` (the
    quotient rule), and ``y_j = fl(E_j inv)`` within ``ke E_j + U y_j + alpha`` of the
    exact ``y_j`` (the product rule)."""
    inv = 1.0 / s
    einv = inv * es / (s - es) + U * inv + TINY
    return inv, einv, einv + inv * rho + rho * einv, (inv + einv) * EXP_ABS_ERROR + TINY


@njit(cache=True, inline="always", error_model="numpy")
def _interval(v, e, nonnegative):
    """``(low, high, finite)``: the ends of the widened interval ``v -+ (2e + U|v|)`` (the
    lower one cut at +0 for a ``nonnegative`` quantity), and whether its width is finite."""
    w = 2.0 * e + U * abs(v)
    low = v - w
    return (0.0 if nonnegative and not low > 0.0 else low), v + w, w < np.inf


@njit(cache=True, inline="always", error_model="numpy")
def _decided_nonnegative_float32(v, e):
    """:func:`decided_float32` for a quantity known to be >= 0: the same widened interval,
    its lower end cut at +0 (so a y that underflows float32 is decided as +0)."""
    low, high = _interval(v, e, True)[:2]
    low, high = np.float32(low), np.float32(high)
    same = reinterpret(low, np.int32) == reinterpret(high, np.int32)
    return high, same & (low == high)  # when decided, high is float32(v)


#: What a row of half bits holds at an undecided entry: a quiet NaN (a decided entry is
#: never NaN).
_HALF_UNDECIDED = np.uint16(0x7E00)

# The overloads below are left to LLVM to inline: inlined into Numba's IR
# (``inline="always"``), they kept the half decision loop from vectorizing (the forward
# fast path on 4096 float16 rows of 1024, one core: 66-108 ms, against 21 ms).


def _store_decided(out, j, v, e, nonnegative):
    """The same decision for the narrow outputs, stored into ``out[j]``; returns whether it
    decided. Both ends of the widened interval are rounded to the format directly from
    float64 and compared as bits. ``out`` is a row of half bits (``uint16``, float16 input),
    which gets the bits themselves (:data:`_HALF_UNDECIDED` where undecided), or a float32
    row (bfloat16 input, mixed mode), which gets the bfloat16 value (exact in float32; NaN
    where undecided)."""


@overload(_store_decided)
def _store_decided_overload(out, j, v, e, nonnegative):
    if out.dtype == types.uint16:

        def store_half(out, j, v, e, nonnegative):
            low, high, finite = _interval(v, e, nonnegative)
            bits = float64_to_half_bits(high)
            ok = (float64_to_half_bits(low) == bits) & finite
            out[j] = bits if ok else _HALF_UNDECIDED
            return ok

        return store_half

    def store_bfloat16(out, j, v, e, nonnegative):
        low, high, finite = _interval(v, e, nonnegative)
        bits = float64_to_bfloat16_bits(high)
        ok = (float64_to_bfloat16_bits(low) == bits) & finite
        out[j] = np.float32(bfloat16_bits_to_float64(bits)) if ok else np.float32(np.nan)
        return ok

    return store_bfloat16


def _undecided(out, j):
    """Whether ``out[j]`` (a row of :func:`_store_decided`'s, or float32) is undecided."""


@overload(_undecided)
def _undecided_overload(out, j):
    if out.dtype == types.uint16:
        return lambda out, j: (out[j] & 0x7FFF) > 0x7C00
    return lambda out, j: np.isnan(out[j])


def _store_rounded(out, j, v, fmt):
    """``v`` rounded once to the output format, into ``out[j]`` (half bits, or a float32
    holding a float32 or bfloat16 value)."""


@overload(_store_rounded)
def _store_rounded_overload(out, j, v, fmt):
    if out.dtype == types.uint16:

        def store_half(out, j, v, fmt):
            out[j] = float64_to_half_bits(v)

        return store_half

    def store(out, j, v, fmt):
        out[j] = np.float32(round_to_bfloat16(v) if fmt == _BFLOAT16 else v)

    return store


def _mark_undecided(out):
    """Every entry of ``out`` undecided."""


@overload(_mark_undecided)
def _mark_undecided_overload(out):
    if out.dtype == types.uint16:

        def mark_half(out):
            out[:] = _HALF_UNDECIDED

        return mark_half

    def mark(out):
        out[:] = np.nan

    return mark


@njit(cache=True, error_model="numpy")
def _fast_forward_row(row, out, ev, acc, fmt):
    """Decided outputs into ``out`` (float32, holding bfloat16 values for that ``fmt``; or
    the bits of halves, ``uint16``, for :data:`_HALF`), NaN at the undecided ones; returns
    how many."""
    special, m = _scan_float32(row)
    if special:
        _mark_undecided(out)
        return row.size
    inv, _, ke, alpha = _reciprocal(*_exponentials(row, m, ev, acc))
    undecided = 0
    if fmt != _FLOAT32:
        for j in range(row.size):
            y = ev[j] * inv
            undecided += not _store_decided(out, j, y, ev[j] * ke + U * y + alpha, True)
        return undecided
    for j in range(row.size):
        e = ev[j]
        y = e * inv
        v, ok = _decided_nonnegative_float32(y, e * ke + U * y + alpha)
        out[j] = v if ok else np.float32(np.nan)
        undecided += not ok
    return undecided


@njit(cache=True, inline="always", error_model="numpy")
def _gradient_entry(e, gi, gm, inv, ke, alpha, c, ec):
    """``(dx_i, bound)`` from ``E_i``, ``g_i`` and the row's quantities."""
    y = e * inv
    ey = e * ke + U * y + alpha
    q = np.float64(gi) - gm
    d = q + c
    ed = U * abs(q) + ec + U * abs(d) + TINY
    dx = y * d
    return dx, y * ed + abs(d) * ey + ey * ed + U * abs(dx) + TINY


@njit(cache=True, error_model="numpy")
def _fast_vjp_row(row, grow, out, ev, lanes, fmt):
    """The same for ``dx``."""
    special, m = _scan_float32(row)
    if special:
        _mark_undecided(out)
        return row.size
    s, es, rho, big_c, e_big_c = _exponentials_and_gradient(row, grow, m, ev, lanes)
    inv, einv, ke, alpha = _reciprocal(s, es, rho)
    c = big_c * inv  # sum_{j != m} y_j (g_m - g_j)
    ec = abs(big_c) * einv + inv * e_big_c + e_big_c * einv + U * abs(c) + TINY
    gm = np.float64(grow[m])
    undecided = 0
    if fmt != _FLOAT32:
        for i in range(row.size):
            dx, edx = _gradient_entry(ev[i], grow[i], gm, inv, ke, alpha, c, ec)
            undecided += not _store_decided(out, i, dx, edx, False)
        return undecided
    for i in range(row.size):
        dx, edx = _gradient_entry(ev[i], grow[i], gm, inv, ke, alpha, c, ec)
        v, ok = decided_float32(dx, edx)
        out[i] = v if ok else np.float32(np.nan)
        undecided += not ok
    return undecided


@njit(cache=True, error_model="numpy")
def _exact_forward_fill(row32, out, fmt):
    """The double-double path for the NaN entries of ``out`` (the undecided ones)."""
    row = row32.astype(np.float64)
    y = np.empty(row.size)
    m, done = _special_row(row, y)
    if not done:
        yl = np.empty(row.size)
        _weights(row, m, y, yl)
    for j in range(row.size):
        if _undecided(out, j):
            _store_rounded(out, j, y[j], fmt)


@njit(cache=True, error_model="numpy")
def _exact_vjp_fill(row32, grow32, out, fmt):
    row, grow = row32.astype(np.float64), grow32.astype(np.float64)
    dx = np.empty(row.size)
    m, done = _special_row(row, dx)
    if not done:
        eh, el = np.empty(row.size), np.empty(row.size)
        sh, sl = _exponentials_dd(row, m, eh, el)
        _vjp_row(row, grow, m, eh, el, sh, sl, dx)
    for j in range(row.size):
        if _undecided(out, j):
            _store_rounded(out, j, dx[j], fmt)


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _forward_rows_fast(rows, out, fmt):
    """Every row by the fast path: float32 rows into float32 ``out``, or rows of half bits
    (``uint16``, float16 input) widened into a float32 scratch row
    (``kernels._rownorm.read_row``), their results decided and stored as half bits: no
    float32 copy of the whole array, and no second pass to round it."""
    n, size = rows.shape
    for r in prange(n):
        ev, acc = np.empty(size), np.empty(_LANES)
        row = read_row(rows[r], row_buffer(rows))
        if _fast_forward_row(row, out[r], ev, acc, fmt):
            _exact_forward_fill(row, out[r], fmt)


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _vjp_rows_fast(rows, grows, out, fmt):
    """The same for the VJP (x and g rows of one kind)."""
    n, size = rows.shape
    for r in prange(n):
        ev, lanes = np.empty(size), np.empty((5, _LANES))
        row, grow = read_row(rows[r], row_buffer(rows)), read_row(grows[r], row_buffer(grows))
        if _fast_vjp_row(row, grow, out[r], ev, lanes, fmt):
            _exact_vjp_fill(row, grow, out[r], fmt)


# --- public API -----------------------------------------------------------------------------


class _Prepared:
    """Checked ``x`` as rows (D >= 1) and the arithmetic to use: ``fast`` (float32,
    float16 and bfloat16 in mixed mode) gets float32 rows (float16 ones as their bits),
    every other case float64 rows; ``fmt`` is the fast path's output format."""

    def __init__(self, x: ArrayLike, strict_fp16: object, exact: bool = False):
        x = float_array(x, "x", bfloat16=True)
        if x.ndim == 0:
            raise ValueError("x: expected shape (..., D), got a 0-d array")
        if x.shape[-1] == 0:
            raise ValueError("x: softmax needs D >= 1 on the last axis, got D = 0")
        self.x, self.strict = x, strict_mode(strict_fp16, x.dtype)
        self.bf = is_bfloat16(x)
        self.fast = (
            not exact
            and not self.strict
            and (x.dtype in (np.float32, np.float16) or self.bf)
            and x.shape[-1] <= _FAST_MAX_DIM
        )
        if self.bf and not self.strict and not self.fast:
            raise TypeError(
                "x: bfloat16 reaches this path in strict mode or on the fast path only "
                "(bfloat16_kernel)"
            )
        self.half = self.fast and x.dtype == np.float16
        self.fmt = _HALF if self.half else _BFLOAT16 if self.fast and self.bf else _FLOAT32
        self.rows = self._rows(x)

    def _rows(self, a: np.ndarray) -> np.ndarray:
        """``a`` (x or g) as contiguous rows: the bits of halves on the float16 fast path
        (the loops widen each row as they read it), float32 on the float32 and bfloat16
        ones, else float64 (widened exactly)."""
        if self.half:
            return np.ascontiguousarray(a).reshape(-1, a.shape[-1]).view(np.uint16)
        return widen(a, np.float32 if self.fast else np.float64).reshape(-1, a.shape[-1])

    def gradient(self, g: ArrayLike) -> np.ndarray:
        """Checked ``g`` as rows of the same kind."""
        g = float_array(g, "g", bfloat16=True)
        if g.shape != self.x.shape:
            raise ValueError(f"g: expected shape {self.x.shape} (the shape of x), got {g.shape}")
        if g.dtype != self.x.dtype:
            raise TypeError(f"g: expected dtype {self.x.dtype} (the dtype of x), got {g.dtype}")
        return self._rows(g)

    def finish(self, values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """Round once to x's dtype (exact in strict mode and on the bfloat16 fast path, whose
        float32 results are bfloat16 values; the float16 fast path's results are half bits
        already)."""
        if self.half:
            return values.view(np.float16).reshape(shape)
        if self.fmt == _BFLOAT16:
            return values.astype(BFLOAT16).reshape(shape)
        with np.errstate(over="ignore"):
            return values.astype(self.x.dtype, copy=False).reshape(shape)


def _forward(p: _Prepared) -> np.ndarray:
    out = np.empty(p.rows.shape, p.rows.dtype)
    if p.fast:
        _forward_rows_fast(p.rows, out, p.fmt)
    else:
        if p.strict:
            _forward_rows_strict(p.rows, out, p.bf)
        else:
            _forward_rows(p.rows, out)
    return p.finish(out, p.x.shape)


def _vjp(p: _Prepared, g: ArrayLike) -> np.ndarray:
    grows = p.gradient(g)
    out = np.empty(p.rows.shape, p.rows.dtype)
    if p.fast:
        _vjp_rows_fast(p.rows, grows, out, p.fmt)
    else:
        if p.strict:
            _vjp_rows_strict(p.rows, grows, out, p.bf)
        else:
            _vjp_rows(p.rows, grows, out)
    return p.finish(out, p.x.shape)


def _bfloat16_native(x: np.ndarray) -> bool:
    """Whether softmax computes a bfloat16 ``x`` in mixed mode itself, on the fast path:
    rows of 1 to 2^20 entries. Other bfloat16 input in mixed mode is widened to float64 by
    ``bfloat16_kernel``."""
    return x.ndim >= 1 and 1 <= x.shape[-1] <= _FAST_MAX_DIM


@bfloat16_kernel(native=_bfloat16_native)
def forward(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """Softmax of each row (last axis) of ``x``; same shape and dtype as ``x``."""
    return _forward(_Prepared(x, strict_fp16))


@bfloat16_kernel(native=_bfloat16_native)
def vjp(x: ArrayLike, g: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``dx_i = y_i (g_i - <g, y>)`` per row, for ``g`` of the shape and dtype of ``x``."""
    return _vjp(_Prepared(x, strict_fp16), g)


def _forward_exact(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """:func:`forward` by the double-double path alone (what the fast path falls back to)."""
    return _forward(_Prepared(x, strict_fp16, exact=True))


def _vjp_exact(x: ArrayLike, g: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """:func:`vjp` by the double-double path alone."""
    return _vjp(_Prepared(x, strict_fp16, exact=True), g)


@bfloat16_kernel
def jacobian(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``diag(y) - y y^T`` for one sample ``x`` of shape (D,): (D, D), numerator layout."""
    p = _Prepared(x, strict_fp16, exact=True)
    if p.x.ndim != 1:
        raise ValueError(f"x: expected one sample of shape (D,), got shape {p.x.shape}")
    size = p.x.shape[0]
    out = np.empty((size, size))
    if p.strict:
        _jacobian_row_strict(p.rows[0], out, p.bf)
    else:
        _jacobian_row(p.rows[0], out)
    return p.finish(out, (size, size))
