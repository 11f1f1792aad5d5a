"""High-precision mpmath references for LayerNorm, RMSNorm, CenterNorm and WeightNorm.

Each module is written here straight from its definition, step by step, sharing no code
with the kernels (``kernels/``) and no closed-form derivative:

* the forward evaluates the steps of the definition in order
  (mean -> deviations -> variance or mean square -> 1/sqrt -> normalized -> affine);
* the VJP is reverse-mode differentiation of those same steps, written out by hand: the
  adjoint of every intermediate is accumulated from the adjoints of the steps that use it,
  last step first. No closed-form VJP (e.g. LayerNorm's "two reductions" formula) is used;
* the Jacobian is forward-mode differentiation: the unit vectors ``e_j`` are pushed through
  the same steps, and the tangent of the output is column ``j`` (numerator layout,
  ``J[i][j] = dy_i/dx_j``).

Definitions (PyTorch eps convention; rows are samples, the last axis has length ``D``)
------------------------------------------------------------------------------------
Source: ``shared/seeds/001_76ce3a8a4b6079c3.txt``, Table 2, rows LayerNorm, RMSNorm,
CenterNorm and WeightNorm. The paper adds its eps to a squared norm, PyTorch (and this
module) to a mean of squares, so ``eps_paper = D * eps`` for LayerNorm and RMSNorm; for
WeightNorm both add it to ``|v_i|^2``.

* LayerNorm (Ba et al.): ``mu = mean(x)``, ``d = x - mu``, ``var = mean(d^2)`` (biased,
  1/D), ``y = gamma * d / sqrt(var + eps) + beta``.
* RMSNorm (Zhang & Sennrich): ``ms = mean(x^2)``, ``y = gamma * x / sqrt(ms + eps) + beta``;
  ``beta`` may be None (no shift; its gradient is then None).
* CenterNorm (Qi et al.): ``y = D/(D-1) * gamma * (x - mean(x)) + beta``; needs ``D >= 2``
  (:class:`ValueError` for ``D = 1``).
* WeightNorm (Salimans & Kingma): ``v`` has shape ``(O, D)``, ``gamma`` shape ``(O,)``;
  ``W_i = gamma_i v_i / sqrt(|v_i|^2 + eps)``, ``y = x W^T`` of shape ``(N, O)``. Its
  Jacobian with respect to ``x`` is ``W``.

Inputs and outputs
------------------
Arrays may be NumPy arrays of any real floating dtype (or integer dtype), nested lists, or
Python floats; each element is converted exactly (:func:`derive.reference.core.exact`;
a wider long double goes through its integer ratio), so the binary value is the input.
Elements that are already ``mpf`` are used as they are, which lets
:func:`directional_derivative` evaluate the forwards at points no float can represent.
``eps`` is likewise taken exactly; it must be finite and >= 0. All arithmetic happens
inside ``mpmath.workdps(dps)`` (``dps >= 20``); mpmath's global precision is never changed.
Results are nested Python lists of ``mpf`` (rows of the output: a 1-D ``x`` gives one row),
to be rounded by the caller. Gradients of parameters are summed over the rows.

Zero variance. If ``var + eps`` (``ms + eps``, ``|v_i|^2 + eps``) is exactly 0 -- a
constant row (an all-zero row, a zero ``v_i``) with ``eps = 0`` -- the exact result is
undefined (0/0), and every entry that depends on it is ``mpmath.nan``: for LayerNorm and
RMSNorm the row of ``y`` and of ``dx`` and all of ``dgamma`` (``dbeta`` stays the sum of
``g``); for WeightNorm column ``i`` of ``y``, all of ``dx``, row ``i`` of ``dv`` and
``dgamma_i``. With ``eps > 0`` a constant LayerNorm row gives ``y = beta`` exactly (and
``dx = 0`` exactly when ``D = 1``).

Why 50 digits are plenty
------------------------
The one catastrophic cancellation of the definitions is ``d = x - mean(x)`` on a nearly
constant row (inputs up to 65504 with deviations of 2^-24 relative, ``D`` up to 8192: a
naive sum at ``p`` bits would lose up to ``24 + log2(8192) = 37`` bits there). Here it never
happens at the working precision: the inputs are dyadic rationals, so the row sum is formed
exactly in integer arithmetic and each ``d_i = (D x_i - sum(x)) / D`` is rounded at most twice,
relative to itself. What follows in the forward -- sums of non-negative terms (``var``,
``ms``, ``|v_i|^2``; mpmath's ``fsum`` adds exactly and rounds once), products, quotients,
square roots -- has no cancellation, so every ``y_i`` is correct to a few units of
``2^-p`` relative to ``|gamma_i xhat_i| + |beta_i|`` (``p = 169`` bits at 50 digits; for
WeightNorm's signed dot product ``x W_i``, relative to ``sum_k |x_k W_ik|``), and
the 40-digit invariants (``mean(y) = 0``, ``mean(y^2) = var/(var + eps)``) hold with about
10 digits to spare. The reverse and tangent sweeps add signed terms
(``sum_i d_i * adjoint_i``, ``-sum_i bar_d_i``); their error is at most about
``D * 2^-p`` times the sum of the absolute values of the terms, which for ``D <= 8192``
still leaves about 46 digits relative to that scale -- more than 25 digits beyond what any
float64 comparison can resolve.

>>> import numpy as np
>>> y = layernorm_forward(np.array([1.0, 2.0, 3.0]), np.ones(3), np.zeros(3), 0.0)
>>> [mpmath.nstr(value, 20) for value in y[0]]
['-1.2247448713915890491', '0.0', '1.2247448713915890491']
>>> weightnorm_jacobian(np.array([1.0, 1.0]), np.array([[3.0, 4.0]]), np.array([10.0]), 0.0)
[[mpf('6.0'), mpf('8.0')]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import mpmath
import numpy as np
import numpy.typing as npt

from derive.reference.core import (
    check_dps,
    exact,
    exact_array,
    exact_scalar,
    exact_vector,
    real_array,
)

__all__ = [
    "DEFAULT_DPS",
    "FD_DEFAULT_DPS",
    "MIN_DPS",
    "centernorm_forward",
    "centernorm_jacobian",
    "centernorm_vjp",
    "deviations",
    "directional_derivative",
    "layernorm_forward",
    "layernorm_jacobian",
    "layernorm_vjp",
    "nonnegative",
    "rmsnorm_forward",
    "rmsnorm_jacobian",
    "rmsnorm_vjp",
    "unit",
    "weightnorm_forward",
    "weightnorm_jacobian",
    "weightnorm_vjp",
]

#: Significant digits of the references unless asked otherwise (SPEC, "Tests": >= 50).
DEFAULT_DPS = 50

#: The lowest precision accepted (lower than the SPEC's 50 so the tests can check that no
#: precision leaks at a low one): 20 digits are 70 bits, more than the significand of every
#: input (float64's 53, the x86 long double's 64), so the first rounding of every step is
#: still below the inputs' own resolution. The Linear and 50-digit references keep theirs.
MIN_DPS = 20

#: The default target digits of :func:`directional_derivative`.
FD_DEFAULT_DPS = 60

Row = list[mpmath.mpf]
Rows = list[Row]


# --------------------------------------------------------------------------------------
# Exact conversion of the inputs
# --------------------------------------------------------------------------------------


def _rows(value: npt.ArrayLike, name: str) -> Rows:
    """A 1-D (one sample) or 2-D (rows of samples) array as rows of exact mpf values."""
    array = real_array(value, name)
    if array.ndim == 1:
        array = array[np.newaxis, :]
    if array.ndim != 2:
        raise ValueError(f"{name}: expected shape (D,) or (N, D), got {array.shape}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{name}: expected at least one row and D >= 1, got {array.shape}")
    return exact_array(array, name).tolist()


def _matrix(value: npt.ArrayLike, name: str, columns: int | None = None) -> Rows:
    array = real_array(value, name)
    if (
        array.ndim != 2
        or array.shape[0] == 0
        or (columns is not None and array.shape[1] != columns)
    ):
        expected = f"(O, {columns})" if columns is not None else "(O, D)"
        raise ValueError(f"{name}: expected shape {expected} with O >= 1, got {array.shape}")
    return _rows(array, name)


def _like(g: npt.ArrayLike, x: npt.ArrayLike, columns: int, name: str = "g") -> Rows:
    """The upstream gradient, which must have the shape of the output."""
    shape = (*np.shape(x)[:-1], columns)
    if np.shape(g) != shape:
        raise ValueError(f"{name}: expected the output's shape {shape}, got {np.shape(g)}")
    return _rows(g, name)


def nonnegative(value: float, name: str = "eps") -> mpmath.mpf:
    """A scalar argument taken exactly, which must be finite and >= 0 (``eps``)."""
    number = exact_scalar(value, name)
    if not mpmath.isfinite(number) or number < 0:
        raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
    return number


def _one_sample(x: npt.ArrayLike, name: str = "x") -> Row:
    rows = _rows(x, name)
    if len(rows) != 1:
        raise ValueError(f"{name}: the Jacobian is of one sample, shape (D,); got {np.shape(x)}")
    return rows[0]


# --------------------------------------------------------------------------------------
# Steps shared by several definitions (plain arithmetic on mpf, no kernel code)
# --------------------------------------------------------------------------------------


def deviations(row: Row) -> Row:
    """``d_i = x_i - mean(x)``, from the exact row sum: each ``d_i`` rounded at most twice.

    Finite mpf values are dyadic rationals ``m 2^e``; on a common exponent their sum is an
    integer, so ``D x_i - sum(x)`` is exact and only the division by ``D`` (and the
    conversion of a numerator wider than the precision) rounds. A row holding inf or NaN
    takes the plain route, so non-finite values propagate as mpmath's arithmetic says.
    """
    n = len(row)
    if not all(mpmath.isfinite(value) for value in row):
        mean = mpmath.fsum(row) / n
        return [value - mean for value in row]
    parts = []
    for value in row:
        mantissa, exponent = value.man_exp
        parts.append((-mantissa if value < 0 else mantissa, exponent))
    exponents = [exponent for mantissa, exponent in parts if mantissa]
    if not exponents:
        return [mpmath.mpf(0)] * n
    base = min(exponents)
    scaled = [mantissa << (exponent - base) if mantissa else 0 for mantissa, exponent in parts]
    total = sum(scaled)  # n * mean(x) / 2^base, exactly
    return [mpmath.mpf((n * value - total, base)) / n for value in scaled]


def _rsqrt(u: mpmath.mpf) -> mpmath.mpf:
    """``u^(-1/2)`` for ``u >= 0``; NaN at ``u = 0`` (the 0/0 of a zero-variance row)."""
    if u == 0:
        return mpmath.nan
    return 1 / mpmath.sqrt(u)


def _column_dots(a: Rows, b: Rows) -> Row:
    """``[sum_n a[n][k] * b[n][k] for each column k]``: exact products, one rounding each."""
    return [mpmath.fdot(ca, cb) for ca, cb in zip(_transpose(a), _transpose(b), strict=True)]


def _column_sums(a: Rows) -> Row:
    """``[sum_n a[n][k] for each column k]``, each rounded once."""
    return [mpmath.fsum(column) for column in _transpose(a)]


def _affine(gamma: npt.ArrayLike, beta: npt.ArrayLike, width: int) -> tuple[Row, Row]:
    """``gamma`` and ``beta`` as exact vectors of length ``width``, checked in that order."""
    return exact_vector(gamma, "gamma", width), exact_vector(beta, "beta", width)


def _through_mean(bar_d: Row) -> Row:
    """The reverse of ``d = x - mu``, ``mu = mean(x)``: ``bar_x = bar_d + bar_mu / D`` with
    ``bar_mu = -sum(bar_d)``."""
    bar_mu = -mpmath.fsum(bar_d)
    share = bar_mu / len(bar_d)
    return [b + share for b in bar_d]


def unit(length: int, index: int) -> Row:
    """The unit vector ``e_index`` of the given length (a tangent seed)."""
    return [mpmath.mpf(1) if k == index else mpmath.mpf(0) for k in range(length)]


def _transpose(columns: Rows) -> Rows:
    return [list(row) for row in zip(*columns, strict=True)]


# --------------------------------------------------------------------------------------
# LayerNorm
# --------------------------------------------------------------------------------------


def _layernorm_steps(x: Row, eps: mpmath.mpf) -> tuple[Row, mpmath.mpf, Row]:
    """Forward steps of one row: ``d = x - mean(x)``, ``r = (mean(d^2) + eps)^(-1/2)``,
    ``xhat = d * r``; returns ``(d, r, xhat)``."""
    d = deviations(x)  # mu = mean(x); d = x - mu
    var = mpmath.fsum(d, squared=True) / len(d)  # var = mean(d^2), biased
    r = _rsqrt(var + eps)  # u = var + eps; r = u^(-1/2)
    xhat = [d_i * r for d_i in d]  # xhat = d * r
    return d, r, xhat


def layernorm_forward(
    x: npt.ArrayLike,
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike,
    eps: float,
    dps: int = DEFAULT_DPS,
) -> Rows:
    """LayerNorm ``y = gamma * (x - mu) / sqrt(var + eps) + beta`` per row, at ``dps`` digits.

    ``mu = mean(x)``, ``var = mean((x - mu)^2)`` (biased, 1/D), eps added to the variance
    (PyTorch; ``eps_paper = D * eps``). Source: 001_76ce3a8a4b6079c3.txt, Table 2, row
    LayerNorm. A row with ``var + eps == 0`` gives NaN.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        rows = _rows(x, "x")
        width = len(rows[0])
        gamma_, beta_, eps_ = (
            exact_vector(gamma, "gamma", width),
            exact_vector(beta, "beta", width),
            nonnegative(eps),
        )
        out = []
        for row in rows:
            _, _, xhat = _layernorm_steps(row, eps_)
            out.append([gm * z + bt for gm, z, bt in zip(gamma_, xhat, beta_, strict=True)])
        return out


