"""The BatchNorm section of the report: the derivation step by step, as the notes do it,
for both denominators, with the mapping between the sources' notations and ours."""

from __future__ import annotations

import sympy as sp

from derive.definitions import batchnorm as bn
from derive.definitions.norms import eps
from derive.report.norms import eps_facts

#: The sources' notations: (quantity, liptable, 001 Eq. 15-17, 004 B.2, 000 and 002).
NOTATION_ROWS = (
    (
        "one feature's batch values",
        "$x_1, \\dots, x_M$ (column j of x)",
        "$X_{j,1}, \\dots, X_{j,N}$ (row j of the D x N matrix X)",
        "$Z_{i1}, \\dots, Z_{iK}$ (row i of Z)",
        "$x_1, \\dots, x_m$",
    ),
    ("batch size", "$M$ (N, or N H W for images)", "$N$", "$K$", "$m$"),
    (
        "mean, biased variance",
        "$\\mu$, $\\sigma^2$",
        "$\\mu_j$, $\\sigma_j^2$",
        "$\\mu_i$, $\\sigma_i^2$",
        "$\\mu_{\\mathcal B}$, $\\sigma_{\\mathcal B}^2$ ($\\delta_\\beta^2$ in 002)",
    ),
    (
        "normalized, output",
        "$\\hat x$, $y = \\gamma \\hat x + \\beta$",
        "$\\widehat X$, $\\mathrm{BN}$",
        "$\\overline Z$, $\\widehat Z = G \\overline Z + B$",
        "$\\hat x$, $h$ or $y$",
    ),
    (
        "upstream gradient",
        "$g_k = \\partial L/\\partial y_k$",
        "--",
        "$\\partial L/\\partial \\widehat Z_{ik}$",
        "--",
    ),
)


def _notation() -> str:
    header = "| quantity | liptable | 001 (Eq. 15-17) | 004 (B.2) | 000, 002 |"
    rows = ["| " + " | ".join(row) + " |" for row in NOTATION_ROWS]
    return "\n".join([header, "|---|---|---|---|---|", *rows]) + "\n"


RUNNING = """\
Running statistics (inference mode uses them instead of the batch's). PyTorch, which the
kernels follow (`kernels.batchnorm.running_update`):
$\\mu_{run} \\leftarrow (1 - \\text{momentum})\\,\\mu_{run} + \\text{momentum}\\,\\mu$ and
$\\sigma^2_{run} \\leftarrow (1 - \\text{momentum})\\,\\sigma^2_{run} + \\text{momentum}\\,
\\frac{M}{M-1}\\sigma^2$ (the unbiased batch variance; M = 1 leaves it undefined, NaN).
The notes (003_54d3154625e0c3ca.txt) write $\\mu^{run} \\leftarrow m\\,\\mu^{run} + (1-m)
\\,\\mu^{batch}$: their m is 1 - momentum (PyTorch's default momentum 0.1 is m = 0.9), and
their batch variance is the biased one of their $\\hat x$, so their variance update uses
$\\sigma^2$ where PyTorch uses $\\frac{M}{M-1}\\sigma^2$.
"""


def _latex(expr: sp.Expr) -> str:
    return sp.latex(sp.simplify(expr))


