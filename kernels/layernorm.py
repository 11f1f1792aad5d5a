"""LayerNorm over the last axis of ``x`` (shape (..., D)), as PyTorch computes it.

``y = gamma * (x - mean) / sqrt(var + eps) + beta`` with the biased variance
``var = mean((x - mean)^2)``: eps is added to the variance (PyTorch). The paper
(001_76ce3a8a4b6079c3.txt, Table 2 row LayerNorm, Eq. 18) adds its eps to the squared
norm ``|x - mean|^2``; the two agree with ``eps_paper = D * eps``.

Backward (proven equal to sympy.diff of the forward, D = 1..5; see ``derive/definitions/norms.py``):
with ``z = (x - mean) r``, ``r = 1/sqrt(var + eps)``, ``a = gamma * g``,
``dx = r (a - mean(a) - z mean(a z))``, ``dgamma = sum_rows g z``, ``dbeta = sum_rows g``;
the Jacobian is ``J = diag(gamma) r (I - 11^T/D - z z^T/D)`` (numerator layout).

Edge cases. D = 1: the centered row is 0, so y = beta and dx = 0. D = 2: the row
normalizes to ``+-sqrt(var/(var + eps))`` (a smoothed sign of x_1 - x_2) and the Jacobian's
2-norm is ``eps/(var + eps)^(3/2)`` for gamma = 1, largest at var = 0. A constant row
(zero variance) gives y = beta and ``dx = (a - mean(a)) / sqrt(eps)`` -- the Jacobian's
largest value, ``max|gamma| / sqrt(eps)`` at most; with eps = 0 it is 0/0 = NaN.
Lipschitz constant: at most ``max|gamma| / sqrt(eps)`` (PyTorch eps; ``max|gamma| sqrt(D) /
sqrt(eps_paper)`` as Table 2 prints it), attained at constant rows exactly when the
largest |gamma_i| occurs twice (e.g. gamma = 1); see the report for the tight constant.
Float64 rows whose deviations from the mean exceed 2^511 overflow the variance (then
y = beta), and with eps = 0 rows whose deviations all lie below 2^-537 underflow it to 0
(then NaN); float32 and float16 input cannot reach either.

>>> import numpy as np
>>> from kernels import layernorm
>>> x = np.array([[1.0, 2.0, 3.0]])
>>> layernorm.forward(x, np.ones(3), np.zeros(3), eps=0.0)
array([[-1.22474487,  0.        ,  1.22474487]])
>>> dx, dgamma, dbeta = layernorm.vjp(x, np.array([[0.0, 0.0, 1.0]]), np.ones(3), np.zeros(3))
>>> dbeta
array([0., 0., 1.])
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kernels import _rownorm
from kernels._generated import layernorm as _generated
from kernels._strict import bfloat16_kernel


def _prepare(x, gamma, beta, eps, strict_fp16) -> _rownorm.Prepared:
    return _rownorm.Prepared(x, gamma, beta, eps, 1, strict_fp16, "LayerNorm")


@bfloat16_kernel
def forward(
    x: ArrayLike, gamma: ArrayLike, beta: ArrayLike, eps: float = 1e-5, *, strict_fp16: bool = False
) -> np.ndarray:
    """LayerNorm of each row of ``x``; same shape and dtype as ``x``."""
    return _rownorm.forward(_generated, _prepare(x, gamma, beta, eps, strict_fp16))


@bfloat16_kernel
def vjp(
    x: ArrayLike,
    g: ArrayLike,
    gamma: ArrayLike,
    beta: ArrayLike,
    eps: float = 1e-5,
    *,
    strict_fp16: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dx, dgamma, dbeta)`` for the upstream gradient ``g`` (shape of ``x``)."""
    return _rownorm.vjp(_generated, _prepare(x, gamma, beta, eps, strict_fp16), g)


@bfloat16_kernel
def jacobian(
    x: ArrayLike, gamma: ArrayLike, beta: ArrayLike, eps: float = 1e-5, *, strict_fp16: bool = False
) -> np.ndarray:
    """``dy/dx`` of one sample ``x`` of shape (D,): a (D, D) array, numerator layout."""
    return _rownorm.jacobian(_generated, _prepare(x, gamma, beta, eps, strict_fp16))
