"""GeLU, elementwise on any shape, in the three forms users meet.

``approximate="none"`` (default, PyTorch's): ``x Phi(x) = x/2 (1 + erf(x / sqrt 2))``,
evaluated as ``x erfc(-x / sqrt 2) / 2`` to keep full accuracy in the left tail.
``approximate="tanh"`` (PyTorch's ``"tanh"``): ``x/2 (1 + tanh(u))``,
``u = sqrt(2/pi)(x + 0.044715 x^3)``, evaluated as ``x sigma(2u)`` (``1 + tanh u`` cancels
for x << 0); beyond |x| > 2^32 the derivative returns its limits 0 and 1 (its formula would
evaluate ``0 * inf`` there).
``approximate="sigmoid"``: ``x sigma(1.702 x)``, the approximation printed in
001_76ce3a8a4b6079c3.txt, Table 2, row GeLU.

Derivatives are ``sympy.diff`` of these definitions. ``sup |gelu'|`` is
``1/2 + erf(1)/2 + exp(-1)/sqrt(pi) ~ 1.1289`` at x = sqrt 2 (exact form), ~1.1289 for
"tanh", and ~1.0998 for "sigmoid" (Swish's constant: ``gelu_sigmoid'(x) = swish'(1.702 x)``);
all proven in ``proofs``. NaN gives NaN; +-inf gives the limits. The Jacobian of one sample
(D,) is ``diag(gelu'(x))`` (numerator layout; diagonal).

>>> import numpy as np
>>> from kernels import gelu
>>> gelu.forward(np.array([0.0, np.inf, -np.inf]))
array([ 0., inf,  0.])
>>> gelu.derivative(np.array([0.0]), approximate="tanh")
array([0.5])
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kernels import _elementwise
from kernels._generated import gelu_none, gelu_sigmoid, gelu_tanh
from kernels._validate import choice

#: ``approximate`` -> the generated loops of that form.
FORMS = {"none": gelu_none, "tanh": gelu_tanh, "sigmoid": gelu_sigmoid}


def _form(approximate: object):
    return FORMS[choice(approximate, "approximate", tuple(FORMS))]


def forward(x: ArrayLike, approximate: str = "none", *, strict_fp16: bool = False) -> np.ndarray:
    """GeLU of ``x`` elementwise in the chosen form; same shape and dtype as ``x``."""
    return _elementwise.unary(_form(approximate), "forward", x, strict_fp16)


def derivative(x: ArrayLike, approximate: str = "none", *, strict_fp16: bool = False) -> np.ndarray:
    """The derivative of the chosen form, elementwise."""
    return _elementwise.unary(_form(approximate), "derivative", x, strict_fp16)


def vjp(
    x: ArrayLike, g: ArrayLike, approximate: str = "none", *, strict_fp16: bool = False
) -> np.ndarray:
    """The input gradient ``g * gelu'(x)`` for the upstream gradient ``g``."""
    return _elementwise.vjp(_form(approximate), x, g, strict_fp16)


def jacobian(x: ArrayLike, approximate: str = "none", *, strict_fp16: bool = False) -> np.ndarray:
    """``diag(gelu'(x))`` for one sample of shape (D,), numerator layout."""
    return _elementwise.jacobian(_form(approximate), x, strict_fp16)
