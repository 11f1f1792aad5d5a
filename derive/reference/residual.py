"""High-precision mpmath references for the FFN residual and weighted residual blocks.

Written straight from the definitions, sharing no code with ``kernels/`` (no kernel, no
``kernels.compose``) and no closed-form derivative:

* the forward evaluates the steps of the definition in order;
* the VJP is reverse-mode differentiation of those same steps, written out by hand: the
  adjoint of every intermediate is accumulated from the adjoints of the steps that use it,
  last step first (explicit index sums, no matrix identities);
* the Jacobian is forward-mode differentiation: the unit vectors ``e_j`` are pushed through
  the same steps, and the tangent of the output is column ``j`` (numerator layout,
  ``J[i][j] = dy_i/dx_j``).

Definitions (rows are samples; ``x`` has shape (N, D) or (D,) for one sample)
-------------------------------------------------------------------------------
Source: ``shared/seeds/001_76ce3a8a4b6079c3.txt``, Eq. 22 (residual), Eq. 26 (FFN),
Eq. 55 / section 5.3 (ReZero, WRS), Table 2 rows Residual and Weighted Residual Block.
``W1`` has shape (H, D), ``b1`` (H,), ``W2`` (D, H), ``b2`` (D,); either bias may be None
(no bias; its gradient is then None). For each row ``x`` (index ``n`` dropped)::

    h_k = sum_j W1[k][j] x_j + b1_k              (pre-activation, k < H)
    a_k = relu(h_k) = h_k if h_k > 0 else 0
    f_i = sum_k W2[i][k] a_k + b2_i              (the FFN of Eq. 26, i < D)
    y_i = x_i + f_i                              (residual, Eq. 22)
    y_i = x_i + nu_i f_i                         (weighted residual; nu scalar or (D,))

ReLU is not differentiable at 0. The derivative used in both sweeps is
``relu'(h) = 1 if h > 0 else 0`` (``relu'(0) = 0``, the indicator ``1(h > 0)`` of Eq. 25
and Eq. 27), so at a kink the results are the one-sided derivatives of the side where the
unit is off. Away from kinks (every ``h_k != 0``) they are the true derivatives.

Gradients of parameters are summed over the rows; ``dnu`` has nu's shape (a scalar nu:
the sum over rows and features).

Inputs and outputs
------------------
Array elements are converted exactly (:func:`derive.reference.core.exact`: floats by their
binary value, ints as integers); elements that are already ``mpf`` are used as they are (so
that a finite difference can evaluate the forward at points no float represents). All
arithmetic runs inside ``mpmath.workdps(dps)``, ``dps >= 50``; the global precision is never
changed.
Results are nested lists of ``mpf`` (rows; a 1-D ``x`` gives one row), for the caller to
round.

Accuracy. Every sum is an ``mpmath.fdot``/``fsum`` (the terms are added exactly and the
sum rounded once), and the only other operations are one product per term, ``relu`` (exact)
and the comparison ``h > 0``, made on an ``h`` that is exact whenever it is 0 (a sum of
exact dyadic products of float inputs is rounded once, and a nonzero sum never rounds to 0)
-- so the indicator is always the exact one. Each output is thus within a few units of
``2^-p`` (``p = 169`` bits at 50 digits) relative to the sum of the magnitudes of its terms,
far below anything a float64 comparison resolves.

>>> import numpy as np
>>> W1, b1 = np.array([[1.0, -1.0]]), np.array([0.0])
>>> W2, b2 = np.array([[2.0], [0.0]]), np.array([0.0, 0.5])
>>> residual_forward(np.array([3.0, 1.0]), W1, b1, W2, b2)
[[mpf('7.0'), mpf('1.5')]]
>>> residual_jacobian(np.array([1.0, 1.0]), W1, b1, W2, b2)  # h = 0: relu'(0) = 0
[[mpf('1.0'), mpf('0.0')], [mpf('0.0'), mpf('1.0')]]
>>> dx, dW1, db1, dW2, db2, dnu = weighted_residual_vjp(
...     np.array([3.0, 1.0]), np.array([1.0, 1.0]), W1, b1, W2, b2, 0.5)
>>> dx, dnu
([[mpf('2.0'), mpf('0.0')]], mpf('4.5'))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mpmath
import numpy as np
import numpy.typing as npt

from derive.reference.core import (
    MIN_REFERENCE_DIGITS,
    check_dps,
    exact_array,
    exact_scalar,
    exact_vector,
    real_array,
)

__all__ = [
    "DEFAULT_DPS",
    "MIN_DPS",
    "Steps",
    "residual_forward",
    "residual_jacobian",
    "residual_vjp",
    "steps",
    "weighted_residual_forward",
    "weighted_residual_jacobian",
    "weighted_residual_vjp",
]

#: Significant digits unless asked otherwise (SPEC, "Tests": >= 50).
DEFAULT_DPS = 50
#: The lowest precision accepted: the SPEC's 50 digits (no caller needs fewer).
MIN_DPS = MIN_REFERENCE_DIGITS

Row = list[mpmath.mpf]
Rows = list[Row]


# --------------------------------------------------------------------------------------
# Exact conversion of the inputs
# --------------------------------------------------------------------------------------


def _matrix(value: Any, name: str, shape: tuple[int | None, int | None]) -> Rows:
    array = real_array(value, name)
    ok = array.ndim == 2 and all(
        s is None or s == t for s, t in zip(shape, array.shape, strict=True)
    )
    if not ok or 0 in array.shape:
        expected = tuple("?" if s is None else s for s in shape)
        raise ValueError(
            f"{name}: expected a non-empty matrix of shape {expected}, got {array.shape}"
        )
    return exact_array(array, name).tolist()


@dataclass(frozen=True)
class _Block:
    """The exact inputs of one call."""

    x: Rows
    W1: Rows
    b1: Row | None
    W2: Rows
    b2: Row | None
    nu: Row  # per feature (a scalar nu repeated D times)
    scalar_nu: bool


def _block(x, W1, b1, W2, b2, nu) -> _Block:
    x_array = real_array(x, "x")
    if x_array.ndim == 1:
        x_array = x_array[np.newaxis, :]
    if x_array.ndim != 2 or 0 in x_array.shape:
        raise ValueError(f"x: expected shape (D,) or (N, D), non-empty, got {np.shape(x)}")
    size = x_array.shape[1]
    rows = _matrix(x_array, "x", (None, size))
    w1 = _matrix(W1, "W1", (None, size))
    hidden = len(w1)
    w2 = _matrix(W2, "W2", (size, hidden))
    bias1 = None if b1 is None else exact_vector(b1, "b1", hidden)
    bias2 = None if b2 is None else exact_vector(b2, "b2", size)
    if nu is None:
        weights, scalar = [mpmath.mpf(1)] * size, True
    elif np.ndim(nu) == 0 and not isinstance(nu, (list, tuple)):
        weights, scalar = [exact_scalar(nu, "nu")] * size, True
    else:
        weights, scalar = exact_vector(nu, "nu", size), False
    return _Block(rows, w1, bias1, w2, bias2, weights, scalar)


# --------------------------------------------------------------------------------------
# The steps of the definition, and their derivatives
# --------------------------------------------------------------------------------------


def _relu(h: mpmath.mpf) -> mpmath.mpf:
    return h if h > 0 else mpmath.mpf(0)


def _relu_prime(h: mpmath.mpf) -> mpmath.mpf:
    """``1(h > 0)``: the convention ``relu'(0) = 0``."""
    return mpmath.mpf(1) if h > 0 else mpmath.mpf(0)