def layernorm_vjp(
    x: npt.ArrayLike,
    g: npt.ArrayLike,
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike,
    eps: float,
    dps: int = DEFAULT_DPS,
) -> tuple[Rows, Row, Row]:
    """``(dx, dgamma, dbeta)`` of LayerNorm by a hand-written reverse sweep of its steps.

    ``g`` has the shape of ``x``; ``dgamma`` and ``dbeta`` are summed over the rows. The
    sweep, per row, with ``bar_z = dL/dz``::

        y = gamma * xhat + beta   ->  bar_xhat = g * gamma;  dgamma += g * xhat;  dbeta += g
        xhat = d * r              ->  bar_d = bar_xhat * r;  bar_r = sum(bar_xhat * d)
        r = u^(-1/2)              ->  bar_u = bar_r * (-1/2) u^(-3/2) = -bar_r r^3 / 2
        u = var + eps             ->  bar_var = bar_u
        var = sum(d^2) / D        ->  bar_d += bar_var * 2 d / D
        d = x - mu                ->  bar_x = bar_d;  bar_mu = -sum(bar_d)
        mu = sum(x) / D           ->  bar_x += bar_mu / D

    Definition: 001_76ce3a8a4b6079c3.txt, Table 2, row LayerNorm (PyTorch eps). A row with
    ``var + eps == 0`` gives NaN in its ``dx`` and in all of ``dgamma``.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        rows = _rows(x, "x")
        width = len(rows[0])
        upstream = _like(g, x, width)
        gamma_, _ = _affine(gamma, beta, width)
        eps_ = nonnegative(eps)
        dx, xhats = [], []
        for row, g_row in zip(rows, upstream, strict=True):
            d, r, xhat = _layernorm_steps(row, eps_)
            xhats.append(xhat)
            bar_xhat = [g_i * gm for g_i, gm in zip(g_row, gamma_, strict=True)]
            bar_d = [b * r for b in bar_xhat]
            bar_r = mpmath.fdot(bar_xhat, d)
            bar_u = -bar_r * r**3 / 2
            bar_var = bar_u
            weight = 2 * bar_var / width
            bar_d = [b + weight * d_i for b, d_i in zip(bar_d, d, strict=True)]
            dx.append(_through_mean(bar_d))
        dgamma = _column_dots(upstream, xhats)
        dbeta = _column_sums(upstream)
        return dx, dgamma, dbeta


def layernorm_jacobian(
    x: npt.ArrayLike,
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike,
    eps: float,
    dps: int = DEFAULT_DPS,
) -> Rows:
    """``J[i][j] = dy_i/dx_j`` of LayerNorm at one sample ``x`` of shape (D,), forward mode.

    The tangent ``t = e_j`` goes through the steps: ``mu' = mean(t)``, ``d' = t - mu'``,
    ``var' = 2 sum(d d') / D``, ``r' = -r^3 var' / 2``, ``xhat' = d' r + d r'``,
    ``y' = gamma * xhat'`` (column ``j``). Table 2, row LayerNorm.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        row = _one_sample(x)
        width = len(row)
        gamma_, _ = _affine(gamma, beta, width)
        d, r, _ = _layernorm_steps(row, nonnegative(eps))
        columns = []
        for j in range(width):
            d_t = deviations(unit(width, j))
            var_t = 2 * mpmath.fdot(d, d_t) / width
            r_t = -(r**3) * var_t / 2
            xhat_t = [dt * r + d_i * r_t for dt, d_i in zip(d_t, d, strict=True)]
            columns.append([gm * z for gm, z in zip(gamma_, xhat_t, strict=True)])
        return _transpose(columns)


