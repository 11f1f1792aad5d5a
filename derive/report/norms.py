"""Report sections of the normalization modules: definitions, the closed forms the kernels
use, local Lipschitz constants and float16 facts, all computed from derive/definitions/norms.py."""

from __future__ import annotations

import numpy as np
import sympy as sp

from derive.definitions import norms
from derive.definitions.norms import WEIGHTNORM, RowNorm, row_norm

#: The eps values whose float16 rounding the report lists.
EPS_VALUES = (1e-5, 1e-6, 1e-8, 1e-12)

LOCAL = {
    "layernorm": (
        r"\|J(x)\|_2 = \frac{|c|}{\sqrt{\sigma^2(x) + \epsilon}}\ (D \ge 3),\quad "
        r"\frac{|c|\,\epsilon}{(\sigma^2(x) + \epsilon)^{3/2}}\ (D = 2),\quad 0\ (D = 1)",
        "for gamma = c 1, sigma^2(x) the row's variance; for any gamma at most "
        "max|gamma|/sqrt(sigma^2 + eps). The ratio to the global constant is "
        "sqrt(eps/(sigma^2 + eps)): for a unit-variance row and eps = 1e-5, 0.00316.",
    ),
    "rmsnorm": (
        r"\|J(x)\|_2 = \frac{|c|}{\sqrt{\overline{x^2} + \epsilon}}\ (D \ge 2),\quad "
        r"\frac{|c|\,\epsilon}{(x^2 + \epsilon)^{3/2}}\ (D = 1)",
        "for gamma = c 1, with the row's mean square; for any gamma at most "
        "max|gamma|/sqrt(mean(x^2) + eps).",
    ),
    "centernorm": (
        r"\|J\|_2 = \frac{D}{D-1}\|\mathrm{diag}(\gamma)(I - \mathbf{1}\mathbf{1}^\top/D)\|_2",
        "the same at every x (CenterNorm is linear).",
    ),
    "weightnorm": (r"\|J\|_2 = \sigma_{\max}(W)", "the same at every x (WeightNorm is linear)."),
}


def _latex(expr: sp.Expr) -> str:
    """LaTeX of a stage expression, with the element's deviation written d_i."""
    return sp.latex(expr.subs({norms.d: sp.Symbol("d_i"), norms.d_j: sp.Symbol("d_j")}))


def _half(value: float) -> float:
    return float(np.float16(value))


def eps_facts() -> list[str]:
    """The float16 rounding of each eps of :data:`EPS_VALUES`, as report lines."""
    lines = []
    for eps in EPS_VALUES:
        rounded = _half(eps)
        if rounded == 0:
            lines.append(
                f"- eps = {eps:g} rounds to 0 in half precision (anything at or below 2^-25 = "
                f"{2.0**-25:.4g} does): strict mode divides 0 by 0 on a constant row (NaN)."
            )
        else:
            error = (rounded - eps) / eps
            lines.append(
                f"- eps = {eps:g} rounds to {rounded!r} in half precision (a subnormal, "
                f"relative error {error:+.2%})."
            )
    return lines


def _strict_facts(module: RowNorm) -> list[str]:
    lines = ["Strict half arithmetic (`strict_fp16=True`), naive row sums in half:", ""]
    if module.centered:
        lines.append(
            "- The row sum overflows once it reaches 65520 (rounds to inf): a constant row "
            "of c = 2^k with D = 2^m gives NaN exactly when c D >= 65536 (the mean is inf, "
            "x - mean is -inf); the exact output is beta."
        )
    if module.scaled_by_moment:
        what = "(x - mean)^2" if module.centered else "x^2"
        lines.append(
            f"- The sum of {what} overflows at 65520: for rows of +-2^k "
            f"({'alternating' if module.centered else 'any signs'}) with D = 2^m this "
            "happens exactly when 2k + m >= 16, and then r = 1/sqrt(inf) = 0 and the output "
            "collapses to beta; already a single "
            + ("|x - mean|" if module.centered else "|x|")
            + " >= 256 squares to inf. Mixed mode "
            "computes the sums in float64 and stays exact."
        )
        lines += eps_facts()
    lines += [
        "",
        "Mixed mode (the default) widens half inputs to float32, computes in float64 and "
        "rounds once: a result is inf exactly when the correctly rounded exact value is.",
        "",
    ]
    return lines


