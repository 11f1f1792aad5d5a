"""RMSNorm over the last axis of ``x`` (shape (..., D)), as PyTorch computes it.

``y = gamma * x / sqrt(mean(x^2) + eps) + beta`` (``beta`` optional): eps is added to the
mean of squares (PyTorch). The paper (001_76ce3a8a4b6079c3.txt, Table 2 row RMSNorm) adds
its eps to ``|x|^2``; the two agree with ``eps_paper = D * eps``.

Backward (proven equal to sympy.diff of the forward, D = 1..5; see ``derive/definitions/norms.py``):
with ``z = x r``, ``r = 1/sqrt(mean(x^2) + eps)``, ``a = gamma * g``,
``dx = r (a - z mean(a z))``, ``dgamma = sum_rows g z``, ``dbeta = sum_rows g`` (None
without beta); the Jacobian is ``J = diag(gamma) r (I - z z^T/D)`` (numerator layout).

Edge cases. The zero row gives y = beta and the largest Jacobian, ``diag(gamma)/sqrt(eps)``;
with eps = 0 it is 0/0 = NaN. Lipschitz constant: exactly ``max|gamma| / sqrt(eps)``
(PyTorch eps; ``max|gamma| sqrt(D) / sqrt(eps_paper)`` as Table 2 prints it), attained at
x = 0. Float64 rows with entries beyond 2^511 overflow the mean square (then y = beta),
and with eps = 0 rows whose entries all lie below 2^-537 underflow it to 0 (then NaN);
float32 and float16 input cannot reach either.

>>> import numpy as np
>>> from kernels import rmsnorm
>>> rmsnorm.forward(np.array([3.0, 4.0]), np.ones(2), eps=0.0)
array([0.84852814, 1.13137085])
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kernels import _rownorm
from kernels._generated import rmsnorm as _generated
from kernels._strict import bfloat16_kernel


def _prepare(x, gamma, beta, eps, strict_fp16) -> _rownorm.Prepared:
    return _rownorm.Prepared(x, gamma, beta, eps, 1, strict_fp16, "RMSNorm")


@bfloat16_kernel
def forward(
    x: ArrayLike,
    gamma: ArrayLike,
    beta: ArrayLike | None = None,
    eps: float = 1e-6,
    *,
    strict_fp16: bool = False,
) -> np.ndarray:
    """RMSNorm of each row of ``x``; same shape and dtype as ``x``."""
    return _rownorm.forward(_generated, _prepare(x, gamma, beta, eps, strict_fp16))


@bfloat16_kernel
def vjp(
    x: ArrayLike,
    g: ArrayLike,
    gamma: ArrayLike,
    beta: ArrayLike | None = None,
    eps: float = 1e-6,
    *,
    strict_fp16: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(dx, dgamma, dbeta)`` for the upstream gradient ``g``; dbeta is None without beta."""
    return _rownorm.vjp(_generated, _prepare(x, gamma, beta, eps, strict_fp16), g)


@bfloat16_kernel
def jacobian(
    x: ArrayLike,
    gamma: ArrayLike,
    beta: ArrayLike | None = None,
    eps: float = 1e-6,
    *,
    strict_fp16: bool = False,
) -> np.ndarray:
    """``dy/dx`` of one sample ``x`` of shape (D,): a (D, D) array, numerator layout."""
    return _rownorm.jacobian(_generated, _prepare(x, gamma, beta, eps, strict_fp16))