# --------------------------------------------------------------------------------------
# RMSNorm
# --------------------------------------------------------------------------------------


def _rmsnorm_steps(x: Row, eps: mpmath.mpf) -> tuple[mpmath.mpf, Row]:
    """Forward steps of one row: ``r = (mean(x^2) + eps)^(-1/2)``, ``xhat = x r``."""
    ms = mpmath.fsum(x, squared=True) / len(x)  # ms = mean(x^2)
    r = _rsqrt(ms + eps)  # u = ms + eps; r = u^(-1/2)
    return r, [x_i * r for x_i in x]


def _optional_beta(beta: npt.ArrayLike | None, width: int) -> Row | None:
    return None if beta is None else exact_vector(beta, "beta", width)


def rmsnorm_forward(
    x: npt.ArrayLike,
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike | None,
    eps: float,
    dps: int = DEFAULT_DPS,
) -> Rows:
    """RMSNorm ``y = gamma * x / sqrt(mean(x^2) + eps) + beta`` per row (``beta`` may be None).

    eps is added to the mean of squares (PyTorch; ``eps_paper = D * eps``). Source:
    001_76ce3a8a4b6079c3.txt, Table 2, row RMSNorm. An all-zero row with eps = 0 gives NaN.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        rows = _rows(x, "x")
        width = len(rows[0])
        gamma_, beta_, eps_ = (
            exact_vector(gamma, "gamma", width),
            _optional_beta(beta, width),
            nonnegative(eps),
        )
        out = []
        for row in rows:
            _, xhat = _rmsnorm_steps(row, eps_)
            y = [gm * z for gm, z in zip(gamma_, xhat, strict=True)]
            out.append(y if beta_ is None else [y_i + bt for y_i, bt in zip(y, beta_, strict=True)])
        return out


def rmsnorm_vjp(
    x: npt.ArrayLike,
    g: npt.ArrayLike,
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike | None,
    eps: float,
    dps: int = DEFAULT_DPS,
) -> tuple[Rows, Row, Row | None]:
    """``(dx, dgamma, dbeta)`` of RMSNorm by a hand-written reverse sweep (``dbeta`` None if
    ``beta`` is None). Per row::

        y = gamma * xhat + beta   ->  bar_xhat = g * gamma;  dgamma += g * xhat;  dbeta += g
        xhat = x * r              ->  bar_x = bar_xhat * r;  bar_r = sum(bar_xhat * x)
        r = u^(-1/2)              ->  bar_u = -bar_r r^3 / 2
        u = ms + eps              ->  bar_ms = bar_u
        ms = sum(x^2) / D         ->  bar_x += bar_ms * 2 x / D

    Table 2, row RMSNorm (PyTorch eps).
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        rows = _rows(x, "x")
        width = len(rows[0])
        upstream = _like(g, x, width)
        gamma_, beta_ = exact_vector(gamma, "gamma", width), _optional_beta(beta, width)
        eps_ = nonnegative(eps)
        dx, xhats = [], []
        for row, g_row in zip(rows, upstream, strict=True):
            r, xhat = _rmsnorm_steps(row, eps_)
            xhats.append(xhat)
            bar_xhat = [g_i * gm for g_i, gm in zip(g_row, gamma_, strict=True)]
            bar_x = [b * r for b in bar_xhat]
            bar_r = mpmath.fdot(bar_xhat, row)
            bar_u = -bar_r * r**3 / 2
            bar_ms = bar_u
            weight = 2 * bar_ms / width
            dx.append([b + weight * x_i for b, x_i in zip(bar_x, row, strict=True)])
        dgamma = _column_dots(upstream, xhats)
        dbeta = None if beta_ is None else _column_sums(upstream)
        return dx, dgamma, dbeta