def _derivation_lines(denom: str) -> list[str]:
    steps = bn.derivation(denom)
    spread = steps.spread
    s = sp.latex(spread)
    sqrt_form = denom == "sqrt_var_eps"
    lines = [
        f"#### Derivation, denominator `{denom}`",
        "",
        "Forward, one feature:",
        "",
        f"$$\\mu = \\frac1M\\sum_{{k=1}}^M x_k,\\quad \\sigma^2 = \\frac1M\\sum_{{k=1}}^M "
        f"(x_k - \\mu)^2,\\quad \\hat x_k = {sp.latex(steps.xhat)},\\quad y_k = \\gamma \\hat x_k"
        " + \\beta$$",
        "",
        f"**Step 1: the three paths.** $x_j$ changes $\\hat x_k$ directly (when j = k), "
        f"through $\\mu$, and through ${s}$. By the multivariable chain rule (004 B.44, B.50):",
        "",
        f"$$\\frac{{\\partial \\hat x_k}}{{\\partial x_j}} = \\frac{{\\partial \\hat x_k}}"
        f"{{\\partial x_k}}\\frac{{\\partial x_k}}{{\\partial x_j}} + \\frac{{\\partial \\hat x_k}}"
        f"{{\\partial \\mu}}\\frac{{\\partial \\mu}}{{\\partial x_j}} + \\frac{{\\partial \\hat "
        f"x_k}}{{\\partial {s}}}\\frac{{\\partial {s}}}{{\\partial x_j}}$$",
        "",
        "**Step 2: the partials of $\\hat x_k$,** each holding the other two variables fixed "
        "(`sympy.diff`; 004 B.46 for the std + eps form):",
        "",
        f"$$\\frac{{\\partial \\hat x_k}}{{\\partial x_k}} = {_latex(steps.by_x)},\\quad "
        f"\\frac{{\\partial \\hat x_k}}{{\\partial \\mu}} = {_latex(steps.by_mu)},\\quad "
        f"\\frac{{\\partial \\hat x_k}}{{\\partial {s}}} = {_latex(steps.by_spread)}$$",
        "",
        "**Step 3: the partials of the statistics** (004 B.47-B.49):",
        "",
        f"$$\\frac{{\\partial x_k}}{{\\partial x_j}} = \\delta_{{jk}},\\quad "
        f"\\frac{{\\partial \\mu}}{{\\partial x_j}} = {sp.latex(steps.mu_by_x)},\\quad "
        f"\\frac{{\\partial {s}}}{{\\partial x_j}} = {sp.latex(steps.spread_by_x)}$$",
        "",
    ]
    if sqrt_form:
        lines += [
            "($\\sigma^2$ also depends on $x_j$ through $\\mu$, but that path contributes "
            "$\\frac{\\partial \\sigma^2}{\\partial \\mu}\\frac{\\partial \\mu}{\\partial x_j} = "
            "-\\frac2M\\sum_k (x_k - \\mu)\\cdot\\frac1M = 0$.)",
            "",
        ]
    else:
        lines += [
            "($\\sigma = \\sqrt{\\sigma^2}$, so $\\partial\\sigma/\\partial x_j = "
            "\\frac{1}{2\\sigma}\\cdot\\frac{2(x_j - \\mu)}{M}$; the path through $\\mu$ "
            "inside $\\sigma^2$ vanishes as in the other form. At $\\sigma = 0$ this partial "
            "is undefined, but every deviation is 0 there and the sigma path's product tends "
            "to 0: the derivative exists, $(\\delta_{jk} - 1/M)/\\epsilon$.)",
            "",
        ]
    assembled = sp.simplify(steps.assembled)
    lines += [
        "**Step 4: assemble** (001 Eq. 16-17 for the sqrt form; 004 B.52 and Key Equation 21"
        " for the std form):",
        "",
        f"$$\\frac{{\\partial \\hat x_k}}{{\\partial x_j}} = {sp.latex(steps.assembled)}$$",
        "",
        "that is,",
        "",
        f"$$\\frac{{\\partial \\hat x_k}}{{\\partial x_j}} = {sp.latex(assembled)}$$",
        "",
        "checked against `sympy.diff` of the whole forward at every entry for M = 1..4.",
        "",
        "**Step 5: through $\\gamma$ and $\\beta$** (004 B.42): "
        "$\\partial y_k/\\partial \\hat x_k = \\gamma$, so "
        "$\\partial y_k/\\partial x_j = \\gamma\\,\\partial \\hat x_k/\\partial x_j$.",
        "",
        "**Step 6: the input gradient** (004 B.53) sums over the batch, because $x_j$ moves "
        "every $y_k$. With $d_k = x_k - \\mu$, the scale $r$ ("
        + ("$1/\\sqrt{\\sigma^2+\\epsilon}$" if sqrt_form else "$1/(\\sigma+\\epsilon)$")
        + ") and $w = "
        + ("r^2" if sqrt_form else "r/\\sigma")
        + "$, the three terms of Step 4 give three sums:",
        "",
        "$$\\frac{\\partial L}{\\partial x_j} = \\sum_k g_k \\gamma \\frac{\\partial \\hat x_k}"
        "{\\partial x_j} = r\\Big(\\gamma g_j - \\frac1M\\sum_k \\gamma g_k - d_j\\, w\\, "
        "\\frac1M\\sum_k \\gamma g_k d_k\\Big)$$",
        "",
        "which is the kernel's O(M) form, proven equal to `sympy.diff` for a symbolic batch "
        "size M (the feature's mean and variance as sums over the batch) and for M = 1..5 "
        "(`derive.definitions.batchnorm.closed_form_proof`).",
        "",
        "**Step 7: the parameter gradients** (004 B.55, B.57, Key Equation 22):",
        "",
        "$$\\frac{\\partial L}{\\partial \\beta} = \\sum_k g_k,\\qquad "
        "\\frac{\\partial L}{\\partial \\gamma} = \\sum_k g_k \\hat x_k$$",
        "",
    ]
    return lines


