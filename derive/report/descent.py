"""The report's sections on Lipschitz continuity, smoothness, gradient descent and SGD: each
source's notation mapped onto one, and the facts the claims below rest on, computed here."""

from __future__ import annotations

import sympy as sp

from derive.catalog import section_entry
from derive.definitions import descent as de
from proofs import descent as pd

#: Each source's names for the quantities, in the report's order: (ours, 001, 000, 002, 003).
NOTATION: tuple[tuple[str, ...], ...] = (
    ("Lipschitz constant of f", "$K_0$", "$L$", "$L$", "-"),
    (
        "Lipschitz constant of the gradient (smoothness)",
        "$K_1$",
        "$\\beta$",
        "$\\beta$",
        "$\\beta$",
    ),
    ("Lipschitz constant of the Hessian", "$K_2$", "-", "-", "-"),
    ("admitted constants", "any sign written", "$L, \\beta \\ge 0$", "$L, \\beta > 0$", "-"),
    ("step size", "-", "$\\eta$ (the figures)", "$\\alpha$", "$\\alpha$, then $\\eta$"),
    ("bound on $\\mathbb{E}\\|\\tilde\\nabla f\\|^2$", "-", "-", "-", "$G$"),
)


def _table() -> list[str]:
    lines = [
        "| quantity | 001 | 000 | 002 | 003 |",
        "|---|---|---|---|---|",
    ]
    return [*lines, *(f"| {' | '.join(row)} |" for row in NOTATION)]


def _foundations(title: str, source: str) -> list[str]:
    return [
        f"### {title}",
        "",
        f"Source: {source}.",
        "",
        "All four sources use the Euclidean norm for these notions (001 allows any p-norm and "
        "defaults to the Euclidean one). Their names for the same quantities:",
        "",
        *_table(),
        "",
        "The symbol used below for the smoothness constant is `beta_f` (SymPy reads a bare "
        "`beta` as the beta function). For a differentiable f on $\\mathbb{R}^D$ the least "
        "Lipschitz constant is $\\sup_x \\|\\nabla f(x)\\|_2$ (Lemma 1 and 000's lemma, "
        "proven below), and the least smoothness constant is $\\sup_x \\|\\nabla^2 "
        "f(x)\\|_2$ (Lemma 2 with $\\le$). Neither class of functions contains the other: "
        "$x^2$ is smooth and not Lipschitz, ReLU Lipschitz and not differentiable.",
        "",
    ]


def _descent(title: str, source: str) -> list[str]:
    interval = pd.coefficient_interval()
    witness = pd.decrease_witness()
    rate = pd.rate()["scaled"]
    return [
        f"### {title}",
        "",
        f"Source: {source}.",
        "",
        "003's notation: f is $\\beta$-smooth (its gradient $\\beta$-Lipschitz), gradient "
        "descent steps $x_{t+1} = x_t - \\eta \\nabla f(x_t)$, SGD replaces the gradient by an "
        "estimate $\\tilde\\nabla f$ with $\\mathbb{E}_t[\\tilde\\nabla f(x_t)] = \\nabla "
        "f(x_t)$ and $\\mathbb{E}_t\\|\\tilde\\nabla f(x_t)\\|^2 \\le G$; $f^*$ is a lower "
        "bound of f. The descent lemma (Lemma 3.1) gives, for one step,",
        "",
        f"$$f(x_{{t+1}}) \\le f(x_t) - \\left({sp.latex(de.descent_coefficient())}\\right)"
        "\\|\\nabla f(x_t)\\|^2,$$",
        "",
        f"a guaranteed decrease exactly for $\\eta \\in {sp.latex(interval)}$ (the notes say "
        f"'$\\eta < 1$'; at $\\beta = {pd.WITNESS_BETA}$, $\\eta = {sp.latex(pd.WITNESS_ETA)}$ "
        f"one step on $f = 5x^2$ from $x_0 = 1$ goes to $x_1 = {witness['x1']}$ and f from "
        f"{witness['f0']} to {witness['f1']}). Summed over T steps of SGD, the smallest "
        "expected squared gradient norm is at most "
        f"$\\frac{{f_0 - f^*}}{{\\eta T}} + \\frac{{\\beta}}{{2}}\\eta G$; at $\\eta = "
        f"1/\\sqrt{{T}}$ that is $({sp.latex(rate)})/\\sqrt{{T}}$, with "
        "$\\Delta = f_0 - f^*$.",
        "",
    ]


def descent_section(name: str) -> list[str]:
    """The section text of topic ``name`` (without its claims)."""
    topic = section_entry(name)
    if name == "lipschitz_foundations":
        return _foundations(topic.title, topic.source)
    return _descent(topic.title, topic.source)