def rmsnorm_jacobian(
    x: npt.ArrayLike,
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike | None,
    eps: float,
    dps: int = DEFAULT_DPS,
) -> Rows:
    """``J[i][j] = dy_i/dx_j`` of RMSNorm at one sample, forward mode: ``t = e_j``,
    ``ms' = 2 sum(x t) / D``, ``r' = -r^3 ms' / 2``, ``xhat' = t r + x r'``,
    ``y' = gamma * xhat'``. Table 2, row RMSNorm."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        row = _one_sample(x)
        width = len(row)
        gamma_ = exact_vector(gamma, "gamma", width)
        _optional_beta(beta, width)
        r, _ = _rmsnorm_steps(row, nonnegative(eps))
        columns = []
        for j in range(width):
            t = unit(width, j)
            ms_t = 2 * mpmath.fdot(row, t) / width
            r_t = -(r**3) * ms_t / 2
            xhat_t = [t_i * r + x_i * r_t for t_i, x_i in zip(t, row, strict=True)]
            columns.append([gm * z for gm, z in zip(gamma_, xhat_t, strict=True)])
        return _transpose(columns)


# --------------------------------------------------------------------------------------
# CenterNorm
# --------------------------------------------------------------------------------------


def _centernorm_rows(x: npt.ArrayLike) -> Rows:
    rows = _rows(x, "x")
    if len(rows[0]) < 2:
        raise ValueError("x: CenterNorm needs D >= 2 (its factor D/(D-1) is undefined at D = 1)")
    return rows


def centernorm_forward(
    x: npt.ArrayLike,
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike,
    dps: int = DEFAULT_DPS,
) -> Rows:
    """CenterNorm ``y = D/(D-1) * gamma * (x - mean(x)) + beta`` per row, ``D >= 2``.

    Source: 001_76ce3a8a4b6079c3.txt, Table 2, row CenterNorm (Qi et al.). Raises
    ValueError for ``D = 1``.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        rows = _centernorm_rows(x)
        width = len(rows[0])
        gamma_, beta_ = _affine(gamma, beta, width)
        scale = mpmath.mpf(width) / (width - 1)
        out = []
        for row in rows:
            d = deviations(row)  # mu = mean(x); d = x - mu
            out.append(
                [scale * gm * d_i + bt for gm, d_i, bt in zip(gamma_, d, beta_, strict=True)]
            )
        return out


