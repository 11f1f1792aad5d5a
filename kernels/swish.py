"""Swish (SiLU), ``y_i = x_i sigma(x_i)``, elementwise on any shape.

Source: 001_76ce3a8a4b6079c3.txt, Table 2, row Swish. Derivative
``sigma(x) + x sigma(x)(1 - sigma(x))``, evaluated as one fraction per sign of x
(``(1 + t + x t) / (1 + t)^2`` with ``t = exp(-x)`` for x >= 0, and
``t (1 + t + x) / (1 + t)^2`` with ``t = exp(x)`` for x < 0): no overflow, no ``1 - sigma``
cancellation. Smooth everywhere; ``sup |swish'| ~ 1.0998`` at the root x* ~ 2.3994 of
``x tanh(x/2) = 2`` (proven in ``proofs``). NaN gives NaN; +-inf gives the limits. The
Jacobian of one sample (D,) is ``diag(swish'(x))`` (numerator layout; diagonal).

>>> import numpy as np
>>> from kernels import swish
>>> swish.forward(np.array([0.0, np.inf, -np.inf]))
array([ 0., inf,  0.])
>>> swish.derivative(np.array([0.0]))
array([0.5])
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kernels import _elementwise
from kernels._generated import swish as _generated


def forward(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``x sigma(x)`` elementwise; same shape and dtype as ``x``."""
    return _elementwise.unary(_generated, "forward", x, strict_fp16)


def derivative(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``sigma(x)(1 + x (1 - sigma(x)))`` elementwise."""
    return _elementwise.unary(_generated, "derivative", x, strict_fp16)


def vjp(x: ArrayLike, g: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """The input gradient ``g * swish'(x)`` for the upstream gradient ``g``."""
    return _elementwise.vjp(_generated, x, g, strict_fp16)


def jacobian(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``diag(swish'(x))`` for one sample of shape (D,), numerator layout."""
    return _elementwise.jacobian(_generated, x, strict_fp16)
