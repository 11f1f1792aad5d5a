"""Sigmoid, ``y_i = 1 / (1 + exp(-x_i))``, elementwise on any shape.

Source: 001_76ce3a8a4b6079c3.txt, Table 2, row Sigmoid. Derivative
``sigma'(x) = sigma(x) (1 - sigma(x))``, evaluated as ``exp(-|x|) / (1 + exp(-|x|))^2`` so
that neither the overflow of ``exp(-x)`` for x << 0 nor the cancellation of ``1 - sigma``
for x >> 0 costs accuracy. Smooth everywhere; ``sup |sigma'| = 1/4``, attained at x = 0.
NaN gives NaN; +-inf gives the limits (forward 0 and 1, derivative 0). The Jacobian of one
sample (D,) is ``diag(sigma'(x))`` (numerator layout; diagonal, so the layouts agree).

float32, float16 and bfloat16 input is evaluated in float64 and rounded once at the end;
``strict_fp16=True`` rounds every intermediate of a float16 (bfloat16) evaluation to half
precision (bfloat16) instead, as naive arithmetic in that format would.

>>> import numpy as np
>>> from kernels import sigmoid
>>> sigmoid.forward(np.array([0.0, -np.inf, np.inf]))
array([0.5, 0. , 1. ])
>>> sigmoid.derivative(np.array([0.0], dtype=np.float32))
array([0.25], dtype=float32)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kernels import _elementwise
from kernels._generated import sigmoid as _generated


def forward(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``sigma(x)`` elementwise; same shape and dtype as ``x``."""
    return _elementwise.unary(_generated, "forward", x, strict_fp16)


def derivative(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``sigma'(x) = sigma(x)(1 - sigma(x))`` elementwise."""
    return _elementwise.unary(_generated, "derivative", x, strict_fp16)


def vjp(x: ArrayLike, g: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """The input gradient ``g * sigma'(x)`` for the upstream gradient ``g`` (shape of x)."""
    return _elementwise.vjp(_generated, x, g, strict_fp16)


def jacobian(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``diag(sigma'(x))`` for one sample of shape (D,), numerator layout."""
    return _elementwise.jacobian(_generated, x, strict_fp16)