def centernorm_vjp(
    x: npt.ArrayLike,
    g: npt.ArrayLike,
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike,
    dps: int = DEFAULT_DPS,
) -> tuple[Rows, Row, Row]:
    """``(dx, dgamma, dbeta)`` of CenterNorm by a reverse sweep, with ``c = D/(D-1)``::

        y = c * gamma * d + beta  ->  bar_d = g * c * gamma;  dgamma += g * c * d;  dbeta += g
        d = x - mu                ->  bar_x = bar_d;  bar_mu = -sum(bar_d)
        mu = sum(x) / D           ->  bar_x += bar_mu / D

    Table 2, row CenterNorm. Raises ValueError for ``D = 1``.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        rows = _centernorm_rows(x)
        width = len(rows[0])
        upstream = _like(g, x, width)
        gamma_, _ = _affine(gamma, beta, width)
        scale = mpmath.mpf(width) / (width - 1)
        dx, scaled_d = [], []
        for row, g_row in zip(rows, upstream, strict=True):
            d = deviations(row)
            scaled_d.append([scale * d_i for d_i in d])
            bar_d = [g_i * scale * gm for g_i, gm in zip(g_row, gamma_, strict=True)]
            dx.append(_through_mean(bar_d))
        dgamma = _column_dots(upstream, scaled_d)
        dbeta = _column_sums(upstream)
        return dx, dgamma, dbeta


def centernorm_jacobian(
    x: npt.ArrayLike,
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike,
    dps: int = DEFAULT_DPS,
) -> Rows:
    """``J[i][j] = dy_i/dx_j`` of CenterNorm at one sample, forward mode: ``t = e_j``,
    ``d' = t - mean(t)``, ``y' = D/(D-1) * gamma * d'``. Table 2, row CenterNorm."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        rows = _centernorm_rows(x)
        if len(rows) != 1:
            raise ValueError(f"x: the Jacobian is of one sample, shape (D,); got {np.shape(x)}")
        width = len(rows[0])
        gamma_, _ = _affine(gamma, beta, width)
        scale = mpmath.mpf(width) / (width - 1)
        columns = []
        for j in range(width):
            d_t = deviations(unit(width, j))
            columns.append([scale * gm * dt for gm, dt in zip(gamma_, d_t, strict=True)])
        return _transpose(columns)


