"""The sources' statements about the activation modules, as data.

Each :class:`Claim` records what a source prints -- its LaTeX as printed and a formal
SymPy statement of it -- and never what liptable thinks of it: verdicts are computed by
:mod:`derive.check.activations` from the definitions in :mod:`derive.definitions.activations` and
the proofs.

Ids follow SPEC: ``<module>.<kind>`` for the rows of Table 2 of 001_76ce3a8a4b6079c3.txt;
statements of the other seeds get ``<module>.<kind>_<seed>``.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from derive.definitions import batchnorm as bn
from derive.definitions import initialization as ini
from derive.definitions import updates as up
from derive.definitions.activations import x

KINDS = ("definition", "jacobian", "lipschitz", "equation", "value")

TABLE2 = "001_76ce3a8a4b6079c3.txt, Table 2, row {}"

#: One rule for the absolute-value bars the extraction of Table 2 lost: in five Lipschitz
#: cells a pair of spaces stands where ``|...|`` stood (``\max_D  \gamma_D``,
#: ``\max_D( \nu_D )``). Every such cell is read with the bars restored, and says so.
LOST_BARS = (
    "The extracted cell reads `{printed}`: the absolute-value bars were lost in extraction "
    "(spaces stand where they were), as in every Table 2 cell with max_D over gamma_D or "
    "nu_D (LayerNorm, BatchNorm, RMSNorm, CenterNorm, Weighted Residual). liptable restores "
    "the bars in all five and checks the statement with them."
)


def _sigma(z: sp.Expr) -> sp.Expr:
    """The logistic function as the sources write it, 1 / (1 + exp(-z))."""
    return 1 / (1 + sp.exp(-z))


def _normal_cdf(z: sp.Expr) -> sp.Expr:
    """P(X < z) for X ~ N(0, 1), written through erf."""
    return (1 + sp.erf(z / sp.sqrt(2))) / 2


@dataclass(frozen=True)
class Claim:
    """One printed statement.

    ``key`` names the catalog entry it is about
    (:func:`derive.definitions.activations.elementwise`).
    ``formal`` is the printed expression: the forward for a definition, ``dy/dx`` for a
    jacobian or equation, the constant for a Lipschitz claim. ``approximate`` marks a
    printed "≈"; ``exact_for`` names the catalog entry the printed expression is meant to
    be exactly (GeLU's printed sigmoid form), checked as an identity of its own.
    ``printed_value`` is a printed constant as the source writes it. ``intended`` is the
    evident intent of a formula the extraction garbled or the source misprinted.
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
    intended: sp.Basic | None = None

    @property
    def module(self) -> str:
        return self.id.split(".")[0]


def _claim(claim_id: str, kind: str, source: str, latex: str, formal, **extra) -> Claim:
    """A claim whose key is its id's first part (``"adaptive.sparse_004"``: ``adaptive``)."""
    return Claim(
        id=claim_id,
        key=claim_id.split(".")[0],
        kind=kind,
        source=source,
        statement_latex=latex,
        formal=formal,
        **extra,
    )


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
# by ``proofs.norms.printed_jacobian`` / ``derive.definitions.norms.paper_forward`` (formal is
# None).

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

_LN000 = "000_fd3535166428b448.txt, {}"

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
        notes=LOST_BARS.format(printed=r"\max_D  \gamma_D  \sqrt{D}"),
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
        id="layernorm.a2_centered",
        key="layernorm",
        kind="equation",
        source=_A2.format("LayerNorm and RMSNorm"),
        statement_latex=(
            r"y = (I - \tfrac{1}{D}\mathbf{1}\mathbf{1}^\top) x \Rightarrow "
            r"\|y\|_2^2 \le \|x\|_2^2"
        ),
        formal=None,
    ),
    Claim(
        id="layernorm.algorithm_000",
        key="layernorm",
        kind="definition",
        source=_LN000.format("Algorithm (Layer Normalization)"),
        statement_latex=(
            r"\mu = \frac{1}{N} \sum_{i=1}^N a^i,\ \sigma^2 = \frac{1}{N} \sum_{i=1}^N "
            r"(a^i - \mu)^2,\ \hat{a}^i = \frac{a^i - \mu}{\sqrt{\sigma^2 + \epsilon}}"
        ),
        formal=None,
        notes="The statistics are over the N neurons of a layer, for each sample: entry b of "
        "one sample's normalized activations, compared with the kernels' LayerNorm over a row "
        "of N features (gains and biases per neuron).",
    ),
    Claim(
        id="layernorm.affine_000",
        key="layernorm",
        kind="definition",
        source=_LN000.format("Algorithm (Layer Normalization)"),
        statement_latex=(
            r"o^i = \operatorname{diag}(\gamma) \hat{a}^i + \operatorname{diag}(\beta) "
            r"\mathbb{I}_{d \times m},\ \gamma, \beta \in \mathbb{R}^d"
        ),
        formal=sp.Symbol("gamma") * sp.Symbol("ahat_b") + sp.Symbol("beta"),
        intended=sp.Symbol("gamma_b") * sp.Symbol("ahat_b") + sp.Symbol("beta_b"),
        notes="Read with one value per neuron and sample (d = 1), as 000's worked example "
        "has it: then gamma and beta are one gain and one bias shared by the N neurons. "
        "formal: output of neuron b; intended: a gain and a bias per neuron (Ba et al.'s "
        "LayerNorm, PyTorch's LayerNorm(N)).",
    ),
    Claim(
        id="layernorm.example_000",
        key="layernorm",
        kind="definition",
        source=_LN000.format("Differences between Batch Normalization and Layer Normalization"),
        statement_latex=(
            r"\mu = \frac{1}{3} \sum_{j=1}^{3} x_{j,k},\ \sigma^2 = \frac{1}{3} "
            r"\sum_{j=1}^{3} (x_{j,k} - \mu)^2,\ \hat{x}_{j,k} = \frac{x_{j,k} - \mu}"
            r"{\sigma}"
        ),
        formal=None,
        notes="The worked example (3 neurons, 3 samples each) writes no eps; the algorithm "
        "(layernorm.algorithm_000) has it.",
    ),
    Claim(
        id="layernorm.batch_size_000",
        key="layernorm",
        kind="equation",
        source=_LN000.format("The Advantages of Layer Normalization"),
        statement_latex=r"\text{Layer Normalization does not depend on the batch size}",
        formal=sp.Integer(0),
        notes="formal: the derivative of one sample's output by another sample's input.",
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
        notes=LOST_BARS.format(printed=r"\max_D  \gamma_D  \sqrt{D}"),
        printed_value="gamma_max*sqrt(D)/sqrt(epsilon_p)",
    ),
    Claim(
        id="centernorm.definition",
        key="centernorm",
        kind="definition",
        source=TABLE2.format("CenterNorm"),
        statement_latex=(
            r"y = (I - \tfrac{1}{D}\mathbf{1}\mathbf{1}^\top) x,\ \mathrm{CN}(x) = "
            r"\frac{D}{D-1} \gamma \odot y + \beta"
        ),
        formal=None,
        notes="CenterNorm (Qi et al.) has no PyTorch module; checked against the kernels' "
        "definition. It needs D >= 2.",
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
        notes=LOST_BARS.format(printed=r"\max_D  \gamma_D"),
        printed_value="D*gamma_max/(D - 1)",
    ),
    Claim(
        id="weightnorm.definition",
        key="weightnorm",
        kind="definition",
        source=TABLE2.format("WeightNorm"),
        statement_latex=(
            r"W(i, :) = \gamma_i \frac{v_i}{\sqrt{\|v_i\|_2^2 + \epsilon}},\ "
            r"\mathrm{WN}(x) = W x"
        ),
        formal=None,
        notes="The extracted cell lost the norm bars around v_i (it reads "
        "'\\ \\mathbf{v}_i\\ _2^2'); read as |v_i|_2^2, as its Jacobian cell is. The eps "
        "is the paper's: Salimans and Kingma (and PyTorch's weight_norm) have none, which is "
        "the kernels' default eps = 0.",
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

# --- BatchNorm -------------------------------------------------------------------------
#
# Printed formulas in the generic symbols of derive/definitions/batchnorm.py, for one feature: x_k
# and
# x_j (004: Z_ik and Z_ij; 001: X_{j,i} and X_{j,l}), mu, sigma (biased std) or sigma^2,
# the batch size M (004: K; 001: N) and delta_jk.

_XK, _XJ, _MU = sp.symbols("x_k x_j mu", real=True)
_SIG = sp.Symbol("sigma", positive=True)
_SIG2 = sp.Symbol("sigma^2", positive=True)
_M = sp.Symbol("M", positive=True, integer=True)
_DELTA = sp.Symbol("delta_jk", nonnegative=True)
_EPS = sp.Symbol("epsilon", nonnegative=True)
_ROOT = sp.sqrt(_SIG2 + _EPS)
_STD = _SIG + _EPS
_B004 = "004_a581282367ea7257.txt, {}"
_MAPPING_004 = (
    "Notation: Z is features x data points (our x transposed), Z_ik -> x_k, Z_ij -> x_j, "
    "K -> M, mu_i and sigma_i the feature's mean and biased std (B.49 uses 1/K)."
)


def _bn(id_: str, kind: str, source: str, latex: str, formal, notes: str = "", **extra):
    return Claim(
        id=f"batchnorm.{id_}",
        key="batchnorm",
        kind=kind,
        source=source,
        statement_latex=latex,
        formal=formal,
        notes=notes,
        **extra,
    )


BATCHNORM_CLAIMS: tuple[Claim, ...] = (
    _bn(
        "eq15",
        "definition",
        "001_76ce3a8a4b6079c3.txt, Eq. 15",
        r"\mu = \frac1N\sum_i X_{:,i},\ \sigma^2 = \frac1N\sum_i (X_{:,i}-\mu)^2,\ "
        r"\widehat X_{:,i} = (X_{:,i} - \mu) \oslash \sqrt{\sigma^2+\epsilon},\ "
        r"\mathrm{BN}(X_{:,i}) = \gamma \odot \widehat X_{:,i} + \beta",
        (_XK - _MU) / _ROOT,
        notes="001 lays X out as D x N (features x samples); ours is (N, D).",
    ),
    _bn(
        "eq16",
        "equation",
        "001_76ce3a8a4b6079c3.txt, Eq. 16",
        r"\frac{\partial \widehat X_{j,i}}{\partial X_{j,i}} = \frac{(1 - \frac1N)"
        r"\sqrt{\sigma_j^2+\epsilon} - \frac{(X_{j,i}-\mu_j)^2}{N\sqrt{\sigma_j^2+\epsilon}}}"
        r"{\sigma_j^2+\epsilon}",
        ((1 - 1 / _M) * _ROOT - (_XK - _MU) ** 2 / (_M * _ROOT)) / (_SIG2 + _EPS),
        notes="The diagonal entry (x_j = x_k, delta = 1); of xhat, before gamma.",
    ),
    _bn(
        "eq17",
        "equation",
        "001_76ce3a8a4b6079c3.txt, Eq. 17",
        r"\frac{\partial \widehat X_{j,i}}{\partial X_{j,l}} = \frac{(0 - \frac1N)"
        r"\sqrt{\sigma_j^2+\epsilon} - \frac{(X_{j,i}-\mu_j)(X_{j,l}-\mu_j)}"
        r"{N\sqrt{\sigma_j^2+\epsilon}}}{\sigma_j^2+\epsilon}",
        ((0 - 1 / _M) * _ROOT - (_XK - _MU) * (_XJ - _MU) / (_M * _ROOT)) / (_SIG2 + _EPS),
        notes="The off-diagonal entry (l != i, delta = 0).",
    ),
    _bn(
        "jacobian",
        "jacobian",
        TABLE2.format("BatchNorm"),
        r"\text{see Equation 16 and 17}",
        None,
        notes="Entries of different features are 0 (001: 'When k != j, its value is 0').",
    ),
    _bn(
        "lipschitz",
        "lipschitz",
        TABLE2.format("BatchNorm") + "; Appendix A.2",
        r"\approx \max_D \frac{|\gamma_D|}{\sqrt{\sigma_D^2 + \epsilon}}",
        None,
        notes=LOST_BARS.format(printed=r"\max_D \frac{ \gamma_D }{\sqrt{\sigma_D^2 + \epsilon}}"),
        approximate=True,
        printed_value="Max(Abs(gamma_j)/sqrt(sigma_j**2 + epsilon))",
    ),
    _bn(
        "a2_definition",
        "definition",
        "001_76ce3a8a4b6079c3.txt, Appendix A.2 (BatchNorm)",
        r"\widehat X_{:,i} = (X_{:,i} - \mu) \odot \sqrt{\sigma^2 + \epsilon}",
        (_XK - _MU) * _ROOT,
        intended=(_XK - _MU) / _ROOT,
        notes="A.2 repeats Eq. 15 with the elementwise division printed as a product.",
    ),
    _bn(
        "a2_jacobian",
        "equation",
        "001_76ce3a8a4b6079c3.txt, Appendix A.2 (BatchNorm)",
        r"\frac{\partial \widehat X_{:,i}}{\partial X_{:,i}} \approx \mathrm{diag}(\gamma)"
        r"\mathrm{diag}(\frac{1}{\sqrt{\sigma^2+\epsilon}})",
        _DELTA / _ROOT,
        approximate=True,
        notes="For large N, per feature; gamma taken out (it multiplies both sides).",
    ),
    _bn(
        "definition_004",
        "definition",
        _B004.format("Definition 17"),
        r"\overline Z_{ij} = \frac{Z_{ij}-\mu_i}{\sigma_i+\varepsilon},\ "
        r"\widehat Z_{ik} = G_i * \overline Z_{ii} + B_i",
        sp.Symbol("G") * sp.Symbol("Zbar_ii") + sp.Symbol("B"),
        intended=sp.Symbol("G") * sp.Symbol("Zbar_ik") + sp.Symbol("B"),
        notes="The second line indexes Zbar_ii where Zbar_ik is meant (B.40 has Zbar_ik). "
        + _MAPPING_004,
    ),
    _bn(
        "B38",
        "equation",
        _B004.format("B.38"),
        r"\frac{\partial \widehat Z}{\partial Z} = \frac{\partial \widehat Z}{\partial "
        r"\overline Z} \cdot \frac{\partial \overline Z}{\partial Z}",
        None,
        notes="Derivatives of matrices by matrices (4-tensors), contracted over Zbar's two "
        "indices. " + _MAPPING_004,
    ),
    _bn(
        "B39",
        "equation",
        _B004.format("B.39"),
        r"\frac{\partial \widehat Z_{ab}}{\partial Z_{ef}} = \frac{\partial \widehat Z_{ab}}"
        r"{\partial \overline Z_{cd}} \cdot \frac{\partial \overline Z_{cd}}{\partial Z_{ef}}",
        None,
        notes="c and d appear on the right only, so the line is read summed over them (B.38 "
        "entry by entry). " + _MAPPING_004,
    ),
    _bn(
        "B40",
        "definition",
        _B004.format("B.40"),
        r"\widehat Z_{ik} = G_i * \overline Z_{ik} + B_i",
        sp.Symbol("G") * sp.Symbol("Zbar_ik") + sp.Symbol("B"),
        notes=_MAPPING_004,
    ),
    _bn(
        "concept19",
        "equation",
        _B004.format("Concept 19"),
        r"(a \neq c \text{ or } b \neq d) \implies "
        r"\frac{\partial \widehat Z_{ab}}{\partial \overline Z_{cd}} = 0",
        sp.Integer(0),
        notes="formal: the partial of Zhat_ab by Zbar_cd when a != c or b != d. " + _MAPPING_004,
    ),
    _bn(
        "concept20",
        "equation",
        _B004.format("Concept 20"),
        r"c \neq e \implies \frac{\partial \overline Z_{cd}}{\partial \overline Z_{cf}} = 0",
        sp.Integer(0),
        intended=sp.Integer(0),
        notes="The denominator prints Zbar_cf; the text before it says Zbar_ik depends only on "
        "the Z_ij of its own dimension i, and e appears only in the condition: the intent is "
        "d Zbar_cd / d Z_ef = 0 for c != e. formal: the printed partial when c != e. "
        + _MAPPING_004,
    ),
    _bn(
        "B41",
        "equation",
        _B004.format("B.41"),
        r"\frac{\partial \widehat Z_{ik}}{\partial Z_{ij}} = \frac{\partial \widehat Z_{ik}}"
        r"{\partial \overline Z_{ik}} \cdot \frac{\partial \overline Z_{ik}}{\partial Z_{ij}}",
        None,
        notes="The one term of B.39 that Concepts 19 and 20 leave (the same feature i); "
        "entries across features vanish. " + _MAPPING_004,
    ),
    _bn(
        "B44",
        "equation",
        _B004.format("B.44"),
        r"\frac{\partial \overline Z_{ik}}{\partial Z_{ij}} = \frac{\partial \overline "
        r"Z_{ik}}{\partial Z_{ik}} \frac{dZ_{ik}}{dZ_{ij}} + \frac{\partial \overline Z_{ik}}"
        r"{\partial \mu_i} \frac{d\mu_i}{dZ_{ij}} + \frac{\partial \overline Z_{ik}}"
        r"{\partial \sigma_i} \frac{d\sigma_i}{dZ_{ij}}",
        None,
        notes="The extracted line is garbled by its underbraces ('Z_ik's effect', 'mu_i's "
        "effect', 'sigma_i's effect'); read as the three effects it labels, it is B.50's "
        "multivariable chain rule.",
    ),
    _bn(
        "B42",
        "equation",
        _B004.format("B.42"),
        r"\frac{\partial \widehat Z_{ik}}{\partial \overline Z_{ik}} = G_i",
        sp.Symbol("G"),
    ),
    _bn(
        "B46",
        "equation",
        _B004.format("B.46"),
        r"\frac{\partial \overline Z_{ik}}{\partial Z_{ik}} = \frac{1}{\sigma_i+\varepsilon},\ "
        r"\frac{\partial \overline Z_{ik}}{\partial \mu_i} = \frac{-1}{\sigma_i+\varepsilon},\ "
        r"\frac{\partial \overline Z_{ik}}{\partial \sigma_i} = "
        r"-\frac{Z_{ik}-\mu_i}{(\sigma_i+\varepsilon)^2}",
        sp.Tuple(1 / _STD, -1 / _STD, -(_XK - _MU) / _STD**2),
        notes="The first partial is printed with an underlined Z (an extraction artifact).",
    ),
    _bn(
        "B47",
        "equation",
        _B004.format("B.47"),
        r"\frac{\partial Z_{ik}}{\partial Z_{ij}} = \delta_{jk}",
        _DELTA,
    ),
    _bn(
        "B48",
        "equation",
        _B004.format("B.48"),
        r"\frac{\partial \mu_i}{\partial Z_{ij}} = \frac1K",
        1 / _M,
    ),
    _bn(
        "B49",
        "equation",
        _B004.format("B.49"),
        r"\frac{\partial \sigma_i}{\partial Z_{ij}} = \frac{Z_{ij}-\mu_i}{K\sigma_i}",
        (_XJ - _MU) / (_M * _SIG),
        notes="The premise is extracted as 'sigma_i^2/sigma_i^2 = ...' where "
        "'sigma_i^2 = (1/K) sum (Z_ij - mu_i)^2' is meant. Undefined at sigma_i = 0.",
    ),
    _bn(
        "B50",
        "equation",
        _B004.format("B.50"),
        r"\frac{\partial \overline Z_{ik}}{\partial Z_{ij}} = \frac{\partial \overline Z_{ik}}"
        r"{\partial Z_{ik}}\frac{dZ_{ik}}{dZ_{ij}} + \frac{\partial \overline Z_{ik}}"
        r"{\partial \mu_i}\frac{d\mu_i}{dZ_{ij}} + \frac{\partial \overline Z_{ik}}"
        r"{\partial \sigma_i}\frac{d\sigma_i}{dZ_{ij}}",
        None,
        notes="The multivariable chain rule through Z_ik, mu_i and sigma_i.",
    ),
    _bn(
        "B51",
        "equation",
        _B004.format("B.51"),
        r"\frac{\partial \overline Z_{ik}}{\partial Z_{ij}} = \left(\frac{1}{\sigma_i+\epsilon}"
        r"\right)\cdot\frac{d\frac{Z_{ik}}{dZ_{ij}}}{dZ_{ij}} - \left(\frac{1}{\sigma_i+"
        r"\epsilon}\right)\frac{d\mu_i}{dZ_{ij}} - \left(\frac{Z_{ik}-\mu_i}{(\sigma_i+"
        r"\epsilon)^2}\right)\frac{d\sigma_i}{dZ_{ij}}",
        None,
        intended=_DELTA / _STD
        - 1 / (_STD * _M)
        - (_XK - _MU) / _STD**2 * (_XJ - _MU) / (_M * _SIG),
        notes="The first term is garbled ('d (Z_ik/dZ_ij) / dZ_ij'); its intent is "
        "dZ_ik/dZ_ij. The intended line is B.50 with the partials of B.46 and B.47-B.49 "
        "substituted.",
    ),
    _bn(
        "B52",
        "equation",
        _B004.format("B.52"),
        r"\frac{\partial \overline Z_{ik}}{\partial Z_{ij}} = \frac{\delta_{jk}}{\sigma_i+"
        r"\epsilon} - \frac{1}{(\sigma_i+\epsilon)K} - \frac{Z_{ik}-\mu_i}{(\sigma_i+"
        r"\epsilon)^2}\cdot\frac{Z_{ij}-\mu_i}{K\sigma_i}",
        _DELTA / _STD - 1 / (_STD * _M) - (_XK - _MU) / _STD**2 * (_XJ - _MU) / (_M * _SIG),
    ),
    _bn(
        "KE21",
        "equation",
        _B004.format("Key Equation 21"),
        r"\frac{\partial \overline Z_{ik}}{\partial Z_{ij}} = \frac{1}{K(\sigma_i+\varepsilon)}"
        r"\Big(K\delta_{jk} - 1 - \frac{(Z_{ik}-\mu_i)(Z_{ij}-\mu_i)}{\sigma_i(\sigma_i+"
        r"\varepsilon)}\Big)",
        1 / (_M * _STD) * (_M * _DELTA - 1 - (_XK - _MU) * (_XJ - _MU) / (_SIG * _STD)),
        notes="Together with dZhat/dZbar = G_i. Like B.49 it divides by sigma_i; at sigma_i "
        "= 0 the deviations vanish and the derivative is (K delta - 1)/(K eps).",
    ),
    _bn(
        "B53",
        "equation",
        _B004.format("B.53"),
        r"\frac{\partial L}{\partial Z_{ij}} = \sum_{k=1}^K \frac{\partial L}{\partial "
        r"\widehat Z_{ik}}\frac{\partial \widehat Z_{ik}}{\partial Z_{ij}}",
        None,
    ),
    _bn(
        "B55",
        "equation",
        _B004.format("B.55"),
        r"\frac{\partial L}{\partial B_i} = \sum_{k=1}^K \frac{\partial L}{\partial "
        r"\widehat Z_{ik}}",
        None,
    ),
    _bn(
        "B57",
        "equation",
        _B004.format("B.57"),
        r"\frac{\partial L}{\partial G_i} = \sum_{k=1}^K \frac{\partial L}{\partial "
        r"\widehat Z_{ik}}\overline Z_{ik}",
        None,
    ),
    _bn(
        "B54",
        "equation",
        _B004.format("B.54"),
        r"\frac{\partial \widehat Z_{ik}}{\partial B_i} = 1",
        sp.Integer(1),
    ),
    _bn(
        "B56",
        "equation",
        _B004.format("B.56"),
        r"\frac{\partial \widehat Z_{ik}}{\partial G_i} = \overline Z_{ik}",
        sp.Symbol("Zbar_ik"),
    ),
    _bn(
        "KE22",
        "equation",
        _B004.format("Key Equation 22"),
        r"\frac{\partial L}{\partial B_i} = \sum_{k=1}^K \frac{\partial L}{\partial "
        r"\widehat Z_{ik}}",
        None,
        notes="The extracted text ends after dL/dB_i; dL/dG_i is B.57.",
    ),
    _bn(
        "moments_000",
        "equation",
        "000_fd3535166428b448.txt, Algorithm (Batch Normalization)",
        r"\mathcal{B}_N \text{ will have } \beta \text{ mean and } \gamma^2 \text{ variance}",
        sp.Tuple(sp.Symbol("beta"), sp.Symbol("gamma") ** 2),
        notes="formal: the printed (mean, variance) of the output.",
    ),
    _bn(
        "algorithm_000",
        "definition",
        "000_fd3535166428b448.txt, Algorithm (Batch Normalization)",
        r"\mu_{\mathcal B} = \frac{1}{m} \sum_{i=1}^m x_i,\ \sigma_{\mathcal B}^2 = "
        r"\frac{1}{m} \sum_{i=1}^m (x_i - \mu_{\mathcal B})^2,\ \hat x_i = "
        r"\frac{x_i - \mu_{\mathcal B}}{\sqrt{\sigma_{\mathcal B}^2 + \epsilon}},\ "
        r"h_i = \gamma \cdot \hat x_i + \beta",
        sp.Symbol("gamma") * (_XK - _MU) / sp.sqrt(_SIG**2 + _EPS) + sp.Symbol("beta"),
        notes="formal: h_i of one feature, mu and sigma the batch's mean and biased standard "
        "deviation (the printed 1/m).",
    ),
    _bn(
        "example_000",
        "definition",
        "000_fd3535166428b448.txt, Differences between Batch Normalization and Layer Normalization",
        r"\hat x_{j,k} = \frac{x_{j,k} - \mu}{\sigma},\ h_{j,k} = \gamma \cdot "
        r"\hat x_{j,k} + \beta",
        sp.Symbol("gamma") * (_XK - _MU) / _SIG + sp.Symbol("beta"),
        notes="The worked example (3 neurons, 3 samples each) writes no eps; the algorithm "
        "(algorithm_000) has it. formal: h of one feature, mu and sigma the batch's mean "
        "and biased standard deviation.",
    ),
    _bn(
        "batch_one_000",
        "equation",
        "000_fd3535166428b448.txt, The Problems of Batch Normalization, (1)",
        r"\text{When the mini-batch is small or equals to 1, Batch Normalization will not "
        r"be effective}",
        sp.Tuple(sp.Symbol("beta"), 0),
        notes="Read at a batch of one, the case the slide names: formal: the training "
        "forward's (h_1, dh_1/dx_1) there, the output independent of the input.",
    ),
    _bn(
        "identity_000",
        "equation",
        "000_fd3535166428b448.txt, Batch Normalization (second slide)",
        r"\beta = \mu_{\mathcal B},\ \gamma = \sigma_{\mathcal B} \Rightarrow h_i = x_i",
        sp.Tuple(_MU, _SIG),
        notes="formal: the printed (beta, gamma) that make the transformation the identity.",
    ),
    _bn(
        "moments_002",
        "equation",
        "002_665588f2644db48a.txt, MiniBatch normalization",
        r"\hat x_i \leftarrow \frac{x_i - \mu_\beta}{\sqrt{\delta_\beta^2 + \epsilon}}\ "
        r"(\text{data has mean of 0 and std of 1})",
        sp.Tuple(0, 1),
        notes="002 writes the batch variance delta_beta^2 and the batch mean mu_beta. formal: "
        "the printed (mean, standard deviation) of xhat.",
    ),
    _bn(
        "test_002",
        "definition",
        "002_665588f2644db48a.txt, During test",
        r"\hat x \leftarrow \frac{x - E[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}}",
        (_XK - sp.Symbol("E_x")) / sp.sqrt(sp.Symbol("Var_x", nonnegative=True) + _EPS),
        notes="Inference mode: E[x] and Var[x] are the running statistics (PyTorch keeps "
        "the running variance unbiased).",
    ),
    _bn(
        "moving_average_001",
        "equation",
        "001_76ce3a8a4b6079c3.txt, section 4.2 (BatchNorm) and Appendix A.2",
        r"\text{In training, } \boldsymbol\mu \text{ and } \boldsymbol\sigma "
        r"\text{ are updated by a moving average} \Rightarrow "
        r"\frac{\partial \mu}{\partial x_k} = \frac{\partial \sigma}{\partial x_k} = 0",
        sp.Tuple(0, 0),
        notes="A.2 uses the remark to treat mu and sigma as constants when it differentiates "
        "the training forward (its approximate Jacobian, a2_jacobian). formal: the partials "
        "of the statistics the training forward normalizes with, by one entry of the batch.",
    ),
    _bn(
        "normalize_002",
        "equation",
        "002_665588f2644db48a.txt, Batch Normalization",
        r"a^L \rightarrow \frac{a^L - E[a^L]}{\sqrt{\mathrm{var}(a^L)}} \Rightarrow "
        r"\mu = 0,\ \sigma = 1",
        sp.Tuple(0, 1),
        notes="Without eps (the MiniBatch version with eps is moments_002). formal: the "
        "printed (mean, standard deviation) of the normalized batch.",
    ),
    _bn(
        "shift_002",
        "equation",
        "002_665588f2644db48a.txt, Batch Normalization (scale and shift)",
        r"a^L \leftarrow \gamma a^L + \beta:\ \text{new mean } \beta,\ "
        r"\text{new std } \gamma",
        sp.Tuple(sp.Symbol("beta", real=True), sp.Symbol("gamma", real=True)),
        notes="The text says the shift 'introduces a new mean and std' and that gamma and "
        "beta 'adjust the mean and standard deviation'. formal: (mean, standard deviation) "
        "of gamma a + beta = (beta, gamma), for the normalized a of normalize_002.",
    ),
    _bn(
        "forward_003",
        "definition",
        "003_54d3154625e0c3ca.txt, Batch Normalization",
        r"\hat{x}_{ij} = \frac{x_{ij} - \mu_j}{\sqrt{\sigma_j^2 + \epsilon}},\ "
        r"\hat{y}_{ij} = \gamma_j \hat{x}_{ij} + \beta_j",
        sp.Symbol("gamma") * (_XK - _MU) / sp.sqrt(_SIG**2 + _EPS) + sp.Symbol("beta"),
        notes="Sample i, feature j; mu_j and sigma_j^2 the batch's mean and variance of "
        "feature j (the notes circle them; the statistics' own formulas are not written, "
        "read as 000's: 1/N, biased). The annotation 'inference ... N = 1' beside them is "
        "garbled and not checked. formal: yhat of one feature.",
    ),
    _bn(
        "running_003",
        "equation",
        "003_54d3154625e0c3ca.txt, Batch Normalization (running statistics)",
        r"\mu^{run} \leftarrow m \mu^{run} + (1-m) \mu^{batch},\ "
        r"(\sigma^2)^{run} \leftarrow m (\sigma^2)^{run} + (1-m) (\sigma^2)^{batch}",
        sp.Tuple(
            bn.keep * bn.mu_run + (1 - bn.keep) * bn.mu_batch,
            bn.keep * bn.var_run + (1 - bn.keep) * bn.var_batch,
        ),
        notes="Against PyTorch's nn.BatchNorm (kernels.batchnorm.running_update): 003's m is "
        "1 - momentum; (sigma^2)^batch is the batch's biased variance, the one its values "
        "are normalized with. formal: the printed (new running mean, new running variance).",
    ),
)


# --- Linear, Convolution, Softmax, poolings, residual blocks ---------------------------

_SIGMA_W = sp.Symbol("sigma_max_W", nonnegative=True)  # sigma_max of the printed matrix
_LIP_F = sp.Symbol("Lip_f", nonnegative=True)  # Lipschitz constant of the branch f
_NU_ABS_MAX = sp.Symbol("nu_abs_max", nonnegative=True)  # max_D |nu_D|, bars restored
_ROW_D = sp.Symbol("D", positive=True, integer=True)
_SEC31 = "001_76ce3a8a4b6079c3.txt, {}"


def _row(
    claim_id: str, kind: str, source: str, latex: str, formal=None, printed=None, notes=""
) -> Claim:
    return _claim(claim_id, kind, source, latex, formal, printed_value=printed, notes=notes)


ROW_CLAIMS: tuple[Claim, ...] = (
    _row(
        "linear.definition",
        "definition",
        TABLE2.format("Linear") + "; Eq. 9",
        r"\mathbf{y} = \mathbf{W}\mathbf{x} + \mathbf{b}",
        notes="Table 2 prints y = Wx; Eq. 9 adds the bias. PyTorch's nn.Linear computes "
        "x W^T + b on a row x, the same map.",
    ),
    _row(
        "linear.jacobian",
        "jacobian",
        TABLE2.format("Linear") + "; Eq. 10",
        r"\frac{\partial \mathbf{y}}{\partial \mathbf{x}} = \mathbf{W}^\top",
        notes="Denominator layout (the paper's): the numerator-layout Jacobian is W.",
    ),
    _row(
        "linear.lipschitz",
        "lipschitz",
        TABLE2.format("Linear") + "; Eq. 11 (p = 2)",
        r"\sigma_{\max}(\mathbf{W})",
        _SIGMA_W,
        "sigma_max(W)",
    ),
    _row(
        "linear.eq11",
        "equation",
        _SEC31.format("Eq. 11"),
        r"\text{Lip}_p(f(\mathbf{x}; \mathbf{W}, \mathbf{b})) = \sup_{\|\mathbf{x}\|_p=1} "
        r"\|\mathbf{W}\mathbf{x} + \mathbf{b}\|_p",
        notes="formal: the printed supremum, against the Lipschitz constant of the affine map.",
    ),
    _row(
        "linear.eigenvalue",
        "equation",
        _SEC31.format("text under Eq. 11"),
        r"\sigma_{\max}(\mathbf{W}) \text{ is the largest absolute eigenvalue of } \mathbf{W}",
    ),
    _row(
        "linear.backprop",
        "equation",
        _SEC31.format("section 3.1.1, the gradients after Eq. 11"),
        r"\frac{\partial \mathcal{L}}{\partial \mathbf{x}^l} = (\mathbf{W}^{l+1})^\top "
        r"\frac{\partial \mathcal{L}}{\partial \mathbf{y}^{l+1}},\ \frac{\partial \mathcal{L}}"
        r"{\partial \mathbf{W}^{l+1}} = \frac{\partial \mathcal{L}}{\partial \mathbf{y}^{l+1}}"
        r"(\mathbf{x}^l)^\top,\ \frac{\partial \mathcal{L}}{\partial \mathbf{b}^{l+1}} = "
        r"\frac{\partial \mathcal{L}}{\partial \mathbf{y}^{l+1}}",
    ),
    _row(
        "conv2d.definition",
        "definition",
        TABLE2.format("Convolution") + "; Eq. 12",
        r"Y_{i,j,o} = \sum_{m=-\frac{K+1}{2}}^{\frac{K+1}{2}} \sum_{n=-\frac{K+1}{2}}"
        r"^{\frac{K+1}{2}} \sum_{c=0}^{C-1} X_{i+m,j+n,c} \cdot W_{m,n,c,o}",
        notes="Eq. 13 rewrites it as Y^O = W^O_{K,K,C} X^{K,K,C} (Einstein notation; "
        "X^{K,K,C} is the im2col matrix of patches).",
    ),
    _row(
        "conv2d.jacobian",
        "jacobian",
        TABLE2.format("Convolution"),
        r"\frac{\partial \mathbf{y}^O}{\partial \mathbf{x}^D} = (\mathbf{W}_D^O)^\top = "
        r"\mathbf{W}_D^O",
        notes="D = K*K*C; W_D^O is the weight reshaped to an O x D matrix.",
    ),
    _row(
        "conv2d.lipschitz",
        "lipschitz",
        TABLE2.format("Convolution"),
        r"\sigma_{\max}(\mathbf{W}_D^O)",
        _SIGMA_W,
        "sigma_max(W_D^O)",
        notes="Read as the Lipschitz constant of the convolution as a map from images to "
        "images (2-norm = Frobenius norm of the image tensors), as the table's caption says.",
    ),
    _row(
        "conv2d.eq14",
        "equation",
        _SEC31.format("Eq. 14"),
        r"\frac{\partial \mathcal{L}}{\partial \mathbf{W}} = \mathbf{Y}' "
        r"(\mathbf{X}^{K,K,C})^\top,\ \frac{\partial \mathcal{L}}{\partial \mathbf{X}} = "
        r"(\mathbf{W}_{K,K,C}^O)^\top \mathbf{Y}'",
    ),
    _row(
        "softmax.definition",
        "definition",
        TABLE2.format("Softmax"),
        r"y_i = \frac{\exp(x_i)}{\sum_{j=0}^{d-1} \exp(x_j)}",
    ),
    _row(
        "softmax.jacobian",
        "jacobian",
        TABLE2.format("Softmax"),
        r"\frac{\partial y_i}{\partial x_i} = (y_i)(1(i == j) - y_i)",
        notes="The left side names the diagonal; the right side's 1(i == j) makes it a "
        "matrix entry (i, j).",
    ),
    _row(
        "softmax.lipschitz",
        "lipschitz",
        TABLE2.format("Softmax") + " (citing Gao & Pavel 2017)",
        r"\leq 1",
        sp.Integer(1),
        "1",
    ),
    _row(
        "maxpool.definition",
        "definition",
        TABLE2.format("MaxPooling"),
        r"y = \max(\mathbf{x})",
    ),
    _row(
        "maxpool.jacobian",
        "jacobian",
        TABLE2.format("MaxPooling"),
        r"\frac{\partial y}{\partial \mathbf{x}} = \mathbf{1}(\mathbf{x} == y)",
    ),
    _row("maxpool.lipschitz", "lipschitz", TABLE2.format("MaxPooling"), r"1", sp.Integer(1), "1"),
    _row(
        "avgpool.definition",
        "definition",
        TABLE2.format("AveragePooling"),
        r"y = \frac{1}{D} \text{sum}(\mathbf{x})",
    ),
    _row(
        "avgpool.jacobian",
        "jacobian",
        TABLE2.format("AveragePooling"),
        r"\frac{\partial y}{\partial \mathbf{x}} = \frac{1}{D} \mathbf{1}",
    ),
    _row(
        "avgpool.lipschitz",
        "lipschitz",
        TABLE2.format("AveragePooling"),
        r"\frac{1}{D}",
        1 / _ROW_D,
        "1/D",
    ),
    _row(
        "residual.definition",
        "definition",
        TABLE2.format("Residual") + "; Eq. 22",
        r"\mathbf{y} = \mathbf{x} + f(\mathbf{x}, \mathbf{W})",
    ),
    _row(
        "residual.jacobian",
        "jacobian",
        TABLE2.format("Residual") + "; Eq. 23",
        r"\frac{\partial \mathbf{y}}{\partial \mathbf{x}} = \mathbf{I} + \frac{\partial "
        r"f(\mathbf{x}, \mathbf{W})}{\partial \mathbf{x}}",
    ),
    _row(
        "residual.lipschitz",
        "lipschitz",
        TABLE2.format("Residual"),
        r"1 + \text{Lip}(f(\mathbf{x}, \mathbf{W}))",
        1 + _LIP_F,
        "1 + Lip(f)",
        notes="A bound in terms of the branch: read as Lip(x + f) <= 1 + Lip(f) for every "
        "branch f, with equality for some.",
    ),
    _row(
        "residual.eq27",
        "equation",
        _SEC31.format("Eq. 27"),
        r"\mathbf{J}_y(\mathbf{x}) = \mathbf{W}_1^\top \text{diag}(\mathbf{1}(\mathbf{W}_1 "
        r"\mathbf{x} + \mathbf{b}_1 > \mathbf{0})) \mathbf{W}_2^\top",
        notes="The Jacobian of the FFN of Eq. 26, W2 max(0, W1 x + b1) + b2.",
    ),
    _row(
        "residual.eq27_shortcut",
        "equation",
        _SEC31.format("text after Eq. 27"),
        r"\mathbf{J}_y(\mathbf{x}) = \mathbf{I} + \mathbf{W}_1^\top \text{diag}(\mathbf{1}"
        r"(\mathbf{W}_1 \mathbf{x} + \mathbf{b}_1 > \mathbf{0})) \mathbf{W}_2^\top",
        notes="y = x + FFN(x).",
    ),
    _row(
        "weighted_residual.definition",
        "definition",
        TABLE2.format("Weighted Residual Block"),
        r"f(\mathbf{x}, \mathbf{W}) = \mathbf{x} + \nu_1 \odot f(\mathbf{x}, \mathbf{W})",
        notes="Section 5.3 (Eq. 55) writes the block as x^{l+1} = x^l + nu_1 * f(x^l; W).",
    ),
    _row(
        "weighted_residual.jacobian",
        "jacobian",
        TABLE2.format("Weighted Residual Block"),
        r"\frac{\partial \mathbf{y}}{\partial \mathbf{x}} = \mathbf{I} + \frac{\partial "
        r"f(\mathbf{x}, \mathbf{W})}{\partial \mathbf{x}} \text{diag}(\nu)",
    ),
    _row(
        "weighted_residual.lipschitz",
        "lipschitz",
        TABLE2.format("Weighted Residual Block"),
        r"1 + \max_D |\nu_D| \text{Lip}(f(\mathbf{x}, \mathbf{W}))",
        1 + _NU_ABS_MAX * _LIP_F,
        "1 + max_D|nu_D| Lip(f)",
        notes=LOST_BARS.format(
            printed=r"1 + \max_D( \nu_D ) \text{Lip}(f(\mathbf{x}, \mathbf{W}))"
        ),
    ),
)


# --- Attention (single head) -------------------------------------------------------------

_UNCHECKABLE = (
    "The row's Jacobian column only points to {}, which is not among the sources here, so "
    "liptable does not check it; it derives the Jacobian itself (sympy.diff of the forward, "
    "and the kernels' closed forms proven equal to it)."
)

ATTENTION_CLAIMS: tuple[Claim, ...] = (
    _row(
        "dp_attention.definition",
        "definition",
        TABLE2.format("DP Attention") + "; Eq. 20",
        r"\mathbf{Y} = \mathbf{W}^V \mathbf{X} \cdot \mathcal{S}\left(\frac{(\mathbf{W}^Q "
        r"\mathbf{X})^\top (\mathbf{W}^K \mathbf{X})}{\sqrt{D/H}}\right)",
        notes="Tokens are the columns of X; Eq. 20 scales by sqrt(D) (one head, H = 1). "
        + _UNCHECKABLE.format("Equation 12 of Kim et al. (2021)"),
    ),
    _row(
        "dp_attention.lipschitz",
        "lipschitz",
        TABLE2.format("DP Attention"),
        r"\infty",
        sp.oo,
        "oo",
    ),
    _row(
        "l2_attention.definition",
        "definition",
        TABLE2.format("L2 Attention") + "; Eq. 53",
        r"\mathbf{Y} = \mathbf{W}^V \mathbf{X} \cdot \mathcal{S}\left(-\frac{(\mathbf{W}^Q "
        r"\mathbf{X} - \mathbf{W}^K \mathbf{X})^\top (\mathbf{W}^Q \mathbf{X} - \mathbf{W}^K "
        r"\mathbf{X})}{\sqrt{D/H}}\right)",
        notes="Eq. 53 as printed; Table 2 prints the logits as -x^T (W^Q - W^K)^T (W^Q - W^K) "
        "x / sqrt(D/H), of the same shape. "
        + _UNCHECKABLE.format("Equations 19 and 20 of Kim et al. (2021)"),
    ),
    _row(
        "l2_attention.lipschitz",
        "lipschitz",
        TABLE2.format("L2 Attention"),
        r"\frac{\sqrt{N}}{\sqrt{D/H}} (4\phi^{-1}(N-1) + 1) \left(\sqrt{\|\mathbf{W}^Q\|_2^2 "
        r"\|\mathbf{W}^V\|_2^2}\right) \|\mathbf{W}^O\|_2 \text{ when } \mathbf{W}^Q = "
        r"\mathbf{W}^K",
        printed="sqrt(n)/sqrt(d)*(4*LambertW((n - 1)/E) + 1)*sigma_Wq*sigma_Wv",
        notes="phi(x) = x exp(x + 1), so phi^{-1}(N - 1) = W_0((N - 1)/e). One head: "
        "D/H = d, and no output projection (|W^O|_2 = 1); n: the number of tokens (N).",
    ),
    Claim(
        id="l2_attention.tied",
        key="l2_attention",
        kind="equation",
        source="001_76ce3a8a4b6079c3.txt, section 4.2 (after Table 2) and section 5.2",
        statement_latex=r"L_2 \text{ attention is Lipschitz continuous when } \mathbf{W}^Q = "
        r"\mathbf{W}^K",
        formal=None,
        notes="Kim et al.'s L2 attention (logits -|W^Q x_i - W^K x_j|^2/sqrt(d); with W^Q = "
        "W^K its value map is tied to W^Q too, as l2_attention.definition reads it). The "
        "claim is that some finite constant exists; Table 2's value for it is "
        "l2_attention.lipschitz.",
    ),
    _row(
        "scs_attention.definition",
        "definition",
        TABLE2.format("SCS Attention") + "; Eq. 54",
        r"\mathbf{Y} = \nu \mathbf{V} \mathbf{P}, \text{ where } \mathbf{P} = "
        r"\text{softmax}(\tau \mathbf{Q}^\top \mathbf{K})",
        notes="q_i, k_i, v_i are W^Q x_i, W^K x_i, W^V x_i divided by sqrt(|.|^2 + eps) "
        "(section 5.2). " + _UNCHECKABLE.format("Equations 13 and 14 of Qi et al. (2023)"),
    ),
    _row(
        "scs_attention.lipschitz",
        "lipschitz",
        TABLE2.format("SCS Attention"),
        r"2N(N-1)\nu\tau\epsilon^{-\frac{1}{2}} \|\mathbf{W}^K\|_2 + 2(N-1)\nu\tau"
        r"\epsilon^{-\frac{1}{2}} \|\mathbf{W}^Q\|_2 + 2N\nu\epsilon^{-\frac{1}{2}} "
        r"\|\mathbf{W}^V\|_2",
        printed="2*n*(n - 1)*nu*tau*sigma_Wk/sqrt(eps) + 2*(n - 1)*nu*tau*sigma_Wq/sqrt(eps) "
        "+ 2*n*nu*sigma_Wv/sqrt(eps)",
        notes="n: the number of tokens (N), sigma_W: the largest singular value of W.",
    ),
)


#: Every claim: the activation rows, the normalizations, the remaining rows, attention.
# --- optimizers: the size of Adam's update (001, Algorithm 2, section 6.3, 7.1) ------------

_ADAM = "001_76ce3a8a4b6079c3.txt, {}"
_B1, _B2 = sp.Symbol("beta_1", positive=True), sp.Symbol("beta_2", positive=True)
_ADAM_BOUND = (1 - _B1) / sp.sqrt(1 - _B2)
_ADAM_NOTATION = (
    "Section 6.3's mu_t = m_t/sqrt(v_t) from m_0 = v_0 = 0, one coordinate, no bias "
    "correction and no eps (derive/definitions/theory.py)."
)


def _adam(claim_id: str, kind: str, source: str, latex: str, formal, **extra) -> Claim:
    return Claim(
        id=f"optimizers.{claim_id}",
        key="optimizers",
        kind=kind,
        source=_ADAM.format(source),
        statement_latex=latex,
        formal=formal,
        **extra,
    )


THEORY_CLAIMS: tuple[Claim, ...] = (
    _adam(
        "algorithm2_update",
        "definition",
        "Algorithm 2 (AdamW), line 8",
        r"\boldsymbol\mu_t = \hat{\mathbf m}_t / \hat{\mathbf v}_t",
        sp.Symbol("m_hat") / sp.Symbol("v_hat", positive=True),
        intended=sp.Symbol("m_hat") / sp.sqrt(sp.Symbol("v_hat", positive=True)),
        notes="Adam (Kingma and Ba) divides by the square root of v_hat; section 6.3 writes "
        "the square root on the right of its mu_t = m_t/v_t = (...) / sqrt(...).",
    ),
    _adam(
        "update_bound",
        "equation",
        "Remark 6.3 (1)",
        r"|\mu_t| \le \frac{1 - \beta_1}{\sqrt{1 - \beta_2}}",
        _ADAM_BOUND,
        notes=_ADAM_NOTATION,
    ),
    _adam(
        "single_step",
        "equation",
        "section 6.3",
        r"\mathrm{abs}(\mathbf g_t) \gg \mathrm{abs}(\mathbf m_{t-1}) \Rightarrow "
        r"|\mu_t| \approx \frac{1 - \beta_1}{\sqrt{1 - \beta_2}}",
        _ADAM_BOUND,
        approximate=True,
        notes=_ADAM_NOTATION,
    ),
    _adam(
        "range_default",
        "value",
        "section 6.3 and section 7.1, guideline 4",
        r"(\beta_1, \beta_2) = (0.9, 0.999):\ \frac{1 - \beta_1}{\sqrt{1 - \beta_2}} = "
        r"\sqrt{10}",
        sp.sqrt(10),
        printed_value="sqrt(10)",
    ),
    _adam(
        "range_099",
        "value",
        "section 6.3 and section 7.1, guideline 4",
        r"(\beta_1, \beta_2) = (0.9, 0.99):\ [-1.0, 1.0]",
        sp.Integer(1),
        printed_value="1.0",
        notes="formal: the half-width (1 - beta1)/sqrt(1 - beta2) of the printed range.",
    ),
    _adam(
        "range_095",
        "value",
        "section 7.1, guideline 4",
        r"(\beta_1, \beta_2) = (0.9, 0.95):\ [-0.447, 0.447]",
        sp.Rational(447, 1000),
        printed_value="0.447",
        notes="formal: the half-width (1 - beta1)/sqrt(1 - beta2) of the printed range, "
        "printed to three digits.",
    ),
    Claim(
        id="smoothness.square_000",
        key="smoothness",
        kind="equation",
        source="000_fd3535166428b448.txt, Appendix: Lipschitz Continuous and Lipschitz Smooth",
        statement_latex=r"f(x) = x^2 \text{ is Lipschitz smooth but not Lipschitz continuous}",
        formal=sp.Tuple(2, sp.oo),
        notes="formal: (the smallest beta, the smallest L) of f on R; oo: none exists.",
    ),
    Claim(
        id="smoothness.arcsin_000",
        key="smoothness",
        kind="equation",
        source="000_fd3535166428b448.txt, Appendix: Lipschitz Continuous and Lipschitz Smooth",
        statement_latex=r"f(x) = \tfrac12 \arcsin x + \tfrac12 x \sqrt{1 - x^2},\ f'(x) = "
        r"\sqrt{1 - x^2}: \text{ Lipschitz continuous, not Lipschitz smooth}",
        formal=sp.Tuple(1, sp.oo),
        notes="formal: (the smallest L, the smallest beta) of f; oo: none exists. f is "
        "defined on [-1, 1] only, not on R^d as the appendix's definitions have it.",
    ),
    Claim(
        id="smoothness.hinge_002",
        key="smoothness",
        kind="lipschitz",
        source="002_665588f2644db48a.txt, Implications of L-Lipschitz",
        statement_latex=r"\text{the Hinge Loss is an } L\text{-Lipschitz function}",
        formal=sp.Integer(1),
        printed_value="L",
        notes="formal: the smallest L of max(0, 1 - z) in the margin z (the text names no "
        "value; the claim is that one exists).",
    ),
    Claim(
        id="smoothness.extends_002",
        key="smoothness",
        kind="equation",
        source="002_665588f2644db48a.txt, Implications of L-Lipschitz",
        statement_latex=r"f \text{ L-Lipschitz} \Rightarrow \text{the property extends to the "
        r"derivative or gradient}",
        formal=None,
        notes="Read as: an L-Lipschitz f has a Lipschitz gradient (some beta). 000's appendix "
        "gives the counterexample.",
    ),
    _adam(
        "sign_sgd",
        "equation",
        "section 6.3",
        r"(\beta_1, \beta_2) = (0, 0):\ \text{Adam is signSGD}",
        sp.sign(sp.Symbol("g", real=True)),
        notes="formal: the update of one step, sign(g_t), for g_t != 0.",
    ),
)


# --- backpropagation through W = XY, 003's activations, initialization (003; 001) ---------

_NOTES_003 = "003_54d3154625e0c3ca.txt, {}"
_SEC_001 = "001_76ce3a8a4b6079c3.txt, {}"
#: 003's printed moments of z, as the notes name them (their values are derived).
E_Z2, VAR_Z, VAR_Z2 = sp.symbols("E_z2 Var_z Var_z2")


INITIALIZATION_CLAIMS: tuple[Claim, ...] = (
    _claim(
        "backprop.dX_003",
        "equation",
        _NOTES_003.format("first page, W = XY, (1)"),
        r"W = XY:\ \frac{\partial \mathcal{L}}{\partial X} = \frac{\partial \mathcal{L}}"
        r"{\partial W} \cdot Y^T",
        ini.G * ini.Y.T,
        notes="X: n x k, Y: k x m, dL/dW: n x m (each gradient in its variable's layout).",
    ),
    _claim(
        "backprop.dY_003",
        "equation",
        _NOTES_003.format("first page, W = XY, (2)"),
        r"W = XY:\ \frac{\partial \mathcal{L}}{\partial Y} = X^T \frac{\partial \mathcal{L}}"
        r"{\partial W}",
        ini.X.T * ini.G,
        notes="X: n x k, Y: k x m, dL/dW: n x m (each gradient in its variable's layout).",
    ),
    _claim(
        "backprop.tanh_definition_003",
        "definition",
        _NOTES_003.format("activations, tanh"),
        r"\tanh(z) = \frac{e^z - e^{-z}}{e^z + e^{-z}}",
        ini.TANH_003,
    ),
    _claim(
        "backprop.tanh_derivative_003",
        "equation",
        _NOTES_003.format("activations, tanh"),
        r"(\tanh)' = 1 - (\tanh)^2",
        1 - sp.tanh(ini.z) ** 2,
        notes="003's sigma'(z) = sigma(z)(1 - sigma(z)) and ReLU' = 1(z > 0) are the claims "
        "sigmoid.equation_003 and relu.equation_003.",
    ),
    _claim(
        "backprop.zero_centered_003",
        "equation",
        _NOTES_003.format(
            "activations: 'not zero centered. / zero centered. / not zero centered.'"
        ),
        r"\sigma: \text{not zero centered};\ \tanh: \text{zero centered};\ \mathrm{ReLU}: "
        r"\text{not zero centered}",
        sp.Tuple(sp.false, sp.true, sp.false),
        notes="formal: (sigmoid, tanh, ReLU) is zero centered, read as: odd, f(-z) = -f(z) "
        "(so its range is symmetric about 0 and its mean is 0 for every input distribution "
        "symmetric about 0). The three remarks stand beside the three functions in order.",
    ),
    _claim(
        "initialization.xavier_mean_003",
        "equation",
        _NOTES_003.format("Xavier Init"),
        r"E[y] = \sum_i E[x_i w_i] = \sum_i E[x_i] E[w_i] = 0",
        sp.Integer(0),
        notes="y = sum_{i=1}^{D_in} w_i x_i; w_i i.i.d. with E[w_i] = 0, Var(w_i) = sigma^2; "
        "x independent of w; E[x_i] = 0, Var[x_i] = V.",
    ),
    _claim(
        "initialization.xavier_variance_003",
        "equation",
        _NOTES_003.format("Xavier Init"),
        r"Var[y] = E[y^2] = \sum_i E[w_i^2 x_i^2] + \sum_{i \neq k} E[w_i] E[w_k] E[x_i x_k] "
        r"= \sigma^2 V \cdot D_{in}",
        ini.sigma_w**2 * ini.V * ini.D_in,
        notes="003's sigma here is the weights' standard deviation (sigma_w). The x_i need "
        "not be independent of each other: E[x_i x_k] (i != k) is left free.",
    ),
    _claim(
        "initialization.xavier_monotone_003",
        "equation",
        _NOTES_003.format("Xavier Init, Note"),
        r"\sigma^2 \uparrow\ \Rightarrow\ Var(y) \uparrow, \quad \sigma^2 \downarrow\ "
        r"\Rightarrow\ Var(y) \downarrow",
        sp.Integer(1),
        notes="formal: the sign of dVar(y)/d(sigma^2), Var(y) as a function of the weights' "
        "variance sigma^2 (V, D_in fixed); +1: Var(y) moves with sigma^2.",
    ),
    _claim(
        "initialization.xavier_sigma_003",
        "value",
        _NOTES_003.format("Xavier Init"),
        r"\text{Goal } Var[y] = Var[x_i]:\ \sigma = \frac{1}{\sqrt{D_{in}}}",
        1 / sp.sqrt(ini.D_in),
        printed_value="1/sqrt(D_in)",
    ),
    _claim(
        "initialization.kaiming_mean_003",
        "equation",
        _NOTES_003.format("Xavier Init -> ReLU, E[h]"),
        r"E[h] = \int_0^\infty z \frac{1}{\sqrt{2\pi\sigma}} e^{-\frac{z^2}{2\sigma}} dz "
        r"\overset{u = z^2/(2\sigma)}{=} \int_0^\infty \frac{\sigma e^{-u}}{\sqrt{2\pi\sigma}} "
        r"du = \sqrt{\frac{\sigma}{2\pi}}",
        sp.sqrt(ini.s / (2 * sp.pi)),
        notes="In this part 003's sigma is the variance of z (s here): p(z) = "
        "exp(-z^2/(2 sigma))/sqrt(2 pi sigma); h = max(0, z).",
    ),
    _claim(
        "initialization.kaiming_second_moment_003",
        "equation",
        _NOTES_003.format("Xavier Init -> ReLU, E[h^2]"),
        r"E[h^2] = \frac12 \int_{-\infty}^\infty z^2 p(z) dz = \frac12 E[z^2] = \frac12 "
        r"\mathrm{Var}[z^2] = \frac12 \sigma",
        sp.Tuple(E_Z2 / 2, VAR_Z2 / 2, ini.s / 2),
        intended=sp.Tuple(E_Z2 / 2, VAR_Z / 2, ini.s / 2),
        notes="formal: the chain's three right-hand sides (E_z2 = E[z^2], Var_z2 = "
        "Var[z^2]); sigma: the variance of z (s). Intended: Var[z], which is E[z^2] for a "
        "centered z.",
    ),
    _claim(
        "initialization.kaiming_variance_003",
        "equation",
        _NOTES_003.format("Xavier Init -> ReLU, Var[h]"),
        r"\mathrm{Var}[h] = \frac12 \sigma - \frac{\sigma}{2\pi}",
        ini.s / 2 - ini.s / (2 * sp.pi),
        notes="As printed, sigma/(2 pi) = E[h]^2 (sigma: the variance of z).",
    ),
    _claim(
        "initialization.kaiming_variance_approx_003",
        "equation",
        _NOTES_003.format("Xavier Init -> ReLU, Var[h]"),
        r"\mathrm{Var}[h] \approx \frac12 \mathrm{Var}[z]",
        ini.s / 2,
        approximate=True,
        notes="Var[z] = sigma, the variance of z (s here).",
    ),
    _claim(
        "initialization.kaiming_sigma_003",
        "value",
        _NOTES_003.format("Xavier Init -> ReLU"),
        r"\text{Xavier Init} \hookrightarrow \mathrm{ReLU} \Rightarrow \sigma = "
        r"\sqrt{\frac{2}{D_{in}}}",
        sp.sqrt(2 / ini.D_in),
        printed_value="sqrt(2/D_in)",
        notes="sigma: the weights' standard deviation again (sigma_w). The notes reach it "
        "from '(1/2) sigma^2 V D_in = V', i.e. from Var[h] ≈ (1/2) Var[z].",
    ),
    _claim(
        "initialization.xavier_uniform_001",
        "equation",
        _SEC_001.format("section 3.4, Eq. 34 and Eq. 35; Table 3, Xavier Initialization"),
        r"W_{i,j} \sim U\left(-\sqrt{\frac{6}{n_{in} + n_{out}}}, \sqrt{\frac{6}{n_{in} + "
        r"n_{out}}}\right) \text{ or } W_{i,j} \sim N\left(0, \frac{2}{n_{in} + "
        r"n_{out}}\right)",
        sp.Tuple(ini.XAVIER_HALF_WIDTH, ini.XAVIER_VARIANCE),
        notes="formal: (the uniform's half-width, the Gaussian's variance); read as: the two "
        "types give the weights the same variance (Glorot and Bengio 2010, their Eq. 16).",
    ),
    _claim(
        "initialization.figure3_001",
        "value",
        _SEC_001.format("section 3.4, Figure 3"),
        r"\text{after Xavier initialization, the maximum eigenvalue is always less than 2.0} "
        r"\ ((n_{in}, n_{out}) \in \{(1024, 1024), (1024, 2048), (2048, 2048)\})",
        sp.Integer(2),
        printed_value="2.0",
        notes="Read as the largest singular value (the spectral norm, which bounds a "
        "layer's Lipschitz constant): an n_out x n_in matrix has no eigenvalues unless it is "
        "square, and the figure's mass near zero for square shapes is that of singular "
        "values (quarter-circle law).",
    ),
    _claim(
        "initialization.kaiming_leaky_001",
        "equation",
        _SEC_001.format("section 5.5, Table 3, Kaiming Initialization"),
        r"W_{i,j} \sim N\left(0, \frac{2}{(1 + a^2) \times n_{in}}\right)",
        2 / ((1 + ini.a**2) * ini.n_in),
        notes="a: the negative slope of a leaky ReLU (a = 0: ReLU). Read as He et al. "
        "(2015): the variance that keeps Var of the pre-activations from layer to layer.",
    ),
    _claim(
        "initialization.orthogonal_001",
        "equation",
        _SEC_001.format("section 5.5, Table 3, Orthogonal Initialization"),
        r"\mathbf{U}, \mathbf{S}, \mathbf{V} = \mathrm{SVD}(\mathbf{W}_1),\ \mathbf{I} = "
        r"\mathrm{eye}(\mathbf{W}_1),\ \mathbf{W} = \mathbf{U}\mathbf{I}\mathbf{V}^\top",
        sp.Integer(1),
        notes="formal: every singular value of W (so its spectral norm). SVD: the full one "
        "(U: n_out x n_out, V: n_in x n_in), the only one in which eye(W1) of W1's shape fits "
        "between U and V^T for a rectangular W1.",
    ),
    _claim(
        "initialization.spectral_001",
        "equation",
        _SEC_001.format("section 5.5, Table 3, Spectral Initialization"),
        r"\mathbf{U}, \mathbf{S}, \mathbf{V} = \mathrm{SVD}(\mathbf{W}_1),\ \mathbf{W} = "
        r"\frac{\mathbf{W}_1}{\mathcal{S}[0]}",
        sp.Integer(1),
        notes="formal: the spectral norm of W. S[0]: the first, i.e. the largest, singular "
        "value (NumPy and PyTorch return them in descending order).",
    ),
    _claim(
        "initialization.depth_aware_001",
        "equation",
        _SEC_001.format("section 5.5, Remark 5.5, nu_2 = 1/sqrt(L)"),
        r"W_{i,j} \sim U\left(-\sqrt{\frac{6}{n_{in} + n_{out}}} \frac{1}{\sqrt{L}}, "
        r"\sqrt{\frac{6}{n_{in} + n_{out}}} \frac{1}{\sqrt{L}}\right) \text{ or } W_{i,j} "
        r"\sim N\left(0, \frac{2}{n_{in} + n_{out}} \frac{1}{L}\right)",
        sp.Tuple(ini.XAVIER_HALF_WIDTH / sp.sqrt(ini.L), ini.XAVIER_VARIANCE / ini.L),
        notes="formal: (the uniform's half-width, the Gaussian's variance) of W = W1/sqrt(L) "
        "(Table 3's depth-aware row) for a Xavier W1; read as: both are W1/sqrt(L).",
    ),
)


# --- descent: Lipschitz continuity, smoothness, gradient descent, SGD (000-003) ------------

_S001 = "001_76ce3a8a4b6079c3.txt, {}"
_APPENDIX_000 = "000_fd3535166428b448.txt, Appendix: Lipschitz Continuous and Lipschitz Smooth"
_S002 = "002_665588f2644db48a.txt, {}"
_S003 = "003_54d3154625e0c3ca.txt, {}"
_K1 = sp.Symbol("K_1", positive=True)
_BETA = sp.Symbol("beta_f", positive=True)
_ETA = sp.Symbol("eta", positive=True)
_T = sp.Symbol("T", integer=True, positive=True)
_G = sp.Symbol("G", nonnegative=True)
_DELTA = sp.Symbol("Delta", nonnegative=True)
_THETA, _GRAD = sp.Symbol("theta", real=True), sp.Symbol("grad_L", real=True)
_ALPHA = sp.Symbol("alpha", positive=True)
_COEFFICIENT = "formal: the printed coefficient {}."


def _foundation(claim_id: str, kind: str, source: str, latex: str, formal, **extra) -> Claim:
    return _claim(f"lipschitz_foundations.{claim_id}", kind, source, latex, formal, **extra)


def _descent(claim_id: str, kind: str, source: str, latex: str, formal, **extra) -> Claim:
    source = source if source.startswith("00") else _S003.format(source)
    return _claim(f"descent.{claim_id}", kind, source, latex, formal, **extra)


DESCENT_CLAIMS: tuple[Claim, ...] = (
    _foundation(
        "lemma1",
        "equation",
        _S001.format("section 2.1, Lemma 1, Eq. 3"),
        r"\text{A continuous and differentiable } f \text{ is } K_0\text{-Lipschitz continuous "
        r"if and only if } \|\nabla f(\mathbf{x})\| \leq K_0",
        None,
        notes="Read for f: R^D -> R (a gradient) with the Euclidean norm, as Definition 1 "
        "defaults to, and 'for every x'. The lemma names no domain; Definition 1's is R^D, "
        "which is convex. On a non-convex domain the 'if' direction fails (see the proof's "
        "witness); that is a remark on the unstated domain, not on R^D.",
    ),
    _foundation(
        "lemma_000",
        "equation",
        _APPENDIX_000 + ", Lemma and its proof",
        r"f \text{ is } L\text{-Lipschitz if only if } \sup \|\nabla f(x)\|_2 \leq L",
        None,
        notes="'if only if' is read as 'if and only if', as the two-directional proof shows. "
        "The proof's first direction applies the mean value theorem for integrals to "
        "t -> ||grad f(g(t))||_2, which needs that map continuous (f continuously "
        "differentiable), while the definition assumes f differentiable only; the scalar mean "
        "value theorem on g(t) = f(x + t(y - x)) needs differentiability alone. The printed "
        "integral also drops the factor ||y - x||_2 of |f(y) - f(x)| <= int_0^1 "
        "||grad f(g(t))||_2 ||y - x||_2 dt.",
    ),
    _foundation(
        "definitions",
        "definition",
        _APPENDIX_000
        + "; "
        + _S002.format("L-Lipschitz and beta-Smooth Functions")
        + "; "
        + _S001.format("section 2, Definitions 1 and 4"),
        r"|f(y) - f(x)| \le L\|y - x\|_2,\ \|\nabla f(y) - \nabla f(x)\|_2 \le \beta\|y - "
        r"x\|_2 \ (000: L, \beta \geq 0;\ 002: L, \beta > 0)",
        None,
        notes="Read as: 000's and 002's L-Lipschitz and beta-smooth are 001's Definitions 1 "
        "and 4 for scalar f on R^d with the Euclidean norm (001: K_0, K_1; 000 and 002: L, "
        "beta). They name the same functions; they differ in the constants they admit: 001 "
        "puts no sign on K_0 (a negative one holds only on a one-point domain), 000 asks "
        "L >= 0, 002 asks L > 0, so under 002 a constant function has no least Lipschitz "
        "constant (every L > 0 is admitted, 0 is not), while 001's Example 1 calls its "
        "constant 0. 001 also allows vector-valued f and any p-norm.",
    ),
    _foundation(
        "eq4",
        "equation",
        _S001.format("section 2.1, Eq. 4"),
        r"\text{Continuously differentiable} \subset \text{Lipschitz continuous}",
        None,
        notes="The text reads it as 'every continuously differentiable function is also "
        "Lipschitz continuous'. True on a compact convex set (or for C^1 functions with a "
        "bounded gradient on R^D), and every C^1 function is locally Lipschitz.",
    ),
    _foundation(
        "stricter",
        "equation",
        _S001.format("section 2.1, the paragraph after Eq. 4"),
        r"\text{being continuously differentiable is stricter than being Lipschitz continuous, "
        r"as it requires the function to have a limited gradient or Jacobian}",
        None,
        notes="A bounded gradient is what Lipschitz continuity requires of a differentiable "
        "function (Lemma 1), not what continuous differentiability requires.",
    ),
    _foundation(
        "relu",
        "equation",
        _S001.format("section 2.1, the paragraph after Eq. 4; Remark 2.1, item 1"),
        r"\text{the ReLU function is not continuously differentiable but is Lipschitz "
        r"continuous}",
        sp.Integer(1),
        printed_value="1",
        notes="formal: ReLU's smallest Lipschitz constant (Table 2 prints 1.0; the claim "
        "here is that ReLU is Lipschitz and not differentiable at 0). Remark 2.1's 'Lipschitz "
        "continuity is more general than continuously differentiable' is true in this sense "
        "(ReLU is in the one class and not the other) and false as an inclusion (eq4).",
    ),
    _foundation(
        "example1",
        "value",
        _S001.format("section 2.1, Example 1"),
        r"f = c: 0;\ f = \mathbf{a}^\top \mathbf{x} + 1: \|\mathbf{a}\|;\ f = \mathbf{x}^\top "
        r"\mathbf{x} + 2: \infty",
        sp.Tuple(0, sp.Symbol("a_norm", nonnegative=True), sp.oo),
        printed_value="(0, ||a||, oo)",
        notes="formal: the smallest Lipschitz constants (Euclidean norm, x in R^D), a_norm = "
        "||a||_2 = sqrt(sum_i a_i^2); oo: none exists.",
    ),
    _foundation(
        "lemma2",
        "equation",
        _S001.format("section 2.2, Lemma 2, Eq. 7"),
        r"\text{A continuous and twice differentiable } f \text{ is } K_1\text{-smoothness "
        r"if and only if } \|\nabla^2 f(\mathbf{x})\| < K_1",
        None,
        intended=sp.Symbol("sup_hessian_norm", nonnegative=True) <= _K1,
        notes="||.|| of the Hessian: the spectral norm (the operator norm of the Euclidean "
        "one), for every x. 'K_1-smoothness': K_1-smooth, Definition 4.",
    ),
    _foundation(
        "lemma3",
        "lipschitz",
        _S001.format("section 4.1, Lemma 3, Eq. 42"),
        r"\text{Lip}(F(\mathbf{x}; \{\mathbf{W}^l\})) \leq \prod_{l=1}^L "
        r"\text{Lip}(f^l(\mathbf{W}^l \mathbf{x}^{l-1}))",
        None,
        notes="Lip(f^l(W^l x^{l-1})): the Lipschitz constant of the l-th layer as a map of "
        "x^{l-1}. The text after it says the true constant 'will be smaller than the upper "
        "bound' in practice: it can be equal (the proof's attaining example).",
    ),
    _foundation(
        "eq44",
        "lipschitz",
        _S001.format("section 4.1, Eq. 43-44"),
        r"K_s \leq K_t \leq K_u",
        None,
        notes="K_s: Eq. 43's maximum of the difference quotient over sampled points, K_t: the "
        "true constant, K_u: the product bound of Lemma 3. The text before Eq. 43 adds that "
        "in practice K_t 'will be smaller than' K_u: not always (the proof's attaining "
        "network has K_s = K_t = K_u).",
    ),
    _foundation(
        "eq46",
        "lipschitz",
        _S001.format("section 4.1.1, Eq. 46"),
        r"\text{Lip}(F) \leq \left(\prod_{l=1}^L \text{Lip}(f^l)\right) \text{Lip}(\mathbf{O}"
        r"\mathbf{x}^L) = \left(\prod_{l=1}^L (1 + \text{Lip}(\text{SA}^l))(1 + \text{Lip}"
        r"(\text{FFN}^l))\right) \text{Lip}(\mathbf{O}\mathbf{x}^L) = \left(\prod_{l=1}^L "
        r"\cdots\right) \sigma_{max}(\mathbf{O})",
        None,
        intended=sp.Symbol("Lip_f_l", nonnegative=True)
        <= (1 + sp.Symbol("Lip_SA", nonnegative=True))
        * (1 + sp.Symbol("Lip_FFN", nonnegative=True)),
        notes="f^l is the l-th block of Eq. 45, x -> y + FFN(y) with y = x + SA(x). The "
        "gloss under Eq. 46, 'sigma_max(O) is the maximum absolute eigenvalue of O', is the "
        "paper's reading of sigma_max throughout (see linear.eigenvalue): Lip(O x) is O's "
        "largest singular value, which the claim uses.",
    ),
    _descent(
        "estimates",
        "equation",
        "'GD (Gradient Descent)': full batch, stochastic and mini-batch (lines 9-15)",
        r"\tilde\nabla f = \frac{1}{N}\sum_{i=1}^N \nabla f_i(x);\ \nabla f_i(x);\ "
        r"\frac{1}{|K|}\sum_{k \in K} \nabla f_k(x)",
        1 / sp.Symbol("K", integer=True, positive=True),
        notes="formal: the printed weight 1/|K| of a K-subset's sum. Checked: that the "
        "stochastic and mini-batch estimates are unbiased (their mean "
        "over a uniform index i, or a uniform K-subset, is the full-batch gradient), as the "
        "SGD analysis below assumes (E_t[grad~ f] = grad f). The extraction lost the bars of "
        "|K| ('1/ K').",
    ),
    _descent(
        "steepest",
        "equation",
        "'Gradient Descent!', the Taylor approximation (lines 162-174)",
        r"\text{minimizing } f(x_t) + \langle \nabla f(x_t), \eta v \rangle:\ v = "
        r"-\frac{\nabla f(x_t)}{\|\nabla f(x_t)\|}",
        sp.Integer(-1),
        notes="formal: the printed sign s of v = s grad f/||grad f||. The notes write the "
        "model as f(x_{t+1}) '≈' f(x_t) + <grad f(x_t), eta v> "
        "(first-order Taylor); the statement checked is the minimization of that model, not "
        "the size of the Taylor remainder. The minimization is over unit vectors: the notes do "
        "not write ||v|| = 1, and without it the model has no minimum. The resulting step "
        "x_{t+1} = x_t - eta grad f/||grad f|| is normalized gradient descent, not the update "
        "x' = x - eta grad f written just above it.",
    ),
    _descent(
        "update_002",
        "equation",
        _S002.format("refresher: Local Linear Approximation, update step"),
        r"\Delta\theta = -\alpha \nabla L(\theta_t),\quad \theta^{(t+1)} = \theta^t - "
        r"\Delta\theta",
        _THETA - (-_ALPHA * _GRAD),
        intended=_THETA - _ALPHA * _GRAD,
        notes="formal: theta^{(t+1)} as the two lines give it (one coordinate). As printed the "
        "two lines give theta + alpha grad L: a step up the gradient. "
        "The text's own words ('move in the opposite direction') give theta^{(t+1)} = "
        "theta^t + Delta theta = theta^t - alpha grad L, 003's update. The same sign recurs "
        "in 'L(x + alpha grad L(x))', which the text expects below L(x): to first order it "
        "rises by alpha ||grad L(x)||^2.",
    ),
    _descent(
        "lemma31",
        "equation",
        "Lemma 3.1 and 'Proof for (3.1)' (lines 176-204)",
        r"f \text{ } C^1,\ \|\nabla f(y) - \nabla f(x)\| \leq \beta\|x - y\| \Rightarrow f(y) "
        r"\leq f(x) + \langle \nabla f(x), y - x \rangle + \frac{\beta}{2}\|y - x\|^2",
        _BETA / 2,
        notes=_COEFFICIENT.format("of ||y - x||^2")
        + " The lemma assumes f continuously differentiable only; the notes' proof uses "
        "the Hessian (f twice differentiable) and a bound on it that the notes prove "
        "afterwards (descent.hessian_bound). The C^1 proof needs neither (see step 4).",
    ),
    _descent(
        "proof_second_derivative",
        "equation",
        "'Proof for (3.1)', its third line (line 194)",
        r"g'(t) = (y-x)^T \nabla^2 f(x + t(y-x)) (y-x) \leq \beta \|y-x\|^2",
        sp.Integer(1),
        intended=sp.Integer(2),
        notes="formal: the printed order of the derivative of g (g'). The line above it already "
        "gives g'(t) = <grad f(x + t(y - x)), y - x>; the "
        "quadratic form is g''(t), which the next lines use.",
    ),
    _descent(
        "hessian_bound",
        "equation",
        "after the proof of (3.1) (lines 206-226)",
        r"\|\nabla f(y) - \nabla f(x)\| \leq \beta \|x - y\| \Rightarrow v^T \nabla^2 f(x) v "
        r"\leq \beta \|v\|^2",
        _BETA,
        notes=_COEFFICIENT.format("of ||v||^2")
        + " For f twice continuously differentiable (the notes' phi'(t) = Hess f(...)(y - "
        "x)). The notes stop at the averaged Hessian ('too small'); the limit y -> x along v "
        "finishes the proof.",
    ),
    _descent(
        "decrease",
        "equation",
        "after Lemma 3.1 (lines 184-186)",
        r"x_{t+1} = x_t - \eta\nabla f(x_t) \Rightarrow f(x_{t+1}) \leq f(x_t) - \left[\eta - "
        r"\frac{\beta}{2}\eta^2\right] \|\nabla f(x_t)\|^2",
        _ETA - _BETA * _ETA**2 / 2,
        notes="formal: the bracket, the guaranteed decrease per unit of ||grad f||^2.",
    ),
    _descent(
        "step_condition",
        "equation",
        "the note under the bracket (line 186)",
        r"\left[\eta - \frac{\beta}{2}\eta^2\right]:\ \eta < 1 \text{ then positive}",
        sp.Interval.open(0, 1),
        printed_value="0 < eta < 1",
        notes="formal: the step sizes the notes say make the bracket positive (eta > 0 implied).",
    ),
    _descent(
        "sgd_step",
        "equation",
        "'beta GD', SGD (lines 228-238)",
        r"\mathbb{E}_t[f(x_{t+1})] \leq f(x_t) - \eta\|\nabla f(x_t)\|^2 + \frac{\beta}{2}"
        r"\eta^2 \underbrace{\mathbb{E}_t[\|\tilde\nabla f(x_t)\|^2]}_{\leq G}",
        _BETA / 2,
        notes=_COEFFICIENT.format("of eta^2 G")
        + " With x_{t+1} = x_t - eta grad~ f(x_t) and E_t[grad~ f(x_t)] = grad f(x_t), from "
        "Lemma 3.1 at y = x_{t+1} (the line before it, also checked).",
    ),
    _descent(
        "sgd_rearranged",
        "equation",
        "line 240",
        r"\mathbb{E}[\|\nabla f(x_t)\|^2] \leq \frac{1}{\eta}\left(\mathbb{E}[f(x_t)] - "
        r"\mathbb{E}[f(x_{t+1})]\right) + \frac{\beta}{2}\eta G",
        _BETA / 2,
        notes=_COEFFICIENT.format("of eta G")
        + " Total expectation of the conditional step (the tower property).",
    ),
    _descent(
        "sgd_sum",
        "equation",
        "line 242",
        r"\sum_{t=0}^{T-1} \mathbb{E}[\|\nabla f(x_t)\|^2] \leq \frac{1}{\eta}\left(f_0 - "
        r"f^*\right) + \frac{\beta}{2}\eta G T",
        _DELTA / _ETA + _BETA * _ETA * _G * _T / 2,
        notes="formal: the printed bound, Delta = f_0 - f*. f_0 = f(x_0), f* a lower bound of f "
        "('lower bound' in the notes).",
    ),
    _descent(
        "sgd_min",
        "equation",
        "line 246",
        r"\min \mathbb{E}[\|\nabla f(x_t)\|^2] \leq \frac{1}{\eta T}[f_0 - f^*] + "
        r"\frac{\beta}{2}\eta G",
        _DELTA / (_ETA * _T) + _BETA * _ETA * _G / 2,
        notes="formal: the printed bound, Delta = f_0 - f*; the min is over t = 0..T-1.",
    ),
    _descent(
        "sgd_rate",
        "equation",
        "line 248",
        r"\eta = \frac{1}{\sqrt{T}} \Rightarrow \min \mathbb{E}[\|\nabla f(x_t)\|^2] = "
        r"\mathcal{O}\left(\frac{1}{\sqrt{T}}\right)",
        1 / sp.sqrt(_T),
        notes="formal: the printed order. '= O(.)' read as 'is at most a quantity of order "
        "1/sqrt(T)', the usual abuse.",
    ),
)

# --- updates: momentum, Adadelta, Adam (004 appendix B), 001's Algorithms 1-2 and 3.7 ----

_MIT = "004_a581282367ea7257.txt, appendix B, {}"
_SURVEY = "001_76ce3a8a4b6079c3.txt, {}"


UPDATE_CLAIMS: tuple[Claim, ...] = (
    _claim(
        "momentum.definition_004",
        "definition",
        _MIT.format("B.17-B.20 and Definition 7"),
        r"M_0 = 0,\ M_t = \gamma M_{t-1} + (1-\gamma) g_t,\ W_t = W_{t-1} - \eta M_t: "
        r"\text{a running average between our current gradient and our older gradients}",
        up.RUNNING_AVERAGE,
        notes="formal: M_t in M_{t-1} (M_prev) and g_t. Definition 7 writes gamma_t.",
    ),
    _claim(
        "momentum.weights_004",
        "definition",
        _MIT.format("Definition 7"),
        r"\text{The amount we value new data is given by } \gamma_t.\ \text{Old data is "
        r"scaled by } 1 \gamma_t.",
        sp.Tuple(up.gamma, 1 - up.gamma),
        intended=sp.Tuple(1 - up.gamma, up.gamma),
        notes="formal: (the weight of the new gradient, the weight of M_{t-1}) as the prose "
        "says; the extraction lost the minus of '1 - gamma_t'.",
    ),
    _claim(
        "momentum.example_004",
        "value",
        _MIT.format("B.31-B.32"),
        r"[1, 1, 1],\ \gamma = .1:\ a_1 = .9,\ a_2 = .99,\ a_3 = .999",
        sp.Tuple(sp.Rational(9, 10), sp.Rational(99, 100), sp.Rational(999, 1000)),
        printed_value="(.9, .99, .999)",
    ),
    _claim(
        "momentum.weights_sum_004",
        "equation",
        _MIT.format("B.33-B.34"),
        r"A_T = \sum_{t=0}^{T} \gamma^{(T-t)} (1-\gamma)^t g_t = A_0 \gamma^T + "
        r"\sum_{t=1}^{T} \gamma^{(T-t)} (1-\gamma)^t g_t,\ \text{the weights adding up to 1}",
        up.gamma ** (up.T - up.t) * (1 - up.gamma) ** up.t,
        intended=up.gamma ** (up.T - up.t) * (1 - up.gamma),
        notes="formal: the printed weight of g_t (t >= 1; the t = 0 term is A_0's, gamma^T). "
        "A_t = gamma A_{t-1} + (1 - gamma) g_t from A_0 = 0 (B.18, B.32).",
    ),
    _claim(
        "momentum.bias_correction_004",
        "equation",
        _MIT.format("B.34-B.35 and Concept 15"),
        r"\text{we're missing } \gamma^T,\ \frac{\text{Desired total}}{\text{Real total}} "
        r"= \frac{1}{1 - \gamma^T},\ \widehat{A}_t = A_t \cdot \frac{1}{1 - \gamma^t}",
        1 / (1 - up.gamma**up.T),
        printed_value="1/(1 - gamma^T)",
    ),
    _claim(
        "momentum.algorithm1_001",
        "definition",
        _SURVEY.format("Algorithm 1 (SGD with momentum and decoupled weight decay), lines 4-8"),
        r"\mathbf v_t = \beta \mathbf v_{t-1} + (1 - \beta) \mathbf g_t,\ \mathbf w_t = "
        r"\mathbf w_{t-1} - \alpha_t \mathbf v_t - \alpha_t \lambda \mathbf w_{t-1}",
        sp.Tuple(
            up.beta * up.prev + (1 - up.beta) * up.g,
            up.w_prev
            - up.alpha * (up.beta * up.prev + (1 - up.beta) * up.g)
            - up.alpha * up.lam * up.w_prev,
        ),
        notes="formal: (v_t, w_t) in v_{t-1} (M_prev), g_t, w_{t-1}; v_0 = 0.",
    ),
    _claim(
        "momentum.gradient_point_001",
        "definition",
        _SURVEY.format("Algorithms 1 and 2, line 3"),
        r"\mathbf g_t = \nabla_{\mathbf w} \mathcal L(\mathbf w_t, \boldsymbol\theta, t)",
        up.w_t,
        intended=up.w_prev,
        notes="formal: the point the gradient of step t is taken at; w_t is what the step "
        "computes (lines 6 and 10).",
    ),
    _claim(
        "momentum.nesterov_001",
        "definition",
        _SURVEY.format("section 3.6"),
        r"\text{Momentum SGD (mSGD) (Nesterov, 1983) \ldots\ We have shown the SGD with "
        r"momentum in Algorithm 1.}",
        up.w_prev,
        notes="formal: the point Algorithm 1 takes the gradient at (w_{t-1}, line 3 as "
        "intended); Nesterov's method takes it at the look-ahead point w_{t-1} + mu v_{t-1} "
        "(Sutskever et al. 2013).",
    ),
    _claim(
        "momentum.eq37_001",
        "equation",
        _SURVEY.format("Eq. 36-37"),
        r"\min_\theta \frac1N \sum_i \mathcal L + \sum_l \lambda \|\mathbf W^l\|_2^2 "
        r"\ \Rightarrow\ \mathbf W^l_{new} = \mathbf W^l - \alpha \nabla_{\mathbf W^l} "
        r"\mathcal L - \alpha \lambda \mathbf W^l",
        up.alpha * up.lam * up.w_prev,
        notes="formal: the decay term of Eq. 37, read as the gradient step of Eq. 36's "
        "regulariser (one weight; ||W||_2 read as the Frobenius norm).",
    ),
    _claim(
        "adaptive.step_cap_004",
        "value",
        _MIT.format("B.24"),
        r"\eta_j = \frac{\eta}{G_{t,j} + \varepsilon}:\ \text{our scaling factor will never "
        r"be bigger than } 1/\epsilon",
        1 / up.eps,
        printed_value="1/epsilon",
    ),
    _claim(
        "adaptive.square_root_004",
        "equation",
        _MIT.format("B.25-B.26"),
        r"\text{the update has } g_{t,j} \text{ in the numerator and } g_{t,j}^2 \text{ in the "
        r"denominator; so we take the square root: } \eta_j = \frac{\eta}{\sqrt{G_{t,j} + "
        r"\epsilon}}",
        up.eta / sp.sqrt(up.G_tj + up.eps),
        printed_value="0",
        notes="formal: B.26's step size. Read as: with the square root the update eta_j g_{t,j} "
        "no longer shrinks as the gradients grow: scaling every gradient by c > 0 leaves it "
        "unchanged (degree 0 in c; at eps = 0).",
    ),
    _claim(
        "adaptive.adadelta_004",
        "definition",
        _MIT.format("B.1.2 and Definition 11"),
        r"\text{Adadelta: } W_{t,j} = W_{t-1,j} - \frac{\eta}{\sqrt{G_{t,j} + \varepsilon}} "
        r"g_{t,j},\ G_{t,j} = \gamma G_{t-1,j} + (1-\gamma) g_{t,j}^2",
        up.eta / sp.sqrt(up.G_tj + up.eps),
        notes="formal: Definition 11's step size. Definition 11 defines g_{t,i} and then uses "
        "j (an index slip).",
    ),
    _claim(
        "adaptive.adagrad_004",
        "definition",
        _MIT.format("B.1.3"),
        r"\text{adagrad: rather than find the weighted average } G_t, \text{ we simply sum the "
        r"previous gradients \ldots\ over time, } G_t \text{ becomes too large. So, our step "
        r"size becomes too small}",
        up.prev + up.g,
        intended=up.prev + up.g**2,
        notes="formal: G_t in G_{t-1} (M_prev) and g_t as the sentence says (a sum of the "
        "gradients); intended: of their squares, as G_t averages squares in B.1.2 and "
        "Duchi et al.'s Adagrad sums them.",
    ),
    _claim(
        "adaptive.sparse_004",
        "equation",
        _MIT.format("B.1.2.6 and Concept 12"),
        r"\text{If a variable is much less frequent, then the weighted average } G_t "
        r"\text{ will be much smaller. So, when those data points do appear, the step size "
        r"is much larger}",
        None,
        notes="Read as: a coordinate whose gradient g appears at every k-th step only (0 "
        "between) against one that sees g at every step, both from G_0 = 0, compared at a "
        "step where both see g (eps = 0: the step sizes' ratio is sqrt(G_dense/G_sparse)).",
    ),
    _claim(
        "adaptive.adam_combines_004",
        "equation",
        _MIT.format("B.27-B.30 and Concept 13"),
        r"m_{t,j} = B_1 m_{t-1,j} + (1 - B_1) g_{t,j},\ v_{t,j} = B_2 v_{t-1,j} + (1 - B_2) "
        r"g_{t,j}^2,\ W_{t,j} = W_{t-1,j} - \frac{\eta}{\sqrt{v_{t,j} + \epsilon}} "
        r"m_{t,j}\ (\text{Adam integrates momentum and adadelta})",
        up.eta * up.m_prev / sp.sqrt(up.v_prev + up.eps),
        notes="formal: B.30's step in m_t (m_prev here) and v_t (v_prev). B.30 is not yet "
        "Adam: 004 adds the bias corrections next (B.36, adaptive.bias_correction_004) and "
        "keeps eps under the root (Definition 16).",
    ),
    _claim(
        "adaptive.bias_correction_004",
        "equation",
        _MIT.format("B.36 and Concept 15"),
        r"\widehat m_{t,j} = \frac{m_{t,j}}{1 - B_1^t},\ \widehat v_{t,j} = "
        r"\frac{v_{t,j}}{1 - B_2^t}",
        sp.Tuple(1 / (1 - up.beta1**up.T), 1 / (1 - up.beta2**up.T)),
        notes="formal: the two correction factors (t = T steps). Read as: the corrected "
        "averages are unbiased, E[m_hat_t] = E[g] and E[v_hat_t] = E[g^2], when every g_t "
        "has the same mean and second moment.",
    ),
    _claim(
        "adaptive.definition16_004",
        "definition",
        _MIT.format("Definition 16"),
        r"v_{0,j} = 0\quad v_{t,j} = B_2 m_{t-1,j} + (1 - B_2) g_{t,j}^2",
        up.beta2 * up.m_prev + (1 - up.beta2) * up.g**2,
        intended=up.beta2 * up.v_prev + (1 - up.beta2) * up.g**2,
        notes="formal: v_t in m_{t-1}, v_{t-1} and g_t. B.29 prints v_{t-1}.",
    ),
    _claim(
        "adaptive.adamw_001",
        "definition",
        _SURVEY.format("Algorithm 2 (AdamW), lines 9-10"),
        r"\mathbf w_t = \mathbf w_{t-1} - \alpha_t \boldsymbol\mu_t - \alpha_t \lambda "
        r"\mathbf w_{t-1}",
        up.w_prev - up.alpha * up.mu - up.alpha * up.lam * up.w_prev,
        notes="formal: w_t in w_{t-1} and the direction mu_t = m_hat_t/sqrt(v_hat_t) of line 8 "
        "read as intended (optimizers.algorithm2_update).",
    ),
    _claim(
        "mixed_precision.fp32_range_001",
        "value",
        _SURVEY.format("section 3.7"),
        r"\text{FP32: minimum positive normal } 2^{-126} \approx 1.18 \times 10^{-38},\ "
        r"\text{largest } 2^{128}(1 - 2^{-24}) \approx 3.4 \times 10^{38}",
        sp.Tuple(sp.Rational(1, 2**126), sp.Integer(2) ** 128 * (1 - sp.Rational(1, 2**24))),
        printed_value="(1.18e-38, 3.4e38)",
    ),
    _claim(
        "mixed_precision.fp16_range_001",
        "value",
        _SURVEY.format("section 3.7"),
        r"\text{FP16: minimum positive normal } 2^{-14} \approx 6.10 \times 10^{-5},\ "
        r"\text{maximum } (2 - 2^{-10}) \times 2^{15} = 65504",
        sp.Tuple(sp.Rational(1, 2**14), (2 - sp.Rational(1, 2**10)) * 2**15, 65504),
        printed_value="(6.10e-5, 65504)",
    ),
    _claim(
        "mixed_precision.eq38_001",
        "equation",
        _SURVEY.format("Eq. 38"),
        r"(-1)^{\text{Sign}} \times 2^{\text{Exponent}-15} \times \left(1 + "
        r"\frac{\text{Fraction}}{1024}\right)",
        None,
        notes="formal: the value of a binary16 bit pattern, for every pattern (the text "
        "names no range of the exponent field).",
    ),
    _claim(
        "mixed_precision.underflow_001",
        "value",
        _SURVEY.format("section 3.7"),
        r"10^{-5} \times 10^{-4} = 10^{-9}:\ \text{in FP16, } 10^{-9} \text{ is rounded to "
        r"zero}",
        sp.Integer(0),
        printed_value="0",
    ),
)

CLAIMS: tuple[Claim, ...] = (
    ACTIVATION_CLAIMS
    + NORM_CLAIMS
    + BATCHNORM_CLAIMS
    + ROW_CLAIMS
    + ATTENTION_CLAIMS
    + THEORY_CLAIMS
    + INITIALIZATION_CLAIMS
    + DESCENT_CLAIMS
    + UPDATE_CLAIMS
)


def claim(claim_id: str) -> Claim:
    """The claim with the given id."""
    for c in CLAIMS:
        if c.id == claim_id:
            return c
    raise KeyError(f"no claim {claim_id!r}")
