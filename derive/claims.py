"""The sources' statements about the activation modules, as data.

Each :class:`Claim` records what a source prints -- its LaTeX as printed and a formal
SymPy statement of it -- and never what liptable thinks of it: verdicts are computed by
:mod:`derive.check` from the definitions in :mod:`derive.modules` and the proofs.

Ids follow SPEC: ``<module>.<kind>`` for the rows of Table 2 of 001_76ce3a8a4b6079c3.txt;
statements of the other seeds get ``<module>.<kind>_<seed>``.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from derive.modules import x

KINDS = ("definition", "jacobian", "lipschitz", "equation", "value")

TABLE2 = "001_76ce3a8a4b6079c3.txt, Table 2, row {}"


def _sigma(z: sp.Expr) -> sp.Expr:
    """The logistic function as the sources write it, 1 / (1 + exp(-z))."""
    return 1 / (1 + sp.exp(-z))


def _normal_cdf(z: sp.Expr) -> sp.Expr:
    """P(X < z) for X ~ N(0, 1), written through erf."""
    return (1 + sp.erf(z / sp.sqrt(2))) / 2


@dataclass(frozen=True)
class Claim:
    """One printed statement.

    ``key`` names the catalog entry it is about (:func:`derive.modules.elementwise`).
    ``formal`` is the printed expression: the forward for a definition, ``dy/dx`` for a
    jacobian or equation, the constant for a Lipschitz claim. ``approximate`` marks a
    printed "≈"; ``exact_for`` names the catalog entry the printed expression is meant to
    be exactly (GeLU's printed sigmoid form), checked as an identity of its own.
    ``printed_value`` is a printed constant as the source writes it.
    """

    id: str
    key: str
    kind: str
    source: str
    statement_latex: str
    formal: sp.Expr
    approximate: bool = False
    exact_for: str | None = None
    printed_value: str | None = None
    notes: str = ""

    @property
    def module(self) -> str:
        return self.id.split(".")[0]


CLAIMS: tuple[Claim, ...] = (
    Claim(
        id="sigmoid.definition",
        key="sigmoid",
        kind="definition",
        source=TABLE2.format("Sigmoid"),
        statement_latex=r"y_i = \frac{1}{1 + \exp(-x_i)}",
        formal=_sigma(x),
    ),
    Claim(
        id="sigmoid.jacobian",
        key="sigmoid",
        kind="jacobian",
        source=TABLE2.format("Sigmoid"),
        statement_latex=r"\frac{\partial y_i}{\partial x_i} = \sigma(x_i)(1 - \sigma(x_i))",
        formal=_sigma(x) * (1 - _sigma(x)),
        notes="Elementwise: the Jacobian is diag(sigma'(x)); the row prints its diagonal.",
    ),
    Claim(
        id="sigmoid.lipschitz",
        key="sigmoid",
        kind="lipschitz",
        source=TABLE2.format("Sigmoid"),
        statement_latex=r"\frac{1}{4}",
        formal=sp.Rational(1, 4),
        printed_value="1/4",
    ),
    Claim(
        id="relu.definition",
        key="relu",
        kind="definition",
        source=TABLE2.format("ReLU"),
        statement_latex=r"y_i = \max(0, x_i)",
        formal=sp.Max(0, x),
    ),
    Claim(
        id="relu.jacobian",
        key="relu",
        kind="jacobian",
        source=TABLE2.format("ReLU"),
        statement_latex=r"\frac{\partial y_i}{\partial x_i} = 1(x_i > 0)",
        formal=sp.Piecewise((1, x > 0), (0, True)),
        notes=(
            "ReLU is not differentiable at 0; the printed indicator fixes relu'(0) = 0, "
            "a valid element of the subdifferential [0, 1] and the convention of PyTorch "
            "and JAX."
        ),
    ),
    Claim(
        id="relu.lipschitz",
        key="relu",
        kind="lipschitz",
        source=TABLE2.format("ReLU"),
        statement_latex=r"1.0",
        formal=sp.Integer(1),
        printed_value="1.0",
    ),
    Claim(
        id="gelu.definition",
        key="gelu_none",
        kind="definition",
        source=TABLE2.format("GeLU"),
        statement_latex=r"y_i = x_i P(x < x_i)",
        formal=x * _normal_cdf(x),
        notes=(
            "P(x < x_i) read as the standard normal CDF Phi(x_i), as in Hendrycks & "
            "Gimpel. The row continues '≈ x_i sigma(1.702 x_i)': see gelu.approximation."
        ),
    ),
    Claim(
        id="gelu.approximation",
        key="gelu_none",
        kind="definition",
        source=TABLE2.format("GeLU"),
        statement_latex=r"x_i P(x < x_i) \approx x_i \sigma(1.702 x_i)",
        formal=x * _sigma(sp.Rational(1702, 1000) * x),
        approximate=True,
        exact_for="gelu_sigmoid",
        notes="The printed approximation; liptable's kernels offer it as approximate='sigmoid'.",
    ),
    Claim(
        id="gelu.jacobian",
        key="gelu_none",
        kind="jacobian",
        source=TABLE2.format("GeLU"),
        statement_latex=(
            r"\frac{\partial y_i}{\partial x_i} \approx \sigma(1.702x_i) + "
            r"1.702x_i \cdot \sigma(1.702x_i)(1 - \sigma(1.702x_i))"
        ),
        formal=_sigma(sp.Rational(1702, 1000) * x)
        + sp.Rational(1702, 1000)
        * x
        * _sigma(sp.Rational(1702, 1000) * x)
        * (1 - _sigma(sp.Rational(1702, 1000) * x)),
        approximate=True,
        exact_for="gelu_sigmoid",
        notes=(
            "Printed with '≈': compared with the derivative of the exact GeLU x Phi(x); it is "
            "also checked to be exactly the derivative of the printed approximation."
        ),
    ),
    Claim(
        id="gelu.lipschitz",
        key="gelu_none",
        kind="lipschitz",
        source=TABLE2.format("GeLU"),
        statement_latex=r"\approx 1.1",
        formal=sp.Rational(11, 10),
        approximate=True,
        printed_value="1.1",
        notes="Compared with the exact GeLU x Phi(x), the row's definition.",
    ),
    Claim(
        id="swish.definition",
        key="swish",
        kind="definition",
        source=TABLE2.format("Swish"),
        statement_latex=r"y_i = x_i \sigma(x_i)",
        formal=x * _sigma(x),
    ),
    Claim(
        id="swish.jacobian",
        key="swish",
        kind="jacobian",
        source=TABLE2.format("Swish"),
        statement_latex=(
            r"\frac{\partial y_i}{\partial x_i} = \sigma(x_i) + "
            r"x_i \cdot \sigma(x_i)(1 - \sigma(x_i))"
        ),
        formal=_sigma(x) + x * _sigma(x) * (1 - _sigma(x)),
    ),
    Claim(
        id="swish.lipschitz",
        key="swish",
        kind="lipschitz",
        source=TABLE2.format("Swish"),
        statement_latex=r"\approx 1.1",
        formal=sp.Rational(11, 10),
        approximate=True,
        printed_value="1.1",
    ),
    Claim(
        id="sigmoid.equation_000",
        key="sigmoid",
        kind="equation",
        source="000_fd3535166428b448.txt, Batch Normalization slides: 'g'(x) = g(x)(1 - g(x))'",
        statement_latex=r"g'(x) = g(x)(1 - g(x))",
        formal=_sigma(x) * (1 - _sigma(x)),
    ),
    Claim(
        id="sigmoid.equation_003",
        key="sigmoid",
        kind="equation",
        source="003_54d3154625e0c3ca.txt, activation derivatives",
        statement_latex=r"\sigma'(z) = \sigma(z)(1 - \sigma(z))",
        formal=_sigma(x) * (1 - _sigma(x)),
    ),
    Claim(
        id="relu.equation_003",
        key="relu",
        kind="equation",
        source="003_54d3154625e0c3ca.txt, activation derivatives",
        statement_latex=r"(\mathrm{ReLU})' = \begin{cases} 1 & z > 0 \\ 0 & z \leq 0 \end{cases}",
        formal=sp.Piecewise((1, x > 0), (0, True)),
        notes="Same convention at the kink as Table 2: ReLU'(0) = 0.",
    ),
)


def claim(claim_id: str) -> Claim:
    """The claim with the given id."""
    for c in CLAIMS:
        if c.id == claim_id:
            return c
    raise KeyError(f"no claim {claim_id!r}")