def _affine(W: Rows, v: Row, b: Row | None) -> Row:
    """``[sum_j W[k][j] v_j + b_k for each k]``, each sum exact before one rounding."""
    if b is None:
        return [mpmath.fdot(row, v) for row in W]
    return [mpmath.fdot([*row, b_k], [*v, mpmath.mpf(1)]) for row, b_k in zip(W, b, strict=True)]


def _steps(p: _Block, row: Row) -> tuple[Row, Row, Row]:
    """``(h, a, f)`` of one row."""
    h = _affine(p.W1, row, p.b1)
    a = [_relu(h_k) for h_k in h]
    f = _affine(p.W2, a, p.b2)
    return h, a, f


def _forward(p: _Block) -> Rows:
    return [_row_steps(p, row, None).y for row in p.x]


@dataclass(frozen=True)
class Steps:
    """The intermediates of one row: the forward's ``h, a, f, y`` and, given an upstream
    gradient, the adjoints ``f_bar = nu * g``, ``a_bar``, ``h_bar`` and ``x_bar`` (= dx)."""

    h: Row
    a: Row
    f: Row
    y: Row
    f_bar: Row | None = None
    a_bar: Row | None = None
    h_bar: Row | None = None
    x_bar: Row | None = None


def _row_steps(p: _Block, row: Row, g_row: Row | None) -> Steps:
    """Forward through one row, then (given ``g_row``) reverse mode back to ``x``."""
    size, hidden = len(row), len(p.W1)
    h, a, f = _steps(p, row)
    y = [x_i + nu_i * f_i for x_i, nu_i, f_i in zip(row, p.nu, f, strict=True)]
    if g_row is None:
        return Steps(h, a, f, y)
    # y_i = x_i + nu_i f_i
    f_bar = [nu_i * g_i for nu_i, g_i in zip(p.nu, g_row, strict=True)]
    # f_i = sum_k W2[i][k] a_k + b2_i  ->  a_bar_k = sum_i W2[i][k] f_bar_i
    a_bar = [mpmath.fdot([p.W2[i][k] for i in range(size)], f_bar) for k in range(hidden)]
    # a_k = relu(h_k)
    h_bar = [a_bar_k * _relu_prime(h_k) for a_bar_k, h_k in zip(a_bar, h, strict=True)]
    # h_k = sum_j W1[k][j] x_j + b1_k, and the skip connection passes g_j itself
    x_bar = [
        mpmath.fdot([*(p.W1[k][j] for k in range(hidden)), mpmath.mpf(1)], [*h_bar, g_row[j]])
        for j in range(size)
    ]
    return Steps(h, a, f, y, f_bar, a_bar, h_bar, x_bar)


