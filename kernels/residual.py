"""Residual block, ``y = x + f(x; W)``, for a branch ``f`` built from other kernels.

Source: 001_76ce3a8a4b6079c3.txt, Eq. 22-23 and Table 2 row Residual (He et al.); with
the FFN of Eq. 26 as branch, section 3.1.7. ``x`` has shape (..., D); the branch is a
stage of ``kernels.compose`` (e.g. ``compose.ffn(W1, b1, W2, b2)``) that maps (..., D) to
(..., D), else ValueError naming the branch and both shapes. What the branch returns is
checked before it is added (``kernels.compose``: shape and dtype of its output, gradients
and Jacobian; ValueError/TypeError naming the branch).

Backward, for an upstream gradient ``g`` of the shape of ``x``::

    dx = g + J_f^T g   (J_f^T g = the branch's VJP),   grads = the branch's parameter
                                                          gradients, in its order

The Jacobian of one sample is ``I + J_f(x)`` (Eq. 23), numerator layout
``J[i, j] = dy_i/dx_j``; the paper's denominator layout is the transpose, ``I + J_f^T``.
For the FFN, ``J = I + W2 diag(1(W1 x + b1 > 0)) W1``, the transpose of the form printed
after Eq. 27. At a ReLU kink (a pre-activation exactly 0) the kernels take
``relu'(0) = 0``, the indicator of Eq. 27: the Jacobian is the one-sided one of the side
where that unit is off. Lipschitz constant: at most ``1 + Lip(f)`` (Table 2).

Arithmetic. The branch runs in x's dtype (``kernels.compose``: float32, float16 and
bfloat16 round between its stages); the addition ``x + f`` (``g + J_f^T g``, ``I + J_f``)
is computed in float64 and rounded once to x's dtype, which for float32, float16 and
bfloat16 is the correctly rounded sum of the two stored values (the float64 sum of two
bfloat16 values is exact unless their exponents lie 45 or more binades apart, where the
smaller is below 2^-44 of the larger, far below half a bfloat16 step, and then both
roundings give the larger). ``strict_fp16=True`` is passed to every stage and the sums
are rounded to the 16-bit format (for two such values that is the same single rounding).
NaN and inf propagate as IEEE arithmetic says; nothing is written into the inputs.

>>> import numpy as np
>>> from kernels import compose, residual
>>> W1 = np.array([[1.0, -1.0]])           # H = 1 hidden unit, D = 2
>>> W2 = np.array([[2.0], [0.0]])
>>> f = compose.ffn(W1, np.zeros(1), W2, np.zeros(2))
>>> residual.forward(np.array([[3.0, 1.0]]), f)  # x + W2 relu(x_0 - x_1)
array([[7., 1.]])
>>> residual.jacobian(np.array([3.0, 1.0]), f)   # I + W2 W1
array([[ 3., -2.],
       [ 0.,  1.]])
>>> residual.jacobian(np.array([1.0, 1.0]), f)   # on the kink: relu'(0) = 0
array([[1., 0.],
       [0., 1.]])
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from kernels import compose
from kernels._strict import is_bfloat16
from kernels._validate import float_array, same_shape_and_dtype

__all__ = ["forward", "jacobian", "vjp"]


def _add(a: np.ndarray, b: np.ndarray, strict: bool) -> np.ndarray:
    """``a + b`` (same shape) in float64, rounded once to a's dtype."""
    ones = np.ones(a.shape[-1])
    total = compose.scaled_sum(a, b, ones, strict, bf=is_bfloat16(a))
    return compose.finish(total, a.dtype)


def forward(x: ArrayLike, branch: Any, *, strict_fp16: bool = False) -> np.ndarray:
    """``x + branch(x)``: shape and dtype of ``x``."""
    x, strict = compose.check_block(x, branch, strict_fp16)
    return _add(x, compose.checked_forward(branch, x, strict, "branch"), strict)


def vjp(
    x: ArrayLike, g: ArrayLike, branch: Any, *, strict_fp16: bool = False
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """``(dx, grads)``: ``dx = g + J_f^T g`` and the branch's parameter gradients."""
    x, strict = compose.check_block(x, branch, strict_fp16)
    g = float_array(g, "g", bfloat16=True)
    same_shape_and_dtype(x, g, "g")
    branch_dx, grads = compose.checked_vjp(branch, x, g, strict, "branch")
    return _add(g, branch_dx, strict), grads


def jacobian(x: ArrayLike, branch: Any, *, strict_fp16: bool = False) -> np.ndarray:
    """``I + J_f(x)`` for one sample ``x`` of shape (D,): (D, D), numerator layout."""
    x, strict = compose.check_block(x, branch, strict_fp16)
    if x.ndim != 1:
        raise ValueError(f"x: expected one sample of shape (D,), got shape {x.shape}")
    branch_jacobian = compose.checked_jacobian(branch, x, strict, "branch")
    identity = np.eye(x.shape[0])
    ones = np.ones(x.shape[0])
    total = compose.scaled_sum(identity, branch_jacobian, ones, strict, bf=is_bfloat16(x))
    return compose.finish(total, x.dtype)