def batchnorm_section() -> list[str]:
    """The module section of BatchNorm (without its claims)."""
    lines = [
        "### BatchNorm",
        "",
        "Each feature is normalized over the batch: the M = N rows of an (N, D) input, or "
        "the N H W positions of one channel of an (N, C, H, W) input. Two denominators "
        "appear in the sources: $\\sqrt{\\sigma^2 + \\epsilon}$ (001 Eq. 15, 000, 002, "
        'PyTorch; `denom="sqrt_var_eps"`) and $\\sigma + \\epsilon$ (004 Definition 17; '
        '`denom="std_plus_eps"`), both with the biased variance. Inference mode replaces '
        "the batch's $\\mu, \\sigma^2$ by the running statistics and is affine.",
        "",
        "Notation:",
        "",
        _notation(),
        RUNNING,
    ]
    for denom in bn.DENOMS:
        lines += _derivation_lines(denom)
    lines += [
        "#### Lipschitz constants",
        "",
        "The Jacobian with respect to the whole batch is block diagonal, one M x M block "
        "per feature, $J_j = \\gamma_j r_j (I - \\mathbf 1\\mathbf 1^\\top/M - d d^\\top w/M)$. "
        "For the sqrt form this is LayerNorm's matrix with D = M and a scalar gamma, so its "
        "2-norm is $|\\gamma_j|/\\sqrt{\\sigma_j^2+\\epsilon}$ for M >= 3: at a batch the "
        "printed $\\max_j |\\gamma_j|/\\sqrt{\\sigma_j^2+\\epsilon}$ is exact; over all batches "
        "the supremum is $\\max_j|\\gamma_j|/\\sqrt{\\epsilon}$ (constant features); in "
        "inference mode the map is affine with constant $\\max_j |\\gamma_j|/"
        "\\sqrt{\\sigma^2_{run,j}+\\epsilon}$. For the std form replace "
        "$\\sqrt{\\sigma^2+\\epsilon}$ by $\\sigma+\\epsilon$ and $\\sqrt\\epsilon$ by "
        "$\\epsilon$.",
        "",
        "#### float16",
        "",
        "Strict half arithmetic (`strict_fp16=True`) sums each feature's batch in half: a "
        "constant feature $2^k$ with $M = 2^m$ gives NaN exactly when $k + m \\ge 16$ (the "
        "sum reaches 65536, which rounds to inf), and a feature of $\\pm 2^k$ collapses to "
        "beta exactly when $2k + m \\ge 16$ (the sum of squares overflows, r = 0). Mixed mode"
        " computes the statistics in float64 and stays exact. eps in half precision:",
        "",
        *eps_facts(),
        "",
        f"(The std + eps form adds eps = {sp.latex(eps)} to sigma, not to the variance: with "
        "eps rounded to 0 a constant feature is 0/0 as well; and at a constant feature its "
        "scale is 1/eps, which overflows half once eps rounds to 2^-16 = 1.53e-5 or less, so "
        "with the default eps = 1e-5 strict mode gives NaN on every constant feature.)",
        "",
    ]
    return lines