def _dense_gradients(
    out_bars: Rows, inputs: Rows, shape: tuple[int, int], bias: bool
) -> tuple[Rows, Row | None]:
    """``(dW, db)`` of ``out = W in + b`` applied to every row ``n``: ``dW[k][j] = sum_n
    out_bars[n][k] inputs[n][j]`` (``W`` of ``shape``), ``db[k] = sum_n out_bars[n][k]``
    (None without a bias), each entry rounded once."""
    outputs, width = shape
    count = len(inputs)
    dW = [
        [
            mpmath.fdot(
                [out_bars[n][k] for n in range(count)], [inputs[n][j] for n in range(count)]
            )
            for j in range(width)
        ]
        for k in range(outputs)
    ]
    db = (
        [mpmath.fsum(out_bars[n][k] for n in range(count)) for k in range(outputs)]
        if bias
        else None
    )
    return dW, db


def _vjp(p: _Block, g: Rows) -> tuple[Rows, Rows, Row | None, Rows, Row | None, Any]:
    """Reverse mode through the steps, every adjoint an explicit sum over its uses."""
    size, hidden, count = len(p.x[0]), len(p.W1), len(p.x)
    # per-row adjoints, then the parameter adjoints as sums over rows
    rows = [_row_steps(p, row, g_row) for row, g_row in zip(p.x, g, strict=True)]
    x_bar = [r.x_bar for r in rows]
    h_bars = [r.h_bar for r in rows]
    f_bars = [r.f_bar for r in rows]
    a_rows = [r.a for r in rows]
    fs = [r.f for r in rows]
    dW1, db1 = _dense_gradients(h_bars, p.x, (hidden, size), p.b1 is not None)
    dW2, db2 = _dense_gradients(f_bars, a_rows, (size, hidden), p.b2 is not None)
    # nu_i multiplies f_i in every row: nu_bar_i = sum_n g[n][i] f[n][i]
    dnu_columns = [
        mpmath.fdot([g[n][i] for n in range(count)], [fs[n][i] for n in range(count)])
        for i in range(size)
    ]
    dnu = mpmath.fsum(dnu_columns) if p.scalar_nu else dnu_columns
    return x_bar, dW1, db1, dW2, db2, dnu


