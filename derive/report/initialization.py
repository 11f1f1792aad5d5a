"""The report's sections for backpropagation through ``W = X Y`` with 003's activations
(topic ``backprop``) and for initialization (topic ``initialization``): the sources'
notation mapped onto liptable's, and what the claims below are read as."""

from __future__ import annotations

import sympy as sp

from derive.catalog import section_entry
from derive.definitions import initialization as d
from proofs import initialization as pi


def _edges() -> list[str]:
    """Figure 3's shapes with the limit of the largest singular value at each."""
    rows = []
    for fan_in, fan_out in pi.XAVIER_SHAPES:
        edge = sp.simplify(pi.edge(fan_in, fan_out))
        rows.append(f"| ({fan_in}, {fan_out}) | ${sp.latex(edge)}$ | {sp.N(edge, 8)} |")
    return rows


def _shape(expr: sp.MatrixExpr) -> str:
    return "(" + ", ".join(sp.sstr(size) for size in expr.shape) + ")"


def _defined(expr: sp.MatrixExpr) -> str:
    """Whether ``expr`` is defined at :data:`proofs.initialization.WITNESS_SIZES`."""
    value = pi.concrete(expr, pi.WITNESS_SIZES)
    return "not defined" if value is None else f"defined, of shape {value.shape}"


def initialization_section(name: str) -> list[str]:
    """The section text of topic ``name`` (without its claims)."""
    topic = section_entry(name)
    if name == "backprop":
        return [
            f"### {topic.title}",
            "",
            f"Source: {topic.source}.",
            "",
            "Notation. $W = XY$ with $X$ of shape (n, k), $Y$ of shape (k, m); the scalar loss "
            "$\\mathcal{L}$ depends on X and Y through W only, and $G = \\partial "
            "\\mathcal{L}/\\partial W$ is known. Each gradient has its variable's shape, entry "
            "(p, q) being $\\partial \\mathcal{L} / \\partial X_{pq}$ (PyTorch's `.grad`). To "
            "first order $d\\mathcal{L} = \\mathrm{tr}(G^T dW)$ and $dW = dX\\,Y + X\\,dY$, so "
            "the gradients are those of $\\mathrm{tr}(G^T X Y)$; the claims are proven for "
            "symbolic n, k, m twice, by SymPy's matrix calculus and by index sums with "
            f"symbolic bounds. The transposed variant $Y^T G$ is refused: it has shape "
            f"{_shape(d.Y.T * d.G)}, not {_shape(d.X)}, and at (n, k, m) = "
            f"{pi.WITNESS_SIZES} it is {_defined(d.Y.T * d.G)}.",
            "",
            "Activations. 003's $\\sigma'(z) = \\sigma(z)(1 - \\sigma(z))$ and its ReLU "
            "derivative (1 for z > 0, 0 for z <= 0) are the claims `sigmoid.equation_003` and "
            "`relu.equation_003` in the sections Sigmoid and ReLU. ReLU is not differentiable "
            "at 0; the printed 0 there is one element of the subdifferential [0, 1], and "
            "PyTorch's and JAX's convention. 003's remarks 'not zero centered / zero centered "
            "/ not zero centered' stand beside sigmoid, tanh and ReLU; they are read as "
            "'the function is odd' (its range is symmetric about 0 and its mean is 0 for "
            "every input distribution symmetric about 0), and decided below.",
            "",
        ]
    return [
        f"### {topic.title}",
        "",
        f"Source: {topic.source}.",
        "",
        "Notation. 003 writes $\\sigma$ for two different things. In its Xavier part "
        "$\\sigma$ is the weights' standard deviation ($\\mathrm{Var}(w_i) = \\sigma^2$); "
        "liptable writes it `sigma_w`. In its ReLU (Kaiming) part $\\sigma$ is the "
        "*variance* of the pre-activation z ($p(z) = e^{-z^2/(2\\sigma)} / "
        "\\sqrt{2\\pi\\sigma}$, and $z \\sim \\mathcal{N}(0, \\sigma^2 V D_{in})$ with the "
        "underbrace naming that variance $\\sigma^2$); liptable writes it `s`. The "
        "conclusion $\\sigma = \\sqrt{2/D_{in}}$ is again a standard deviation of the "
        "weights. $y = \\sum_{i=1}^{D_{in}} w_i x_i$ with i.i.d. $w_i$ of mean 0, x "
        "independent of w, $E[x_i] = 0$, $\\mathrm{Var}[x_i] = V$; the x_i need not be "
        "independent of each other (the double sum leaves $E[x_i x_k]$, i != k, free). "
        "001 writes $n_{in}$, $n_{out}$ for the fan-in and fan-out, $a$ for the leaky "
        "ReLU's negative slope (Table 3), L for the depth, and $\\mathcal{S}[0]$ for the "
        "largest singular value. Every expectation below is an exact integral or a sum "
        "over symbolic bounds; that z is Gaussian is the notes' assumption (a central "
        "limit), taken as given.",
        "",
        "The stray line $\\sigma = 1/\\sqrt{2}$ next to 'Xavier Init -> ReLU' names no "
        "D_in and no quantity, so it is not a claim here. It can be read as "
        "$1/\\sqrt{D_{in}}$ at $D_{in} = 2$, or as a first try at the ReLU correction; as "
        "the latter it goes the wrong way: ReLU halves $E[h^2]$, so the weights' standard "
        "deviation grows by $\\sqrt 2$, $\\sqrt{2/D_{in}} = \\sqrt 2 \\cdot 1/\\sqrt{D_{in}}$.",
        "",
        "Figure 3 (001) plots the spectrum of an $n_{out} \\times n_{in}$ Xavier matrix. "
        "Only square matrices have eigenvalues (complex ones, with a spectral radius tending "
        "to 1 by the circular law); the figure's mass near zero for square shapes is that "
        "of the singular values (quarter-circle law), and the largest singular value is the "
        "matrix's 2-norm, a linear layer's Lipschitz constant. Its limit for i.i.d. entries "
        "of variance $2/(n_{in} + n_{out})$ (Bai and Yin 1993) at the figure's shapes:",
        "",
        "| (n_in, n_out) | limit of the largest singular value | decimal |",
        "|---|---|---|",
        *_edges(),
        "",
        "Remark 5.5 (001). Items 1 and 2 are advice without a constant or a network to "
        "check (how large 'very large' is, which variance is 'smaller'); what is checkable "
        "is the depth-aware row: $W_1/\\sqrt{L}$ divides each layer's 2-norm by "
        "$\\sqrt L$ and the product of L of them by $L^{L/2}$, and the two distributions "
        "Remark 5.5 prints for it have the same variance. Item 3 is a survey of other "
        "work. The orthogonal row's $\\mathrm{eye}(\\mathbf{W}_1)$ of $\\mathbf{W}_1$'s "
        "shape fits between U and $V^\\top$ only in the full SVD, which is how it is read.",
        "",
    ]