# --------------------------------------------------------------------------------------
# WeightNorm
# --------------------------------------------------------------------------------------


def _weightnorm_steps(v: Rows, gamma: Row, eps: mpmath.mpf) -> tuple[Row, Row, Rows]:
    """Per output row ``i``: ``r_i = (|v_i|^2 + eps)^(-1/2)``, ``s_i = gamma_i r_i``,
    ``W_i = s_i v_i``; returns ``(r, s, W)``."""
    r = [_rsqrt(mpmath.fsum(v_i, squared=True) + eps) for v_i in v]  # u_i = |v_i|^2 + eps
    s = [gm * r_i for gm, r_i in zip(gamma, r, strict=True)]
    weights = [[s_i * v_ik for v_ik in v_i] for s_i, v_i in zip(s, v, strict=True)]
    return r, s, weights


def _weightnorm_parameters(
    x: npt.ArrayLike, v: npt.ArrayLike, gamma: npt.ArrayLike, eps: float
) -> tuple[Rows, Rows, Row, mpmath.mpf]:
    rows = _rows(x, "x")
    v_ = _matrix(v, "v", len(rows[0]))
    return rows, v_, exact_vector(gamma, "gamma", len(v_)), nonnegative(eps)


def weightnorm_forward(
    x: npt.ArrayLike,
    v: npt.ArrayLike,
    gamma: npt.ArrayLike,
    eps: float,
    dps: int = DEFAULT_DPS,
) -> Rows:
    """WeightNorm ``y = x W^T``, ``W_i = gamma_i v_i / sqrt(|v_i|^2 + eps)``; rows of length O.

    ``v`` has shape (O, D), ``gamma`` shape (O,). Source: 001_76ce3a8a4b6079c3.txt, Table 2,
    row WeightNorm (Salimans & Kingma; the paper writes ``W x`` for one column sample).
    A zero ``v_i`` with eps = 0 makes column ``i`` of ``y`` NaN.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        rows, v_, gamma_, eps_ = _weightnorm_parameters(x, v, gamma, eps)
        _, _, weights = _weightnorm_steps(v_, gamma_, eps_)
        return [[mpmath.fdot(row, w_i) for w_i in weights] for row in rows]


def weightnorm_vjp(
    x: npt.ArrayLike,
    g: npt.ArrayLike,
    v: npt.ArrayLike,
    gamma: npt.ArrayLike,
    eps: float,
    dps: int = DEFAULT_DPS,
) -> tuple[Rows, Rows, Row]:
    """``(dx, dv, dgamma)`` of WeightNorm by a reverse sweep; ``g`` has shape (N, O)::

        y = x W^T                 ->  bar_x = g W;  bar_W = g^T x
        W_i = s_i v_i             ->  bar_v_i = bar_W_i s_i;  bar_s_i = sum(bar_W_i * v_i)
        s_i = gamma_i r_i         ->  dgamma_i = bar_s_i r_i;  bar_r_i = bar_s_i gamma_i
        r_i = u_i^(-1/2)          ->  bar_u_i = -bar_r_i r_i^3 / 2
        u_i = |v_i|^2 + eps       ->  bar_v_i += 2 v_i bar_u_i

    Table 2, row WeightNorm.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        rows, v_, gamma_, eps_ = _weightnorm_parameters(x, v, gamma, eps)
        outputs = len(v_)
        upstream = _like(g, x, outputs)
        r, s, weights = _weightnorm_steps(v_, gamma_, eps_)
        columns_of_w = _transpose(weights)  # columns_of_w[k][i] = W_ik
        dx = [[mpmath.fdot(g_row, column) for column in columns_of_w] for g_row in upstream]
        x_columns = _transpose(rows)
        bar_w = [
            [mpmath.fdot(g_col, x_col) for x_col in x_columns] for g_col in _transpose(upstream)
        ]
        dv, dgamma = [], []
        for i in range(outputs):
            bar_v = [b * s[i] for b in bar_w[i]]
            bar_s = mpmath.fdot(bar_w[i], v_[i])
            dgamma.append(bar_s * r[i])
            bar_r = bar_s * gamma_[i]
            bar_u = -bar_r * r[i] ** 3 / 2
            dv.append([b + 2 * v_ik * bar_u for b, v_ik in zip(bar_v, v_[i], strict=True)])
        return dx, dv, dgamma


