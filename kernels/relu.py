"""ReLU, ``y_i = max(0, x_i)``, elementwise on any shape.

Source: 001_76ce3a8a4b6079c3.txt, Table 2, row ReLU, which prints the derivative as the
indicator ``1(x_i > 0)``. ReLU is not differentiable at 0 (its subdifferential there is
[0, 1]); liptable's convention is ``relu'(0) = 0``, the printed indicator, as in PyTorch
and JAX. ``relu(-0.0)`` is ``0.0``. The Lipschitz constant is 1 (attained on any pair of
positive inputs). NaN gives NaN. The Jacobian of one sample (D,) is ``diag(1(x > 0))``
(numerator layout ``J[i, j] = dy_i/dx_j``; diagonal, so the paper's layout is the same).

>>> import numpy as np
>>> from kernels import relu
>>> relu.forward(np.array([-1.5, 0.0, 2.0]))
array([0., 0., 2.])
>>> relu.derivative(np.array([-1.0, 0.0, 1.0]))
array([0., 0., 1.])
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kernels import _elementwise
from kernels._generated import relu as _generated


def forward(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``max(0, x)`` elementwise; same shape and dtype as ``x``."""
    return _elementwise.unary(_generated, "forward", x, strict_fp16)


def derivative(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``1(x > 0)`` elementwise (0 at the kink x = 0)."""
    return _elementwise.unary(_generated, "derivative", x, strict_fp16)


def vjp(x: ArrayLike, g: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """The input gradient ``g * 1(x > 0)`` (IEEE: ``inf * 0`` is NaN, as in PyTorch)."""
    return _elementwise.vjp(_generated, x, g, strict_fp16)


def jacobian(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``diag(1(x > 0))`` for one sample of shape (D,), numerator layout."""
    return _elementwise.jacobian(_generated, x, strict_fp16)
