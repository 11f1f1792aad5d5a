"""The forward definitions, written once in SymPy: the single source of truth.

Every other artefact of liptable -- the derivative, the claim checks, the emitted Numba
kernels, the mpmath references, the interval enclosures of the proofs and the LaTeX of the
report -- is computed from the expressions in :data:`ELEMENTWISE`.

Constants are exact rationals (``1.702 = 851/500``, ``0.044715 = 8943/200000``) so that
symbolic identities are decided exactly; the emitter rounds them once, per dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import sympy as sp

#: The input variable of every elementwise module.
x = sp.Symbol("x", real=True)

#: Logistic sigmoid, written out so that no definition depends on another's code.
SIGMOID = 1 / (1 + sp.exp(-x))

#: ReLU with the convention relu'(0) = 0: ``sympy.diff`` keeps the branch whose condition
#: holds, so the derivative is the indicator ``1(x > 0)`` (Table 2; PyTorch and JAX). The
#: FFN of :mod:`derive.definitions.rows` uses this same expression.
RELU = sp.Piecewise((x, x > 0), (0, True))

#: The slope of the paper's sigmoid approximation of GeLU (Table 2, GeLU row).
GELU_SIGMOID_SLOPE = sp.Rational(1702, 1000)

#: The cubic coefficient of the tanh approximation of GeLU (Hendrycks & Gimpel).
GELU_TANH_CUBIC = sp.Rational(44715, 1000000)


@dataclass(frozen=True)
class Elementwise:
    """An elementwise module ``y_i = f(x_i)``.

    ``name`` is the kernel submodule (``kernels.<name>``); ``variant`` selects among several
    forms of one module (GeLU's ``approximate``), empty otherwise.
    """

    name: str
    variant: str
    forward: sp.Expr
    title: str
    source: str
    kink: str

    @property
    def key(self) -> str:
        """A unique identifier: ``name`` or ``name_variant``."""
        return f"{self.name}_{self.variant}" if self.variant else self.name

    @cached_property
    def derivative(self) -> sp.Expr:
        """``f'(x)`` by ``sympy.diff``; a Piecewise keeps the branch whose condition holds."""
        return sp.diff(self.forward, x)

    @cached_property
    def second_derivative(self) -> sp.Expr:
        """``f''(x)``: used for condition numbers of the derivative and for critical points."""
        return sp.diff(self.derivative, x)


ELEMENTWISE: tuple[Elementwise, ...] = (
    Elementwise(
        name="sigmoid",
        variant="",
        forward=SIGMOID,
        title="Sigmoid",
        source="001_76ce3a8a4b6079c3.txt, Table 2, row Sigmoid",
        kink="smooth everywhere",
    ),
    Elementwise(
        name="relu",
        variant="",
        forward=RELU,
        title="ReLU",
        source="001_76ce3a8a4b6079c3.txt, Table 2, row ReLU",
        kink=(
            "not differentiable at 0 (subdifferential [0, 1]); liptable uses relu'(0) = 0, "
            "the indicator 1(x > 0) printed in Table 2 and used by PyTorch and JAX"
        ),
    ),
    Elementwise(
        name="swish",
        variant="",
        forward=x * SIGMOID,
        title="Swish (SiLU)",
        source="001_76ce3a8a4b6079c3.txt, Table 2, row Swish",
        kink="smooth everywhere",
    ),
    Elementwise(
        name="gelu",
        variant="none",
        forward=x / 2 * (1 + sp.erf(x / sp.sqrt(2))),
        title="GeLU, exact: x Phi(x)",
        source="001_76ce3a8a4b6079c3.txt, Table 2, row GeLU (x P(X < x), X ~ N(0, 1))",
        kink="smooth everywhere",
    ),
    Elementwise(
        name="gelu",
        variant="tanh",
        forward=x / 2 * (1 + sp.tanh(sp.sqrt(2 / sp.pi) * (x + GELU_TANH_CUBIC * x**3))),
        title="GeLU, tanh approximation",
        source="Hendrycks & Gimpel's tanh approximation (PyTorch approximate='tanh'); "
        "not printed in 001, checked against the exact row",
        kink="smooth everywhere",
    ),
    Elementwise(
        name="gelu",
        variant="sigmoid",
        forward=x / (1 + sp.exp(-GELU_SIGMOID_SLOPE * x)),
        title="GeLU, sigmoid approximation x sigma(1.702 x)",
        source="001_76ce3a8a4b6079c3.txt, Table 2, row GeLU (the printed approximation)",
        kink="smooth everywhere",
    ),
)


def elementwise(key: str) -> Elementwise:
    """The catalog entry with the given :attr:`Elementwise.key`."""
    for module in ELEMENTWISE:
        if module.key == key:
            return module
    known = ", ".join(m.key for m in ELEMENTWISE)
    raise KeyError(f"no elementwise module {key!r}; known: {known}")