def _row_section(module: RowNorm) -> list[str]:
    size = 3
    xs, _, _, y = module.forward(size)
    lines = [
        f"### {module.title}",
        "",
        f"Definition ({module.source}), PyTorch's eps convention, one row of length D:",
        "",
        f"$$y_i = {_latex(module.output)},\\quad r = {_latex(module.scale)}$$",
        "",
    ]
    if module.centered:
        lines.append("with $d_i = x_i - \\bar x$ and $s = \\frac1D\\sum_i d_i^2$ (the variance).")
    else:
        lines.append("with $d_i = x_i$ and $s = \\frac1D\\sum_i x_i^2$ (the mean square).")
    if module.has_eps:
        lines += [
            "",
            "The paper adds its eps to a squared norm: $\\epsilon_p = D\\epsilon$.",
        ]
    lines += [
        "",
        "Closed forms the kernels evaluate (with $z_i = d_i r$, $a_i = \\gamma_i g_i$, "
        "$m_a = \\overline{a}$, $m_{az} = \\overline{a z}$, $\\delta$ the Kronecker delta), "
        "each proven equal to `sympy.diff` of the forward for a symbolic D (the Jacobian's "
        "entry, the VJP's and dgamma's, with the row's statistics as sums over 1..D) and at "
        "D = 1..5 (`derive.definitions.norms.closed_form_proof`):",
        "",
        f"$$\\frac{{\\partial L}}{{\\partial x_i}} = {_latex(module.vjp)},\\quad "
        f"\\frac{{\\partial L}}{{\\partial \\gamma_i}} = \\sum_{{\\text{{rows}}}} "
        f"{_latex(module.dgamma_term)},\\quad "
        f"\\frac{{\\partial L}}{{\\partial \\beta_i}} = \\sum_{{\\text{{rows}}}} g_i$$",
        "",
        f"$$J_{{ij}} = \\frac{{\\partial y_i}}{{\\partial x_j}} = "
        f"{_latex(module.jacobian_entry)}$$",
        "",
        f"For example, at D = {size} `sympy.diff` gives "
        f"$\\partial y_1/\\partial x_1 = {sp.latex(sp.simplify(y[0].diff(xs[0])))}$.",
        "",
        "Local Lipschitz constant (the Jacobian's 2-norm at an input):",
        "",
        f"$${LOCAL[module.key][0]}$$",
        "",
        LOCAL[module.key][1],
        "",
        "#### float16",
        "",
        *_strict_facts(module),
    ]
    return lines


def _weightnorm_section() -> list[str]:
    module = WEIGHTNORM
    return [
        "### WeightNorm",
        "",
        f"Definition ({module.source}): $y = x W^\\top$ with "
        f"$W_{{ij}} = {sp.latex(module.weight)}$, $r = {sp.latex(module.scale)}$, $q = "
        "\\|v_i\\|^2$ (eps = 0 is PyTorch's `weight_norm`).",
        "",
        "Closed forms the kernels evaluate (with $\\partial L/\\partial W = g^\\top x$ and "
        "$p = \\sum_j (\\partial L/\\partial W_{ij}) v_{ij}$), proven equal to `sympy.diff` "
        "at D = 1..5, O = 1, 2:",
        "",
        f"$$\\frac{{\\partial L}}{{\\partial x}} = g W,\\quad "
        f"\\frac{{\\partial L}}{{\\partial v_{{ij}}}} = {sp.latex(module.dv)},\\quad "
        f"\\frac{{\\partial L}}{{\\partial \\gamma_i}} = {sp.latex(module.dgamma)}$$",
        "",
        "Local Lipschitz constant:",
        "",
        f"$${LOCAL['weightnorm'][0]}$$",
        "",
        LOCAL["weightnorm"][1],
        "",
        "#### float16",
        "",
        "Strict half arithmetic: $\\|v_i\\|^2$ overflows at 65520 (a row of v with an entry "
        "of magnitude 256 already does), so r = 0 and the row of W collapses to 0; the "
        "products x W^T are naive half dot products. Mixed mode computes W and the products "
        "in float64 and rounds once.",
        "",
    ]


def norm_section(name: str) -> list[str]:
    """The module section of a normalization (without its claims)."""
    if name == "weightnorm":
        return _weightnorm_section()
    if name == "normalization":
        return [
            "Rankings of the normalizations (Eq. 50-52). Eq. 50 ranks them by how finely "
            "they centralize coordinates, a qualitative statement with nothing to prove; "
            "Eq. 51 and 52 rank them by their Lipschitz constants and are checked below.",
            "",
        ]
    return _row_section(row_norm(name))
