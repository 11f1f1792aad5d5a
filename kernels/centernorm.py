"""CenterNorm over the last axis of ``x`` (shape (..., D)), D >= 2.

``y = D/(D-1) * gamma * (x - mean(x)) + beta`` (001_76ce3a8a4b6079c3.txt, Table 2 row
CenterNorm, after Qi et al. 2023): centering without rescaling, a linear map of x.

Backward (proven equal to sympy.diff of the forward, D = 2..5; see ``derive/definitions/norms.py``):
with ``c = D/(D-1)``, ``a = gamma * g``: ``dx = c (a - mean(a))``,
``dgamma = sum_rows g c (x - mean)``, ``dbeta = sum_rows g``; the Jacobian is
``J = c diag(gamma) (I - 11^T/D)`` (numerator layout), the same at every x.

D = 1 is rejected (ValueError): D/(D-1) is undefined. The Lipschitz constant is
``c sigma_max(diag(gamma)(I - 11^T/D)) <= c max|gamma|`` (Table 2's value), with equality
exactly when the largest |gamma_i| occurs at least twice.

>>> import numpy as np
>>> from kernels import centernorm
>>> centernorm.forward(np.array([1.0, 3.0]), np.ones(2), np.zeros(2))
array([-2.,  2.])
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kernels import _rownorm
from kernels._generated import centernorm as _generated
from kernels._strict import bfloat16_kernel


def _prepare(x, gamma, beta, strict_fp16) -> _rownorm.Prepared:
    return _rownorm.Prepared(x, gamma, beta, 0.0, 2, strict_fp16, "CenterNorm")


@bfloat16_kernel
def forward(
    x: ArrayLike, gamma: ArrayLike, beta: ArrayLike, *, strict_fp16: bool = False
) -> np.ndarray:
    """CenterNorm of each row of ``x``; same shape and dtype as ``x``."""
    return _rownorm.forward(_generated, _prepare(x, gamma, beta, strict_fp16))


@bfloat16_kernel
def vjp(
    x: ArrayLike, g: ArrayLike, gamma: ArrayLike, beta: ArrayLike, *, strict_fp16: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dx, dgamma, dbeta)`` for the upstream gradient ``g`` (shape of ``x``)."""
    return _rownorm.vjp(_generated, _prepare(x, gamma, beta, strict_fp16), g)


@bfloat16_kernel
def jacobian(
    x: ArrayLike, gamma: ArrayLike, beta: ArrayLike, *, strict_fp16: bool = False
) -> np.ndarray:
    """``dy/dx`` of one sample ``x`` of shape (D,): a (D, D) array, numerator layout."""
    return _rownorm.jacobian(_generated, _prepare(x, gamma, beta, strict_fp16))
