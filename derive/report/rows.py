"""Report sections of Linear, Convolution, Softmax, the poolings and the residual blocks:
definitions and Jacobians from :mod:`derive.definitions.rows`, the kernels' conventions, and
the exact or certified Lipschitz constants from :mod:`proofs.spectral`, all computed here."""

from __future__ import annotations

import numpy as np
import sympy as sp

from derive.definitions import rows as R
from proofs import spectral
from proofs.repeatable import top_singular

#: Windowed pooling configurations whose exact constants the report tabulates:
#: (input side, kernel size, stride).
POOL_CASES = ((8, 2, 2), (8, 3, 2), (8, 3, 1), (8, 2, 1), (56, 3, 2), (56, 3, 1))

#: The seeded example matrices and kernels of the certified constants.
SEED = 20261122


def _math(latex: str) -> list[str]:
    return ["$$", latex, "$$", ""]


def _linear() -> list[str]:
    x, W, b = R.vector("x", 2), R.matrix("W", 2, 2), R.vector("b", 2)
    rng = np.random.default_rng(SEED)
    example = rng.standard_normal((64, 32))
    certified = spectral.sigma_max(example)
    float_value, _, _ = top_singular(example)
    return [
        "Definition (Table 2; Eq. 9), one sample as a column; the kernels take rows "
        "(`linear.forward(x, W, b)` = `x W^T + b`, PyTorch's `nn.Linear`):",
        "",
        *_math(r"y = W x + b, \qquad " + sp.latex(R.linear(x, W, b))),
        "Jacobian (numerator layout) `J = W`; VJP `dx = g W`, `dW = g^T x` (summed over rows), "
        "`db = sum(g)`. Lipschitz constant `sigma_max(W)`, attained at the top right singular "
        "vector.",
        "",
        "Certified 2-norm (`proofs.spectral.sigma_max`: eigenvalue enclosure of `W^T W` in "
        "arb ball arithmetic, the float64 entries taken exactly) of a 64 x 32 standard normal "
        f"matrix (NumPy seed {SEED}):",
        "",
        f"- enclosure: [{', '.join(certified.decimal(35))}] (method: {certified.method})",
        f"- float64 SVD (one-sided Jacobi, `proofs.repeatable`): {float_value!r} (relative error "
        f"{_relative(float_value, certified)} against the enclosure)",
        "",
    ]


def _relative(value: float, enclosure) -> str:
    mid = (enclosure.lo + enclosure.hi) / 2
    return f"{float(abs(sp.Rational(value) - mid) / mid):.2g}"


def _conv() -> list[str]:
    lines = [
        "Definition: PyTorch's `Conv2d` (a cross-correlation) on NCHW images, weights "
        "(O, C, Kh, Kw), stride s, zero or circular padding p:",
        "",
        *_math(r"y_{o,i,j} = b_o + \sum_{c,a,e} W_{o,c,a,e}\, \tilde x_{c,\, s i + a,\, s j + e}"),
        "with `x~` the padded image. Each output location is the Linear map `W_D^O` "
        "(the O x D reshaped weight, D = C Kh Kw) applied to its patch; as a map from images "
        "to images the Jacobian is the block-Toeplitz operator with those rows "
        "(`conv2d.jacobian`, dense; `conv2d.linear_operator`, matrix-free with its adjoint).",
        "",
        "Lipschitz constant of the convolution as a map from images to images (2-norm of "
        "the image tensors). Circular padding, stride 1: the operator is block-circulant, "
        "diagonalized by the 2-D DFT, and its 2-norm is the largest singular value over the "
        "frequencies of the O x C matrices `What(k)` -- exact, enclosed in arb. Zero "
        "padding: certified bounds (lower: a witness image evaluated in arb; upper: the "
        "circular operator on a grid of at least H + 2p, of which the zero-padded one is a "
        "restriction). The printed `sigma_max(W_D^O)` against them:",
        "",
        "| kernel | image | padding | printed sigma_max(W_D^O) | Lipschitz constant |",
        "|---|---|---|---|---|",
    ]
    rng = np.random.default_rng(SEED)
    cases = (
        ("ones(1, 1, 3, 3)", np.ones((1, 1, 3, 3)), 8),
        ("normal (4, 3, 3, 3)", rng.standard_normal((4, 3, 3, 3)), 8),
    )
    for name, weight, size in cases:
        printed = np.linalg.norm(weight.reshape(weight.shape[0], -1), 2)
        circular = spectral.conv_circular_lipschitz(weight, (size, size), padding=1)
        zeros = spectral.conv_zero_padding_bounds(weight, (size, size), padding=1)
        lines.append(
            f"| {name} | {size} x {size} | circular 1 | {printed:.6f} | "
            f"{_interval(circular)} (exact: `{circular.exact or 'not in closed form'}`) |"
        )
        lines.append(
            f"| {name} | {size} x {size} | zeros 1 | {printed:.6f} | {_interval(zeros)} "
            f"({zeros.method}) |"
        )
    return [*lines, ""]


