"""The report's sections for statements about no single module: Adam's update."""

from __future__ import annotations

import sympy as sp

from derive.catalog import section_entry
from derive.definitions import theory as th
from proofs import theory as pt

#: The (beta1, beta2) pairs the sources print, exactly.
PRINTED_BETAS = (
    pt.DEFAULT,
    (sp.Rational(9, 10), sp.Rational(99, 100)),
    (sp.Rational(9, 10), sp.Rational(95, 100)),
)


def _row(first: sp.Expr, second: sp.Expr) -> str:
    printed = th.update_bound(first, second)
    supremum = pt.limit_of_largest(first, second)
    second_step = th.update([1, 1], first, second)
    return (
        f"| ({float(first):g}, {float(second):g}) | {sp.N(printed, 4)} "
        f"| {sp.N(second_step, 4)} | {sp.N(supremum, 4)} |"
    )


def theory_section(name: str) -> list[str]:
    """The section text of topic ``name`` (without its claims)."""
    topic = section_entry(name)
    if name == "smoothness":
        return [
            f"### {topic.title}",
            "",
            f"Source: {topic.source}. A function is L-Lipschitz when $|f(y) - f(x)| \\le "
            "L \\|y - x\\|_2$ and beta-smooth when its gradient is beta-Lipschitz (000 and "
            "002 define both alike); 000's two examples show that neither implies the other. "
            "Each statement is decided below by the smallest constants (oo where none "
            "exists).",
            "",
        ]
    return [
        f"### {topic.title}",
        "",
        f"Source: {topic.source}. Adam keeps, per coordinate, $m_t = \\beta_1 m_{{t-1}} + "
        "(1 - \\beta_1) g_t$ and $v_t = \\beta_2 v_{t-1} + (1 - \\beta_2) g_t^2$ from $m_0 = "
        "v_0 = 0$. Section 6.3 discusses $\\mu_t = m_t / \\sqrt{v_t}$, without Algorithm 2's "
        "bias corrections; that is the quantity of the claims below (no eps). Unrolled, "
        "Cauchy-Schwarz with the weights $\\beta_2^{t-i}$ bounds it for every t, and the "
        "bound is attained:",
        "",
        "$$\\sup_{g_1..g_t} |\\mu_t| = \\frac{1-\\beta_1}{\\sqrt{1-\\beta_2}} "
        "\\sqrt{\\sum_{k<t} (\\beta_1^2/\\beta_2)^k},$$",
        "",
        "growing with t to $\\frac{1-\\beta_1}{\\sqrt{1-\\beta_2}} / \\sqrt{1 - "
        "\\beta_1^2/\\beta_2}$ when $\\beta_1^2 < \\beta_2$. The printed constant "
        "$(1-\\beta_1)/\\sqrt{1-\\beta_2}$ is $|\\mu_1|$, the first step's. For the betas the "
        "paper prints (|mu_2| at g = (1, 1), a gradient that keeps its sign):",
        "",
        "| (beta1, beta2) | printed bound | \\|mu_2\\| at g = (1, 1) | sup over t |",
        "|---|---|---|---|",
        *(_row(*betas) for betas in PRINTED_BETAS),
        "",
    ]