def _jacobian(p: _Block) -> Rows:
    """Forward mode: column j is the tangent of y for the tangent e_j of x."""
    if len(p.x) != 1:
        raise ValueError("x: the Jacobian is of one sample, shape (D,)")
    row = p.x[0]
    size = len(row)
    h, _, _ = _steps(p, row)
    columns = []
    for j in range(size):
        x_dot = [mpmath.mpf(1) if i == j else mpmath.mpf(0) for i in range(size)]
        h_dot = _affine(p.W1, x_dot, None)
        a_dot = [_relu_prime(h_k) * d for h_k, d in zip(h, h_dot, strict=True)]
        f_dot = _affine(p.W2, a_dot, None)
        columns.append([x_dot[i] + p.nu[i] * f_dot[i] for i in range(size)])
    return [[columns[j][i] for j in range(size)] for i in range(size)]


def _upstream(g: Any, p: _Block) -> Rows:
    array = real_array(g, "g")
    if array.ndim == 1:
        array = array[np.newaxis, :]
    shape = (len(p.x), len(p.x[0]))
    if array.shape != shape:
        raise ValueError(f"g: expected the shape of x, {shape} as rows, got {np.shape(g)}")
    return _matrix(array, "g", shape)


# --------------------------------------------------------------------------------------
# Public references
# --------------------------------------------------------------------------------------


def residual_forward(
    x: npt.ArrayLike, W1: Any, b1: Any, W2: Any, b2: Any, *, dps: int = DEFAULT_DPS
) -> Rows:
    """``y = x + FFN(x)`` (Eq. 22, 26): rows of mpf."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        return _forward(_block(x, W1, b1, W2, b2, None))


def residual_vjp(
    x: npt.ArrayLike, g: Any, W1: Any, b1: Any, W2: Any, b2: Any, *, dps: int = DEFAULT_DPS
) -> tuple[Rows, Rows, Row | None, Rows, Row | None]:
    """``(dx, dW1, db1, dW2, db2)`` for the upstream gradient ``g`` (shape of x)."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        p = _block(x, W1, b1, W2, b2, None)
        return _vjp(p, _upstream(g, p))[:5]


def residual_jacobian(
    x: npt.ArrayLike, W1: Any, b1: Any, W2: Any, b2: Any, *, dps: int = DEFAULT_DPS
) -> Rows:
    """``dy/dx`` of one sample x (D,): D rows of D mpf, numerator layout."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        return _jacobian(_block(x, W1, b1, W2, b2, None))


def weighted_residual_forward(
    x: npt.ArrayLike, W1: Any, b1: Any, W2: Any, b2: Any, nu: Any, *, dps: int = DEFAULT_DPS
) -> Rows:
    """``y = x + nu * FFN(x)`` (Eq. 55), nu a scalar or of shape (D,)."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        return _forward(_block(x, W1, b1, W2, b2, nu))


def weighted_residual_vjp(
    x: npt.ArrayLike,
    g: Any,
    W1: Any,
    b1: Any,
    W2: Any,
    b2: Any,
    nu: Any,
    *,
    dps: int = DEFAULT_DPS,
) -> tuple[Rows, Rows, Row | None, Rows, Row | None, Any]:
    """``(dx, dW1, db1, dW2, db2, dnu)``; dnu an mpf for a scalar nu, else D mpf."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        p = _block(x, W1, b1, W2, b2, nu)
        return _vjp(p, _upstream(g, p))


def weighted_residual_jacobian(
    x: npt.ArrayLike, W1: Any, b1: Any, W2: Any, b2: Any, nu: Any, *, dps: int = DEFAULT_DPS
) -> Rows:
    """``dy/dx`` of one sample x (D,): D rows of D mpf, numerator layout."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        return _jacobian(_block(x, W1, b1, W2, b2, nu))


def steps(
    x: npt.ArrayLike,
    W1: Any,
    b1: Any,
    W2: Any,
    b2: Any,
    nu: Any = None,
    g: Any = None,
    *,
    dps: int = DEFAULT_DPS,
) -> list[Steps]:
    """The intermediates of every row (``nu=None``: the plain residual, nu = 1), with the
    reverse-mode adjoints if an upstream gradient ``g`` is given; for error bounds."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        p = _block(x, W1, b1, W2, b2, nu)
        upstream = [None] * len(p.x) if g is None else _upstream(g, p)
        return [_row_steps(p, row, g_row) for row, g_row in zip(p.x, upstream, strict=True)]