def _interval(bounds, digits: int = 15) -> str:
    lo, hi = bounds.decimal(digits)
    return lo if lo == hi else f"[{lo}, {hi}]"


def _softmax() -> list[str]:
    x = R.vector("x", 3)
    J = R.jacobian(R.softmax(x), x)
    return [
        "Definition (Table 2): `y_i = exp(x_i) / sum_j exp(x_j)` over the last axis. "
        "Derived Jacobian (symmetric, so both layouts agree), D = 3, written in y:",
        "",
        *_math(
            r"J = \mathrm{diag}(y) - y y^\top, \quad J_{12} = "
            + sp.latex(sp.simplify(J[0, 1].subs(sp.exp(x[0]), 1)))
            + r"\ \text{(at } x_1 = 0\text{)}"
        ),
        "Local constant `|J(x)|_2 = lambda_max(diag(y) - y y^T)`, at most 1/2 (the variance "
        "of a variable with values in [m, M] is at most (M - m)^2/4), so the global "
        "constant is 1/2 for D >= 2 -- half of the printed 1.",
        "",
        "Kernels: the row maximum is subtracted first, so float16 rows at +-65504 and "
        "float64 spreads like (1e300, -1e300) are exact to rounding. `-inf` entries are "
        "masks: their output and gradient are 0; a fully masked row gives 0 (not PyTorch's "
        "NaN: a fully masked query attends to nothing) with gradient 0; `+inf` or NaN in "
        "a row gives NaN for that row. The VJP `dx_i = y_i (g_i - <g, y>)` cancels at the "
        "row's argmax m when y_m is close to 1 (x = (0, -46): dx_0 = y_0 y_1 = 1.05e-20, "
        "computed as 0 by the plain form); the kernel uses the proven-equal "
        "`dx_m = y_m sum_{j != m} y_j (g_m - g_j)` there.",
        "",
    ]


