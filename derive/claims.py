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
    formal: sp.Basic | None
    approximate: bool = False
    exact_for: str | None = None
    printed_value: str | None = None
    notes: str = ""

    @property
    def module(self) -> str:
        return self.id.split(".")[0]


ACTIVATION_CLAIMS: tuple[Claim, ...] = (
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


# --- normalizations ------------------------------------------------------------------------
#
# ``formal`` of a normalization claim is the printed constant in the symbols ``D``,
# ``epsilon_p`` (the paper's eps), ``gamma_max = max_i |gamma_i|`` and ``gamma_norm =
# sqrt(sum_i gamma_i^2)``; printed matrices depend on D and are built at each concrete D
# by ``proofs.norms.printed_jacobian`` / ``derive.norms.paper_forward`` (formal is None).

_D = sp.Symbol("D", positive=True, integer=True)
_EPS_P = sp.Symbol("epsilon_p", positive=True)
_GAMMA_MAX = sp.Symbol("gamma_max", nonnegative=True)
_GAMMA_NORM = sp.Symbol("gamma_norm", nonnegative=True)
_SIGMA2 = sp.Symbol("sigma2", nonnegative=True)
_EPS_BN = sp.Symbol("epsilon_bn", positive=True)
_A2 = "001_76ce3a8a4b6079c3.txt, Appendix A.2, {}"

_LN_FORWARD = (
    r"y = (I - \tfrac{1}{D}\mathbf{1}\mathbf{1}^\top)x,\ z = \sqrt{D}\frac{y}"
    r"{\sqrt{\|y\|_2^2 + \epsilon}},\ \mathrm{LN}(x) = \gamma \odot z + \beta"
)
_LN_JACOBIAN = (
    r"\frac{\partial \mathrm{LN}(x)}{\partial x} = \frac{\sqrt{D}}{\sqrt{\|y\|_2^2 + \epsilon}}"
    r"(I - \tfrac{1}{D}\mathbf{1}\mathbf{1}^\top)(I - \frac{y y^\top}{\|y\|_2^2 + \epsilon})"
    r"\mathrm{diag}(\gamma)"
)
_RMS_JACOBIAN = (
    r"\frac{\partial \mathrm{RMSN}(x)}{\partial x} = \frac{\sqrt{D}}{\sqrt{\|x\|_2^2 + \epsilon}}"
    r"(I - \frac{x x^\top}{\|x\|_2^2 + \epsilon})\mathrm{diag}(\gamma)"
)
_RANKING = (
    r"\frac{D}{D-1}\max_D|\gamma_D| < \sqrt{\sum_{i=1}^O \gamma_i^2} < "
    r"\max_D \frac{|\gamma_D|}{\sqrt{\sigma_D^2 + \epsilon}} < "
    r"\frac{\max_D|\gamma_D|}{\epsilon^{1/2}}\sqrt{D} \approx "
    r"\frac{\max_D|\gamma_D|}{\epsilon^{1/2}}\sqrt{D}"
)


NORM_CLAIMS: tuple[Claim, ...] = (
    Claim(
        id="layernorm.definition",
        key="layernorm",
        kind="definition",
        source=TABLE2.format("LayerNorm") + "; Eq. 18",
        statement_latex=_LN_FORWARD,
        formal=None,
        notes="Checked against PyTorch's LayerNorm (eps added to the variance).",
    ),
    Claim(
        id="layernorm.jacobian",
        key="layernorm",
        kind="jacobian",
        source=TABLE2.format("LayerNorm") + "; Appendix A.2",
        statement_latex=_LN_JACOBIAN,
        formal=None,
        notes=(
            "Printed in the paper's denominator layout, with its eps. diag(gamma) on the "
            "right is right for that layout (numerator layout puts it on the left), and the "
            "two projections commute (y is orthogonal to 1), so their order is immaterial."
        ),
    ),
    Claim(
        id="layernorm.eq19",
        key="layernorm",
        kind="equation",
        source="001_76ce3a8a4b6079c3.txt, Eq. 19",
        statement_latex=(
            r"J_z(x) = \frac{\partial y}{\partial x}\frac{\partial z}{\partial y} = "
            r"\frac{\sqrt{D}}{\sqrt{\|y\|_2^2 + \epsilon}}(I - \tfrac{1}{D}\mathbf{1}"
            r"\mathbf{1}^\top)(I - \frac{y y^\top}{\|y\|_2^2 + \epsilon})"
        ),
        formal=None,
        notes=(
            "The chain rule is written in denominator-layout order (dy/dx first), "
            "consistent with the paper's convention."
        ),
    ),
    Claim(
        id="layernorm.lipschitz",
        key="layernorm",
        kind="lipschitz",
        source=TABLE2.format("LayerNorm") + "; Appendix A.2",
        statement_latex=r"\frac{\max_D |\gamma_D| \sqrt{D}}{\epsilon^{1/2}}",
        formal=_GAMMA_MAX * sp.sqrt(_D) / sp.sqrt(_EPS_P),
        printed_value="gamma_max*sqrt(D)/sqrt(epsilon_p)",
    ),
    Claim(
        id="layernorm.a2_bounds",
        key="layernorm",
        kind="equation",
        source=_A2.format("LayerNorm"),
        statement_latex=(
            r"\frac{\sqrt{D}}{\sqrt{\|y\|_2^2+\epsilon}} \le \frac{\sqrt{D}}{\sqrt{\epsilon}},\ "
            r"\sigma_{\max}(\mathrm{diag}(\gamma)) = \max_D|\gamma_D|,\ "
            r"\sigma_{\max}(I - \tfrac{1}{d}\mathbf{1}\mathbf{1}^\top) \le 1,\ "
            r"\sigma_{\max}(I - \frac{y y^\top}{\|y\|_2^2+\epsilon}) \le 1"
        ),
        formal=None,
        notes="The 1/d in the third inequality is the paper's typo for 1/D.",
    ),
    Claim(
        id="rmsnorm.definition",
        key="rmsnorm",
        kind="definition",
        source=TABLE2.format("RMSNorm"),
        statement_latex=(
            r"\mathrm{RMSN}(x) = \gamma \odot \frac{\sqrt{D} x}"
            r"{\sqrt{\|x\|_2^2 + \epsilon}} + \beta"
        ),
        formal=None,
        notes="Checked against PyTorch's RMSNorm (eps added to the mean of squares).",
    ),
    Claim(
        id="rmsnorm.jacobian",
        key="rmsnorm",
        kind="jacobian",
        source=TABLE2.format("RMSNorm") + "; Appendix A.2",
        statement_latex=_RMS_JACOBIAN,
        formal=None,
        notes="Printed in the paper's denominator layout, with its eps.",
    ),
    Claim(
        id="rmsnorm.lipschitz",
        key="rmsnorm",
        kind="lipschitz",
        source=TABLE2.format("RMSNorm") + "; Appendix A.2",
        statement_latex=r"\frac{\max_D |\gamma_D| \sqrt{D}}{\epsilon^{1/2}}",
        formal=_GAMMA_MAX * sp.sqrt(_D) / sp.sqrt(_EPS_P),
        printed_value="gamma_max*sqrt(D)/sqrt(epsilon_p)",
    ),
    Claim(
        id="centernorm.jacobian",
        key="centernorm",
        kind="jacobian",
        source=TABLE2.format("CenterNorm"),
        statement_latex=(
            r"\frac{\partial \mathrm{CN}(x)}{\partial x} = \frac{D}{D-1}"
            r"(I - \tfrac{1}{D}\mathbf{1}\mathbf{1}^\top)\mathrm{diag}(\gamma)"
        ),
        formal=None,
        notes="Printed in the paper's denominator layout; CenterNorm needs D >= 2.",
    ),
    Claim(
        id="centernorm.lipschitz",
        key="centernorm",
        kind="lipschitz",
        source=TABLE2.format("CenterNorm"),
        statement_latex=r"\frac{D}{D-1} \max_D |\gamma_D|",
        formal=_D / (_D - 1) * _GAMMA_MAX,
        printed_value="D*gamma_max/(D - 1)",
    ),
    Claim(
        id="weightnorm.jacobian",
        key="weightnorm",
        kind="jacobian",
        source=TABLE2.format("WeightNorm") + "; Appendix A.2",
        statement_latex=(
            r"\frac{\partial \mathrm{WN}(x)}{\partial x} = W,\ W(i,:) = \gamma_i "
            r"\frac{v_i}{\sqrt{\|v_i\|_2^2 + \epsilon}}"
        ),
        formal=None,
    ),
    Claim(
        id="weightnorm.lipschitz",
        key="weightnorm",
        kind="lipschitz",
        source=TABLE2.format("WeightNorm") + "; Appendix A.2",
        statement_latex=r"\sigma_{\max}(W) \le \sqrt{\sum_{i=1}^O \gamma_i^2}",
        formal=_GAMMA_NORM,
        printed_value="gamma_norm",
    ),
    Claim(
        id="weightnorm.frobenius",
        key="weightnorm",
        kind="equation",
        source=_A2.format("WeightNorm"),
        statement_latex=(
            r"\|W\|_F = \left(\sum_{i=1}^O\sum_{j=1}^D |W_{ij}|^2\right)^{1/2} = "
            r"\sqrt{\sum_i^O \gamma_i^2}"
        ),
        formal=_GAMMA_NORM,
    ),
    Claim(
        id="weightnorm.equality",
        key="weightnorm",
        kind="equation",
        source=_A2.format("WeightNorm"),
        statement_latex=(
            r"\text{equality holds iff } W \text{ is rank one or zero, i.e. all } v_i = v_j"
        ),
        formal=None,
    ),
    Claim(
        id="normalization.eq51",
        key="normalization",
        kind="equation",
        source="001_76ce3a8a4b6079c3.txt, Eq. 51",
        statement_latex=(
            r"\text{CenterNorm} > \text{WeightNorm} > \text{BatchNorm} > \text{RMSNorm} "
            r"\approx \text{LayerNorm}"
        ),
        formal=None,
        notes=(
            "A ranking by Lipschitz stability which the paper reads off Eq. 52's constants "
            "(larger stability = smaller constant); decided by them."
        ),
    ),
    Claim(
        id="normalization.eq52",
        key="normalization",
        kind="equation",
        source="001_76ce3a8a4b6079c3.txt, Eq. 52",
        statement_latex=_RANKING,
        formal=sp.Tuple(
            _D / (_D - 1) * _GAMMA_MAX,
            _GAMMA_NORM,
            _GAMMA_MAX / sp.sqrt(_SIGMA2 + _EPS_BN),
            _GAMMA_MAX * sp.sqrt(_D) / sp.sqrt(_EPS_P),
            _GAMMA_MAX * sp.sqrt(_D) / sp.sqrt(_EPS_P),
        ),
    ),
)

#: Every claim: the activation rows, then the normalizations.
CLAIMS: tuple[Claim, ...] = ACTIVATION_CLAIMS + NORM_CLAIMS


def claim(claim_id: str) -> Claim:
    """The claim with the given id."""
    for c in CLAIMS:
        if c.id == claim_id:
            return c
    raise KeyError(f"no claim {claim_id!r}")
