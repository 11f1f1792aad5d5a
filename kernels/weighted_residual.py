"""Weighted residual block, ``y = x + nu * f(x; W)`` (ReZero, WRS), for a branch ``f``.

Source: 001_76ce3a8a4b6079c3.txt, section 5.3, Eq. 55 (ReZero, Bachlechner et al.: ``nu``
initialized to 0; WRS, Qi et al.: to 1/L) and Table 2 row Weighted Residual Block, which
prints the definition as ``f(x, W) = x + nu_1 (.) f(x, W)`` (read: ``y = ...``). ``x`` has
shape (..., D); the branch is a stage of ``kernels.compose`` mapping (..., D) to (..., D)
(else ValueError naming the branch and both shapes); what it returns is checked before it
is used (``kernels.compose``: ValueError/TypeError naming the branch). ``nu`` is per
feature, shape (D,), broadcast over the rows, or one scalar (shape ()); an array must have
x's dtype, while a Python number is first stored in x's dtype, as a parameter of the
network would be.

Backward, for an upstream gradient ``g`` of the shape of ``x``::

    dx   = g + J_f^T (nu * g)        (the branch's VJP of nu * g)
    grads = the branch's parameter gradients for the upstream gradient nu * g
    dnu  = sum over rows of g * f(x)   (shape (D,)); for a scalar nu, the sum of all of it

The Jacobian of one sample is ``I + diag(nu) J_f(x)`` (numerator layout,
``J[i, j] = dy_i/dx_j``). Table 2 prints ``I + (df/dx) diag(nu)`` in denominator layout,
where ``df/dx`` is ``J_f^T``: the transpose of the same matrix. For the FFN of Eq. 26,
``J = I + diag(nu) W2 diag(1(W1 x + b1 > 0)) W1``, with ``relu'(0) = 0`` at a kink (the
indicator of Eq. 27). ``nu = 0`` gives the identity map, whatever the branch (ReZero's
initial Lipschitz constant 1), but ``dnu`` is still ``sum g f(x)``.

Arithmetic. The branch runs in x's dtype (float32, float16 and bfloat16 round between its
stages, and ``nu * g`` is rounded to x's dtype before entering the branch's VJP, as in a
network of that dtype). ``x + nu * f`` (likewise ``g + J_f^T(nu g)``, ``I + diag(nu)
J_f``) is formed exactly (double-double) and rounded to float64, then once to x's dtype;
``dnu`` is summed in double-double and rounded once. ``strict_fp16=True`` is passed to
every stage and rounds ``nu * f``, the sum, and every product and partial sum of ``dnu``
to x's 16-bit format (half or bfloat16).
NaN and inf propagate as IEEE arithmetic says; nothing is written into the inputs.

>>> import numpy as np
>>> from kernels import compose, weighted_residual
>>> f = compose.Sequential([compose.Linear(np.array([[0.0, 2.0], [1.0, 0.0]]))])
>>> x = np.array([[1.0, 3.0]])
>>> weighted_residual.forward(x, f, np.array([0.5, -1.0]))  # x + nu * (x W^T)
array([[4., 2.]])
>>> dx, (dW,), dnu = weighted_residual.vjp(x, np.ones((1, 2)), f, np.array([0.5, -1.0]))
>>> dnu                                                        # sum of g * f(x)
array([6., 1.])
>>> weighted_residual.jacobian(x[0], f, np.array([0.5, -1.0]))  # I + diag(nu) W
array([[ 1.,  1.],
       [-1.,  1.]])
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from kernels import compose
from kernels._strict import is_bfloat16
from kernels._validate import float_array, same_shape_and_dtype

__all__ = ["forward", "jacobian", "vjp"]


def _nu(nu: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(nu as given, in x's dtype; nu broadcast to (D,) as float64)``."""
    size = x.shape[-1]
    if isinstance(nu, numbers.Real) and not isinstance(nu, (bool, np.bool_, np.generic)):
        value = compose.finish(np.asarray(float(nu)), x.dtype)
    else:
        value = float_array(nu, "nu", bfloat16=True)
        if value.dtype != x.dtype:
            raise TypeError(f"nu: expected dtype {x.dtype} (the dtype of x), got {value.dtype}")
    if value.shape not in ((), (size,)):
        raise ValueError(
            f"nu: expected a scalar (shape ()) or shape ({size},) (the last axis of x), "
            f"got {value.shape}"
        )
    return value, np.broadcast_to(value.astype(np.float64), (size,)).copy()


def forward(x: ArrayLike, branch: Any, nu: Any, *, strict_fp16: bool = False) -> np.ndarray:
    """``x + nu * branch(x)``: shape and dtype of ``x``."""
    x, strict = compose.check_block(x, branch, strict_fp16)
    _, nu64 = _nu(nu, x)
    f = compose.checked_forward(branch, x, strict, "branch")
    return compose.finish(compose.scaled_sum(x, f, nu64, strict, bf=is_bfloat16(x)), x.dtype)


def vjp(
    x: ArrayLike, g: ArrayLike, branch: Any, nu: Any, *, strict_fp16: bool = False
) -> tuple[np.ndarray, tuple[np.ndarray, ...], np.ndarray]:
    """``(dx, grads, dnu)``; ``dnu`` has the shape of ``nu`` and x's dtype."""
    x, strict = compose.check_block(x, branch, strict_fp16)
    value, nu64 = _nu(nu, x)
    g = float_array(g, "g", bfloat16=True)
    same_shape_and_dtype(x, g, "g")
    with np.errstate(invalid="ignore", over="ignore"):  # IEEE: 0 * inf is NaN, no warning
        # exact for float16, bfloat16 and float32 (and so the single rounding of strict mode)
        weighted_g = compose.finish(nu64 * g.astype(np.float64), x.dtype)
    f, branch_dx, grads = compose.checked_forward_and_vjp(branch, x, weighted_g, strict, "branch")
    bf = is_bfloat16(x)
    dx = compose.scaled_sum(g, branch_dx, np.ones(x.shape[-1]), strict, bf=bf)
    width = x.shape[-1] if value.ndim else 1
    dnu = compose.column_dots(g, f, width, strict, bf=bf).reshape(value.shape)
    return compose.finish(dx, x.dtype), grads, compose.finish(dnu, x.dtype)


def jacobian(x: ArrayLike, branch: Any, nu: Any, *, strict_fp16: bool = False) -> np.ndarray:
    """``I + diag(nu) J_f(x)`` for one sample ``x`` of shape (D,): (D, D), numerator layout."""
    x, strict = compose.check_block(x, branch, strict_fp16)
    if x.ndim != 1:
        raise ValueError(f"x: expected one sample of shape (D,), got shape {x.shape}")
    _, nu64 = _nu(nu, x)
    branch_jacobian = compose.checked_jacobian(branch, x, strict, "branch")
    # scaled_sum scales along the last axis; here nu scales the rows i of J[i, j], so the
    # sum is formed on the transposes: J^T = I + J_f^T diag(nu).
    identity = np.eye(x.shape[0])
    total = compose.scaled_sum(identity, branch_jacobian.T, nu64, strict, bf=is_bfloat16(x))
    return compose.finish(total.T, x.dtype)