def _pool(kind: str) -> list[str]:
    if kind == "max":
        lines = [
            "The paper's row is global, `y = max(x)` over the last axis: gradient "
            "`e_argmax`; at a tie max is not differentiable and `maxpool.vjp` splits the "
            "gradient evenly among the tied entries (a Clarke gradient, as `torch.amax` "
            "does). Lipschitz constant 1.",
            "",
            "Windowed (`forward2d(x, kernel_size, stride=None, padding=0)`, PyTorch's "
            "`MaxPool2d`, floor mode, padding as -inf): the gradient of a window goes to its "
            "first maximum in row-major order (PyTorch's CPU rule; a NaN takes it). Exact "
            "Lipschitz constant `sqrt(m)`, m the largest number of windows covering one "
            "pixel, reached by a single spike there:",
            "",
        ]
    else:
        lines = [
            "The paper's row is global, `y = sum(x)/D`: gradient `1/D`, whose 2-norm "
            "`1/sqrt(D)` is the Lipschitz constant (not the printed 1/D).",
            "",
            "Windowed (`forward2d(x, kernel_size, stride=None, padding=0)`, PyTorch's "
            "`AvgPool2d`, floor mode, `count_include_pad=True`): exact Lipschitz constant "
            "`sqrt(lambda_max(S_h S_h^T) lambda_max(S_w S_w^T)) / (k_h k_w)` with S the "
            "window-incidence matrix of each axis -- an algebraic number, from the exact "
            "characteristic polynomial:",
            "",
        ]
    lines += ["| input | kernel | stride | Lipschitz constant | decimal |", "|---|---|---|---|---|"]
    for size, k, s in POOL_CASES:
        norm = (spectral.maxpool2d_lipschitz if kind == "max" else spectral.avgpool2d_lipschitz)(
            (size, size), k, s
        )
        lines.append(
            f"| {size} x {size} | {k} | {s} | `{_short(norm.exact)}` | {norm.decimal(15)[0]} |"
        )
    if kind == "avg":
        limits = ", ".join(
            f"k = {k}, s = {s}: `{spectral.avgpool_lipschitz_limit(k, s)}`"
            for k, s in ((2, 2), (3, 2), (3, 1))
        )
        lines += ["", f"As the input grows the constants approach: {limits}."]
    return [*lines, ""]


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _residual(weighted: bool) -> list[str]:
    if weighted:
        return [
            "Definition (section 5.3, Eq. 55; the row's `f = x + nu f` is a typing slip): "
            "`y = x + nu * f(x)` with `nu` per feature. Jacobian `I + diag(nu) J_f` "
            "(numerator layout; the printed `I + (df/dx) diag(nu)` is its transpose). "
            "Lipschitz constant at most `1 + max|nu| Lip(f)`, attained for `nu = c 1`, "
            "`f(x) = x`; the literal `max_D(nu_D)` is refuted by `nu < 0`.",
            "",
            "Kernels: `weighted_residual.forward(x, branch, nu)`, `vjp(x, g, branch, nu)` -> "
            "`(dx, branch_grads, dnu)`, `jacobian(x, branch, nu)`; the branch is built with "
            "`kernels.compose` (e.g. `compose.ffn(W1, b1, W2, b2)`).",
            "",
        ]
    return [
        "Definition (Eq. 22): `y = x + f(x)`, with the FFN of Eq. 26, `f(x) = W2 max(0, W1 x "
        "+ b1) + b2`, as the usual branch. Jacobian `I + J_f`; for the FFN "
        "`J_f = W2 diag(1(W1 x + b1 > 0)) W1` (numerator layout; Eq. 27 prints the "
        "transpose, with relu'(0) = 0 on the kinks). `Lip(x + f) <= 1 + Lip(f)` by the "
        "triangle inequality; it is reached when the branch stretches some direction by "
        "Lip(f) without turning it (W2 = 2I, W1 = I: 3 = 1 + 2) and not otherwise "
        "(W2 = -2I: 1).",
        "",
        "Kernels: `compose.ffn(W1, b1, W2, b2)` (or `compose.Sequential` of `Linear`, "
        "`Activation` and `LayerNorm` stages) builds the branch; `residual.forward(x, "
        "branch)`, `residual.vjp(x, g, branch)` -> `(dx, branch_grads)` by the chain rule, "
        "`residual.jacobian(x, branch)`.",
        "",
    ]


def row_section(name: str) -> list[str]:
    """The report section of a module of the rows family (:data:`derive.catalog.CATALOG`);
    its claims follow it."""
    if name == "linear":
        return _linear()
    if name == "conv2d":
        return _conv()
    if name == "softmax":
        return _softmax()
    if name in ("maxpool", "avgpool"):
        return _pool(name[:3])
    return _residual(weighted=name == "weighted_residual")