def weightnorm_jacobian(
    x: npt.ArrayLike,
    v: npt.ArrayLike,
    gamma: npt.ArrayLike,
    eps: float,
    dps: int = DEFAULT_DPS,
) -> Rows:
    """``J[i][j] = dy_i/dx_j`` of WeightNorm at one sample x of shape (D,): O x D, equal to
    ``W``. Forward mode: the tangent ``t = e_j`` gives ``y' = W t`` (column ``j``).
    Table 2, row WeightNorm."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        row = _one_sample(x)
        _, v_, gamma_, eps_ = _weightnorm_parameters([row], v, gamma, eps)
        _, _, weights = _weightnorm_steps(v_, gamma_, eps_)
        width = len(row)
        columns = []
        for j in range(width):
            t = unit(width, j)
            columns.append([mpmath.fdot(w_i, t) for w_i in weights])
        return _transpose(columns)


# --------------------------------------------------------------------------------------
# Independent check: a high-precision directional derivative
# --------------------------------------------------------------------------------------


def _nested_exact(value: Any, name: str) -> Any:
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return exact(value[()], name)
        real_array(value, name)
        return [_nested_exact(element, name) for element in value]
    if isinstance(value, (list, tuple)):
        return [_nested_exact(element, name) for element in value]
    return exact(value, name)


def _nested_map(function: Callable[..., Any], *trees: Any) -> Any:
    first = trees[0]
    if isinstance(first, (list, tuple)):
        if any(not isinstance(t, (list, tuple)) or len(t) != len(first) for t in trees):
            raise ValueError("directional_derivative: f returned values of varying shapes")
        return [_nested_map(function, *parts) for parts in zip(*trees, strict=True)]
    return function(*trees)


def directional_derivative(
    f: Callable[[Any], Any],
    x: npt.ArrayLike | Sequence[Any],
    v: npt.ArrayLike | Sequence[Any],
    dps: int = FD_DEFAULT_DPS,
) -> Any:
    """``d/dt f(x + t v)`` at ``t = 0`` by the central five-point stencil, in mpmath.

    ``x`` and ``v`` are arrays or nested lists of the same shape (floats are taken
    exactly); ``f`` maps a nested list of mpf of that shape to an mpf or a nested list of
    mpf, and the result has ``f``'s structure. ``f`` is called inside
    ``mpmath.workdps(2 * dps)`` and must evaluate at that ambient precision (pass
    ``dps=mpmath.mp.dps`` to the references above). With ``h = 10^-(dps // 2)``::

        f'(0) ~ [f(-2h) - 8 f(-h) + 8 f(h) - f(2h)] / (12 h)

    Error bound (per output component ``phi(t) = f(x + t v)``): the stencil is exact on
    polynomials of degree <= 4, so Taylor's theorem with Lagrange remainders of order 5
    bounds the truncation error by ``(32 + 8 + 8 + 32) h^5 K5 / (5! * 12 h) = h^4 K5 / 18``,
    ``K5 = max |phi^(5)|`` on ``[-2h, 2h]``. Evaluating ``f`` with absolute error ``delta``
    adds at most ``18 delta / (12 h) = 1.5 delta / h``. For the norms above ``phi`` is
    analytic in a complex disc of some radius ``rho`` (for LayerNorm the distance to the
    nearest complex zero of ``var + eps`` along the line; WeightNorm in ``x`` and CenterNorm
    are linear), so Cauchy's estimate gives ``K5 <= 120 M / rho^5`` with ``M`` a
    bound of ``|phi|`` on that disc. At ``dps = 60`` (``h = 10^-30``, evaluation at 120
    digits, ``delta ~ 10^-120 M``) the truncation error is below ``10^-(dps // 3) =
    10^-20`` whenever ``rho^5 >= 7 M 10^-100`` -- e.g. any ``rho >= 10^-18`` for
    ``M <= 10^5`` -- and the rounding error is about ``1.5 * 10^-90 M`` (plus
    ``~10^-90 |x| |phi'|`` from rounding the points ``x + t v``): both far below the 30
    digits the tests demand, and far below the references' own 50.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(2 * dps):
        base, direction = _nested_exact(x, "x"), _nested_exact(v, "v")
        h = mpmath.mpf(10) ** -(dps // 2)

        def at(t: mpmath.mpf) -> Any:
            return f(_nested_map(lambda x_i, v_i: x_i + t * v_i, base, direction))

        f_m2, f_m1, f_p1, f_p2 = at(-2 * h), at(-h), at(h), at(2 * h)
        return _nested_map(
            lambda a, b, c, d: ((a - d) + 8 * (c - b)) / (12 * h), f_m2, f_m1, f_p1, f_p2
        )
