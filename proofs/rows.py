"""Proofs for the rows Linear, Convolution, Softmax, MaxPooling, AveragePooling, Residual
and Weighted Residual of Table 2 (001_76ce3a8a4b6079c3.txt) and Eq. 9-14, 22-23, 26-27.

Printed matrices are written here at concrete sizes, as the paper prints them (its
denominator layout: ``dy/dx`` has ``dy_j/dx_i`` at (i, j)), and compared with the
transpose of ``sympy.Matrix.jacobian`` of the forwards in :mod:`derive.definitions.rows`
(:func:`proofs.matrices.decide`). Lipschitz constants get steps of their own below.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import sympy as sp

from derive.definitions import rows as R
from proofs import spectral
from proofs.core import (
    INDICES,
    SIZE,
    Proof,
    Step,
    assumption,
    identity,
    limit,
    same,
    sum_identity,
    total,
)
from proofs.matrices import Case, General, decide

Decision = tuple[str, Proof, dict | None]

#: Sizes (O, D) of the Linear checks and D of the vector modules.
LINEAR_SIZES = ((1, 1), (2, 3), (3, 2))
VECTOR_SIZES = (1, 2, 3, 4)


def _point(*columns: sp.Matrix, start: int = 1) -> dict:
    """Distinct small integers for every symbol of the given matrices."""
    symbols = [s for column in columns for s in column]
    return {s: sp.Integer(start + k) for k, s in enumerate(symbols)}


def printed_definition(statement: str, which: str) -> Decision:
    """A printed forward that is written exactly as :mod:`derive.definitions.rows` defines it."""

    def case(d: int) -> Case:
        x = R.vector("x", d)
        f = R.generic_branch(d)
        printed, derived = {
            "max": (lambda: sp.Matrix([sp.Max(*x)]), lambda: R.max_pool(x)),
            "avg": (lambda: sp.Matrix([sum(x) / d]), lambda: R.avg_pool(x)),
            "residual": (lambda: x + f(x), lambda: R.residual(x, f)),
        }[which]
        return Case(f"D = {d}", printed, derived, {})

    general = None
    if which == "avg":  # max and a generic branch f have no form for a symbolic D here
        x, _, k = _mean_entries()
        general = General(total(x[k], k) / SIZE, R.avg_pool_entry(x, k), _EVERY_D)
    return decide(
        statement,
        [case(d) for d in VECTOR_SIZES],
        "the printed forward is the definition",
        general=general,
    )


# --- Linear ----------------------------------------------------------------------------


def _linear_symbols(o: int, d: int):
    return R.vector("x", d), R.matrix("W", o, d), R.vector("b", o)


#: What the symbolic-size steps cover (:class:`proofs.matrices.General`).
_EVERY_D = "every D (symbolic D)"
_EVERY_OD = "every O and D (symbolic O, symbolic D; entry (r, c))"


def linear_entries():
    """W, x, b, g as IndexedBase; entry indices r (an output), c (an input); summation
    indices i (over the O outputs) and j (over the D inputs); and y_r = (W x + b)_r."""
    W, x, b, g = (sp.IndexedBase(name, real=True) for name in ("W", "x", "b", "g"))
    r, c, i, j = sp.symbols("r c i j", integer=True, positive=True)
    return W, x, b, g, (r, c, i, j), R.linear_entry(W, x, b, r, j)


def linear_definition(statement: str) -> Decision:
    def case(o: int, d: int) -> Case:
        x, W, b = _linear_symbols(o, d)
        return Case(
            f"O = {o}, D = {d}",
            printed=lambda: W * x + b,
            derived=lambda: (x.T * W.T + b.T).T,  # PyTorch's row form, transposed
            point=_point(x, W, b),
        )

    W, x, b, _, (r, _, _, j), y = linear_entries()
    row_form = total(x[j] * W[r, j], j) + b[r]  # entry r of (x^T W^T + b^T)^T
    return decide(
        statement,
        [case(o, d) for o, d in LINEAR_SIZES],
        "W x + b equals PyTorch's x W^T + b, transposed",
        general=General(y, row_form, "every O and D (symbolic O, symbolic D; entry r)"),
    )


def linear_jacobian(statement: str) -> Decision:
    def case(o: int, d: int) -> Case:
        x, W, b = _linear_symbols(o, d)
        return Case(
            f"O = {o}, D = {d}",
            printed=lambda: W.T,
            derived=lambda: R.jacobian(R.linear(x, W, b), x).T,
            point=_point(x, W, b),
        )

    W, x, _, _, (r, c, _, _), y = linear_entries()
    return decide(
        statement,
        [case(o, d) for o, d in LINEAR_SIZES],
        "W^T equals the transpose of sympy's Jacobian of W x + b (denominator layout)",
        general=General(W[r, c], sp.diff(y, x[c]), _EVERY_OD),
    )


#: A matrix whose largest singular value is checked exactly (not symmetric, not normal).
EXAMPLE_W = sp.Matrix([[1, 2], [0, 2]])


def _top_singular(W: sp.Matrix) -> tuple[sp.Expr, sp.Matrix]:
    """The largest singular value of ``W`` and a right singular vector, exactly."""
    gram = W.T * W
    value, _, vectors = max(gram.eigenvects(), key=lambda item: item[0])
    return sp.sqrt(value), vectors[0]


def linear_lipschitz(statement: str) -> Proof:
    x, W, b = _linear_symbols(2, 3)
    x2 = R.vector("u", 3)
    sigma, v = _top_singular(EXAMPLE_W)
    Wi, xi, _, _, (r, _, _, j), y = linear_entries()
    u = sp.IndexedBase("u", real=True)
    return Proof(
        statement,
        (
            Step(
                "for every O and D (symbolic O, symbolic D; entry r): "
                "$f(x)_r - f(x')_r = \\sum_j W_{rj} (x_j - x'_j)$, the entry r of $W(x - x')$",
                "symbolic identity",
                sum_identity(y - y.xreplace({xi: u}), total(Wi[r, j] * (xi[j] - u[j]), j)),
            ),
            Step(
                "$f(x) - f(x') = W(x - x')$ (O = 2, D = 3): the map's Lipschitz constant is "
                "the operator 2-norm $\\sup_{v \\ne 0} \\|Wv\\|/\\|v\\| = "
                "\\sqrt{\\lambda_{\\max}(W^\\top W)} = \\sigma_{\\max}(W)$ (Rayleigh quotient), "
                "for every x and b",
                "symbolic identity",
                lambda: same(R.linear(x, W, b) - R.linear(x2, W, b), W * (x - x2)),
            ),
            Step(
                f"attained: for $W = {sp.latex(EXAMPLE_W)}$ the top right singular vector "
                f"$v = {sp.latex(v.T)}^\\top$ gives $\\|Wv\\|^2/\\|v\\|^2 = "
                f"{sp.latex(sp.nsimplify(sigma**2))} = \\sigma_{{\\max}}^2$ exactly",
                "exact witness",
                identity(((EXAMPLE_W * v).norm() ** 2 / v.norm() ** 2), sigma**2),
            ),
        ),
    )


def linear_lipschitz_witness() -> dict:
    sigma, v = _top_singular(EXAMPLE_W)
    return {"W": str(EXAMPLE_W.tolist()), "v": str(list(v)), "sigma_max": str(sigma)}


def linear_eq11() -> tuple[Proof, dict]:
    """Eq. 11 with b: sup_{|x| = 1} |W x + b| is not the Lipschitz constant when b != 0."""
    W, b = sp.Integer(0), sp.Integer(1)
    sphere = (sp.Integer(-1), sp.Integer(1))  # the unit sphere of R^1
    printed = max(abs(W * s + b) for s in sphere)
    t = sp.Symbol("t", real=True)
    witness = {"W": "[[0]]", "b": "[1]", "printed_sup": str(printed), "lipschitz": "0"}
    proof = Proof(
        "Eq. 11 (with the bias)",
        (
            Step(
                "W = 0, b = 1 (D = O = 1): $\\sup_{|x| = 1} |Wx + b| = 1$ (exhaustive over the "
                "unit sphere $\\{-1, 1\\}$), but $f(x) = 1$ is constant, so its Lipschitz "
                "constant is 0",
                "exhaustive enumeration",
                lambda: printed == 1 and sp.diff(W * t + b, t) == 0,
            ),
            Step(
                "corrected: $\\mathrm{Lip}_p(f) = \\sup_{\\|x\\|_p = 1} \\|Wx\\|_p$, since "
                "$f(x) - f(x') = W(x - x')$ does not contain b",
                "symbolic identity",
                identity((W * t + b) - (W * 0 + b), W * t),
            ),
        ),
    )
    return proof, witness


#: Candidate matrices for the eigenvalue sentence: a symmetric one, then a nilpotent one.
EIGEN_CANDIDATES = (sp.Matrix([[2, 1], [1, 2]]), sp.Matrix([[0, 1], [0, 0]]))


def _largest_abs_eigenvalue(W: sp.Matrix) -> sp.Expr:
    return max(abs(v) for v in W.eigenvals())


def linear_eigenvalue(statement: str) -> Decision:
    cases = [
        Case(
            f"W = {W.tolist()}",
            printed=lambda W=W: sp.Matrix([_largest_abs_eigenvalue(W)]),
            derived=lambda W=W: sp.Matrix([_top_singular(W)[0]]),
            point={},
        )
        for W in EIGEN_CANDIDATES
    ]
    return decide(statement, cases, "the largest |eigenvalue| equals sigma_max")


def linear_backprop(statement: str) -> Decision:
    def case(o: int, d: int) -> Case:
        x, W, b = _linear_symbols(o, d)
        g = R.vector("g", o)
        loss = (g.T * R.linear(x, W, b))[0]  # dL/dy = g

        def printed() -> sp.Matrix:
            return sp.Matrix.vstack(W.T * g, (g * x.T).reshape(o * d, 1), g)

        def derived() -> sp.Matrix:
            grads = [sp.diff(loss, s) for s in (*x, *W, *b)]
            return sp.Matrix(grads)

        return Case(f"O = {o}, D = {d}", printed, derived, _point(x, W, b, g))

    W, x, b, g, (r, c, i, _), y = linear_entries()
    loss = total(g[i] * y.xreplace({r: i}), i, R.OUTPUTS)  # L = sum_i g_i y_i
    general = (
        General(total(W[i, c] * g[i], i, R.OUTPUTS), sp.diff(loss, x[c]), _EVERY_OD, "(W^T g)_c"),
        General(g[r] * x[c], sp.diff(loss, W[r, c]), _EVERY_OD, "(g x^T)_rc"),
        General(g[r], sp.diff(loss, b[r]), _EVERY_OD, "g_r"),
    )
    return decide(
        statement,
        [case(o, d) for o, d in LINEAR_SIZES],
        "(W^T g, g x^T, g) equals sympy.diff of L = g^T (W x + b) by x, W, b",
        general=general,
    )


# --- Convolution -----------------------------------------------------------------------

#: Kernel sizes at which the printed tap count is compared with K.
CONV_K = (1, 3, 5)


def conv_definition(statement: str) -> Decision:
    def printed_taps(k: int) -> sp.Matrix:
        half = sp.Rational(k + 1, 2)
        return sp.Matrix([len(range(int(-half), int(half) + 1))])

    def centered_taps(k: int) -> sp.Matrix:
        half = sp.Rational(k - 1, 2)
        return sp.Matrix([len(range(int(-half), int(half) + 1))])

    cases = [
        Case(f"K = {k}", lambda k=k: printed_taps(k), lambda k=k: sp.Matrix([k]), {})
        for k in CONV_K
    ]
    intended = [
        Case(f"K = {k}", lambda k=k: centered_taps(k), lambda k=k: sp.Matrix([k]), {})
        for k in CONV_K
    ]
    intended.append(_centered_conv_case())
    return decide(
        statement,
        cases,
        "the printed range of m has K taps",
        intended,
        "with m, n from -(K-1)/2 to (K-1)/2 (K taps), the centered sum is PyTorch's "
        "cross-correlation with padding (K-1)/2",
    )


def _centered_conv_case() -> Case:
    """Eq. 12 with the range -(K-1)/2..(K-1)/2 equals conv2d with padding (K-1)/2."""
    channels, size, k = 2, 3, 3
    half = (k - 1) // 2
    x = R.image("X", channels, size, size)
    w = R.kernel("W", 1, channels, k, k)

    def pixel(c: int, i: int, j: int) -> sp.Expr:
        return x[c][i][j] if 0 <= i < size and 0 <= j < size else sp.Integer(0)

    def centered() -> sp.Matrix:
        return R.flatten(
            [
                [
                    sum(
                        pixel(c, i + m, j + n) * w[0][c][m + half][n + half]
                        for m in range(-half, half + 1)
                        for n in range(-half, half + 1)
                        for c in range(channels)
                    )
                    for j in range(size)
                ]
                for i in range(size)
            ]
        )

    return Case(
        "C = 2, O = 1, 3 x 3 image, K = 3",
        centered,
        lambda: R.flatten(R.conv2d(x, w, padding=half)),
        {},
    )


def _patch_case(out: int, channels: int, k: int) -> tuple[Case, Case]:
    """(printed W_D^O vs derived, printed (W_D^O)^T vs derived) at one output location."""
    x = R.image("X", channels, k, k)
    w = R.kernel("W", out, channels, k, k)
    w_mat = sp.Matrix(out, channels * k * k, lambda o, q: sp.flatten(w[o])[q])
    patch = R.flatten(x)

    def derived() -> sp.Matrix:  # denominator layout: the transpose of sympy's Jacobian
        return R.jacobian(R.flatten(R.conv2d(x, w)), patch).T

    label = f"O = {out}, C = {channels}, K = {k} (D = {channels * k * k}), one output location"
    return (
        Case(label, lambda: w_mat, derived, {}),
        Case(label, lambda: w_mat.T, derived, {}),
    )


def conv_jacobian(statement: str) -> Decision:
    sizes = ((2, 1, 2), (1, 2, 1), (3, 1, 1))
    pairs = [_patch_case(*s) for s in sizes]
    return decide(
        statement,
        [last for last, _ in pairs],
        "the last member of the printed chain, W_D^O, equals dy^O/dx^D",
        [first for _, first in pairs],
        "(W_D^O)^T equals the transpose of sympy's Jacobian of one output location with "
        "respect to its patch (denominator layout)",
    )


def conv_eq14(statement: str) -> Decision:
    """Eq. 14 at a 1 x 3 image and a 1 x 2 kernel: the patches overlap in x_2."""

    def setup(width: int, kw: int):
        x = R.image("X", 1, 1, width)
        w = R.kernel("W", 1, 1, 1, kw)
        y = R.flatten(R.conv2d(x, w))
        g = R.vector("g", len(y))
        loss = (g.T * y)[0]
        cols = sp.Matrix(kw, len(y), lambda a, p: x[0][0][p + a])  # im2col: X^{K,K,C}
        w_mat = sp.Matrix(1, kw, lambda _, a: w[0][0][0][a])
        return x, w, g, loss, cols, w_mat

    def case(width: int, kw: int, folded: bool) -> Case:
        x, w, g, loss, cols, w_mat = setup(width, kw)
        pixels, weights = R.flatten(x), R.flatten(w)

        def printed() -> sp.Matrix:
            dcols = w_mat.T * g.T  # (W^O_{KKC})^T Y', one column per output location
            if folded:  # col2im: each patch column added back onto its pixels
                dx = sp.zeros(width, 1)
                for p in range(dcols.shape[1]):
                    for a in range(kw):
                        dx[p + a] += dcols[a, p]
            else:
                dx = dcols
            return sp.Matrix.vstack((g.T * cols.T).T, dx.reshape(len(dx), 1))

        def derived() -> sp.Matrix:
            return sp.Matrix([sp.diff(loss, s) for s in (*weights, *pixels)])

        label = f"1 x {width} image, 1 x {kw} kernel"
        return Case(label, printed, derived, {})

    cases = [case(3, 2, folded=False), case(4, 3, folded=False)]
    intended = [case(3, 2, folded=True), case(4, 3, folded=True)]
    return decide(
        statement,
        cases,
        "(Y' (X^{K,K,C})^T, (W^O_{K,K,C})^T Y') equals sympy.diff of L = <Y', Y> by W and X",
        intended,
        "dL/dW = Y' (X^{K,K,C})^T, and dL/dX = col2im((W^O_{K,K,C})^T Y') (the patch "
        "gradients added back onto the pixels they were read from) equal sympy.diff",
    )


def conv_lipschitz_witness(mode: str) -> tuple[Step, dict]:
    """An all-ones 3 x 3 kernel on a 4 x 4 all-ones image, padding 1: |y| / |x| exactly."""
    size, k = 4, 3
    x = [[[sp.Integer(1)] * size for _ in range(size)]]
    w = [[[[sp.Integer(1)] * k for _ in range(k)]]]
    y = R.flatten(R.conv2d(x, w, padding=1, mode=mode))
    ratio = sp.sqrt(sum(v**2 for v in y)) / sp.sqrt(size * size)
    printed = sp.sqrt(sum(sp.Integer(1) for _ in range(k * k)))  # |ones(1, 9)|_2 = 3
    witness = {
        "W": "ones(1, 1, 3, 3)",
        "x": "ones(1, 1, 4, 4)",
        "padding": 1,
        "padding_mode": mode,
        "ratio": str(ratio),
        "printed_sigma_max": str(printed),
    }
    step = Step(
        f"{mode} padding: W = ones(1, 1, 3, 3) has $W_D^O$ = ones(1, 9) with "
        f"$\\sigma_{{\\max}} = {printed}$, but the 4 x 4 all-ones image gives "
        f"$\\|y\\|/\\|x\\| = {sp.latex(ratio)} > {printed}$",
        "exact witness",
        lambda: bool(ratio > printed) and ratio == sp.sympify(witness["ratio"]),
    )
    return step, witness


def conv_lipschitz(statement: str) -> tuple[Proof, dict]:
    """The printed sigma_max(W_D^O) is exceeded by an exact witness in both padding modes;
    the convolution's own constant at the witness, certified (:mod:`proofs.spectral`)."""
    import numpy as np

    circular, witness = conv_lipschitz_witness("circular")
    zeros, zero_witness = conv_lipschitz_witness("zeros")
    weight = np.ones((1, 1, 3, 3))
    exact = spectral.conv_circular_lipschitz(weight, (4, 4), padding=1)
    bounds = spectral.conv_zero_padding_bounds(weight, (4, 4), padding=1)
    witness["zeros_ratio"] = zero_witness["ratio"]
    witness["circular_lipschitz"] = exact.exact
    witness["zeros_lipschitz"] = list(bounds.decimal(35))
    return Proof(statement, (circular, zeros, *exact.steps(), *bounds.steps())), witness


# --- Softmax ---------------------------------------------------------------------------


def _softmax_point(d: int) -> dict:
    x = R.vector("x", d)
    return {s: sp.log(k + 1) for k, s in enumerate(x)}  # y proportional to 1, 2, ..., D


def softmax_definition(statement: str) -> Decision:
    def case(d: int) -> Case:
        x = R.vector("x", d)

        def printed() -> sp.Matrix:
            total = sum(sp.exp(x[j]) for j in range(d))  # j = 0 .. d - 1
            return sp.Matrix([sp.exp(x[i]) / total for i in range(d)])

        return Case(f"D = {d}", printed, lambda: R.softmax(x), _softmax_point(d))

    _, x = _softmax_entries()
    a, j = sp.symbols("a j", integer=True, positive=True)
    printed = sp.exp(x[a]) / total(sp.exp(x[j]), j)  # j = 0..d-1 printed: the same D terms
    return decide(
        statement,
        [case(d) for d in VECTOR_SIZES],
        "the printed y equals the definition",
        general=General(printed, R.softmax_entry(x, a, j), "every D (symbolic D, entry a)"),
    )


def _softmax_entries() -> tuple[Callable[[sp.Symbol], sp.Expr], sp.IndexedBase]:
    """y_t = exp(x_t) / sum_l exp(x_l) for every size D, and x."""
    x = sp.IndexedBase("x", real=True)
    l = sp.Symbol("l", integer=True, positive=True)  # noqa: E741 - the summation index
    return (lambda t: R.softmax_entry(x, t, l)), x


def softmax_jacobian(statement: str) -> Decision:
    def case(d: int, intended: bool) -> Case:
        x = R.vector("x", d)
        y = R.softmax(x)

        def printed() -> sp.Matrix:
            column = (lambda i, j: y[j]) if intended else (lambda i, j: y[i])
            return sp.Matrix(d, d, lambda i, j: y[i] * ((1 if i == j else 0) - column(i, j)))

        return Case(f"D = {d}", printed, lambda: R.jacobian(R.softmax(x), x).T, _softmax_point(d))

    y, x = _softmax_entries()
    a, b = sp.symbols("a b", integer=True, positive=True)
    intended = General(y(a) * (sp.KroneckerDelta(a, b) - y(b)), sp.diff(y(b), x[a]))
    return decide(
        statement,
        [case(d, False) for d in VECTOR_SIZES],
        "y_i (1(i == j) - y_i) equals dy_i/dx_j",
        [case(d, True) for d in VECTOR_SIZES],
        "y_i (1(i == j) - y_j) equals dy_i/dx_j (the matrix diag(y) - y y^T is symmetric, so "
        "both layouts agree)",
        intended_general=intended,
    )


def softmax_lipschitz(statement: str) -> Proof:
    """|J|_2 <= 1/2 everywhere (Popoviciu), approached; D = 2 attains it at x = 0."""
    steps = []
    for d in (2, 3, 4):
        x, v = R.vector("x", d), R.vector("v", d)
        y = R.softmax(x)
        J = R.jacobian(y, x)
        mean = sum(y[i] * v[i] for i in range(d))
        variance = sum(y[i] * v[i] ** 2 for i in range(d)) - mean**2
        steps.append(
            Step(
                f"D = {d}: $v^\\top J v = \\sum_i y_i v_i^2 - (\\sum_i y_i v_i)^2$, the variance "
                "of a variable taking the value $v_i$ with probability $y_i$ (J is symmetric)",
                "symbolic identity",
                identity((v.T * J * v)[0], variance),
            )
        )
    m, M, V, p = sp.symbols("m M V p", real=True)
    c = (M + m) / 2
    steps += [
        Step(
            "for any variable V and constant c: $E[(V - c)^2] = \\mathrm{Var}(V) + (E V - c)^2$"
            " (two-point form, probabilities p and 1 - p; the general case expands the same "
            "way), so $\\mathrm{Var}(V) \\le E[(V - c)^2]$",
            "symbolic identity",
            identity(
                p * (M - c) ** 2 + (1 - p) * (m - c) ** 2,
                p * (1 - p) * (M - m) ** 2 + (p * M + (1 - p) * m - c) ** 2,
            ),
        ),
        Step(
            "for $m \\le V \\le M$ and $c = (M + m)/2$: $((M - m)/2)^2 - (V - c)^2 = "
            "(M - V)(V - m) \\ge 0$, so $\\mathrm{Var}(V) \\le (M - m)^2 / 4$ (Popoviciu)",
            "symbolic identity",
            identity(((M - m) / 2) ** 2 - (V - c) ** 2, (M - V) * (V - m)),
        ),
        Step(
            "with M, m two coordinates of a unit vector v: $2(M^2 + m^2) - (M - m)^2 = "
            "(M + m)^2 \\ge 0$, so $(M - m)^2 \\le 2$ and $v^\\top J v \\le 1/2$; J is "
            "symmetric positive semidefinite, so $\\|J\\|_2 \\le 1/2$ at every x and, the "
            "domain being convex, the Lipschitz constant is at most 1/2",
            "symbolic identity",
            identity(2 * (M**2 + m**2) - (M - m) ** 2, (M + m) ** 2),
        ),
    ]
    x = R.vector("x", 2)
    J0 = R.jacobian(R.softmax(x), x).subs({x[0]: 0, x[1]: 0})
    u = sp.Matrix([1, -1]) / sp.sqrt(2)
    steps.append(
        Step(
            "D = 2, x = (0, 0): $J = \\frac14\\begin{pmatrix}1 & -1\\\\ -1 & 1\\end{pmatrix}$ "
            "and $J u = u/2$ for $u = (1, -1)/\\sqrt2$: the bound 1/2 is attained",
            "exact witness",
            identity((J0 * u - u / 2).norm(), 0),
        )
    )
    t = sp.Symbol("t", positive=True)
    x3 = R.vector("x", 3)
    y3 = R.softmax(x3).subs({x3[0]: 0, x3[1]: 0, x3[2]: -t})
    steps.append(
        Step(
            "D = 3, x = (0, 0, -t): $u^\\top J u = (y_1 + y_2)/2 - 0 = y_1 \\to 1/2$ as "
            "$t \\to \\infty$ with $u = (1, -1, 0)/\\sqrt2$ (larger D: put the extra "
            "coordinates at -t the same way): the supremum 1/2 is approached for every D >= 2",
            "symbolic limit",
            limit(y3[0], t, sp.oo, sp.Rational(1, 2)),
        )
    )
    return Proof(statement, tuple(steps))


# --- Pooling ---------------------------------------------------------------------------

#: Points with a unique maximum (the max is differentiable there), and a tie.
UNIQUE_MAX_POINTS = ((3, 1, 2), (-1, 5), (0, -2, -1, 4))
TIE_POINT = (0, 0)


def _indicator(point) -> sp.Matrix:
    top = max(point)
    return sp.Matrix([1 if v == top else 0 for v in point])


def _max_gradient(point) -> sp.Matrix:
    """The gradient of max at a point with a unique maximum, by sympy.diff there."""
    x = R.vector("x", len(point))
    y = R.max_pool(x)[0]
    at = dict(zip(x, point, strict=True))
    return sp.Matrix([sp.diff(y, s).subs(at) for s in x])


def _directional(point, direction) -> sp.Expr:
    """lim_{t -> 0+} (max(p + t v) - max(p)) / t, by sympy."""
    t = sp.Symbol("t", positive=True)
    moved = sp.Max(*(p + t * v for p, v in zip(point, direction, strict=True)))
    return sp.limit((moved - max(point)) / t, t, 0, "+")


def maxpool_jacobian(statement: str) -> Decision:
    unique = [
        Case(f"x = {p}", lambda p=p: _indicator(p), lambda p=p: _max_gradient(p), {})
        for p in UNIQUE_MAX_POINTS
    ]
    direction = (1,) * len(TIE_POINT)
    tie = Case(
        f"x = {TIE_POINT} (a tie), direction v = {direction}: the printed gradient's "
        "directional derivative $1(x == y)^\\top v$ against $\\lim_{t \\to 0^+} "
        "(\\max(x + tv) - \\max x)/t$",
        lambda: sp.Matrix([(_indicator(TIE_POINT).T * sp.Matrix(direction))[0]]),
        lambda: sp.Matrix([_directional(TIE_POINT, direction)]),
        {},
    )
    return decide(
        statement,
        [*unique, tie],
        "1(x == y) equals sympy's gradient of max",
        unique,
        "where the maximum is unique, 1(x == y) is the one-hot argmax, the gradient; at a "
        "tie max is not differentiable",
    )


def maxpool_lipschitz(statement: str) -> Proof:
    a, b = sp.symbols("a b", real=True)
    gap = sp.Symbol("delta", nonnegative=True)
    t = sp.Symbol("t", positive=True)
    return Proof(
        statement,
        (
            Step(
                "let $i = \\arg\\max x$ and $k = \\arg\\max x'$, so $x'_k = x'_i + \\delta$ with "
                "$\\delta \\ge 0$: $\\max x - \\max x' = x_i - x'_k = (x_i - x'_i) - \\delta "
                "\\le |x_i - x'_i| \\le \\|x - x'\\|_2$ (and symmetrically), so Lip <= 1",
                "symbolic sign",
                assumption((a - b) - ((a - b) - gap), "nonnegative"),
            ),
            Step(
                "attained: $x' = x + t e_i$ at the argmax i gives $|\\max x' - \\max x| = t "
                "= \\|x' - x\\|_2$ (D = 2, x = (1, 0))",
                "exact witness",
                identity(sp.Max(1 + t, 0) - sp.Max(1, 0), t),
            ),
        ),
    )


def avgpool_jacobian(statement: str) -> Decision:
    def case(d: int) -> Case:
        x = R.vector("x", d)
        return Case(
            f"D = {d}",
            lambda: sp.ones(d, 1) / d,
            lambda: R.jacobian(R.avg_pool(x), x).T,
            {},
        )

    x, a, k = _mean_entries()
    return decide(
        statement,
        [case(d) for d in VECTOR_SIZES],
        "(1/D) 1 equals the transpose of sympy's Jacobian of sum(x)/D",
        general=General(1 / SIZE, sp.diff(R.avg_pool_entry(x, k), x[a])),
    )


def _mean_entries() -> tuple[sp.IndexedBase, sp.Symbol, sp.Symbol]:
    """x, an entry's index a and a summation index, for the mean sum(x)/D of any size D."""
    a, k = sp.symbols("a k", integer=True, positive=True)
    return sp.IndexedBase("x", real=True), a, k


def avgpool_lipschitz(statement: str) -> Proof:
    D = sp.Symbol("D", positive=True, integer=True)
    x, a, k = _mean_entries()
    steps = [
        Step(
            "every D (symbolic D): the map is linear with Jacobian $\\frac1D \\mathbf{1}^\\top$ "
            "(sympy.diff of sum(x)/D), of 2-norm $\\sqrt{\\sum_a (1/D)^2} = 1/\\sqrt{D}$: "
            "$\\sum_a (\\partial y / \\partial x_a)^2 = 1/D$",
            "symbolic identity",
            sum_identity(total(sp.diff(R.avg_pool_entry(x, k), x[a]) ** 2, a), 1 / SIZE),
        )
    ]
    steps += [
        Step(
            f"D = {d}: the map is linear with Jacobian $\\frac1D \\mathbf{{1}}^\\top$, of "
            "2-norm $\\sqrt{D / D^2} = 1/\\sqrt{D}$",
            "symbolic identity",
            identity(
                R.jacobian(R.avg_pool(R.vector("x", d)), R.vector("x", d)).norm(), 1 / sp.sqrt(d)
            ),
        )
        for d in VECTOR_SIZES
    ]
    x3 = sp.ones(3, 1)
    steps.append(
        Step(
            "attained at x = 1, x' = 0 (D = 3): $|y - y'| / \\|x - x'\\| = 1/\\sqrt3 > 1/3$",
            "exact witness",
            identity(R.avg_pool(x3)[0] / x3.norm(), 1 / sp.sqrt(3)),
        )
    )
    steps.append(
        Step(
            "for every D: $1/\\sqrt{D} - 1/D = (\\sqrt{D} - 1)/D \\ge 0$, zero only at D = 1",
            "symbolic identity",
            identity(1 / sp.sqrt(D) - 1 / D, (sp.sqrt(D) - 1) / D),
        )
    )
    return Proof(statement, tuple(steps))


# --- Residual blocks -------------------------------------------------------------------


def residual_jacobian(statement: str, weighted: bool) -> Decision:
    def case(d: int) -> Case:
        x, nu = R.vector("x", d), R.vector("nu", d)
        f = R.generic_branch(d)

        def printed() -> sp.Matrix:
            df = R.jacobian(f(x), x).T  # the paper's denominator layout
            return sp.eye(d) + (df * sp.diag(*nu) if weighted else df)

        def derived() -> sp.Matrix:
            y = R.weighted_residual(x, f, nu) if weighted else R.residual(x, f)
            return R.jacobian(y, x).T

        return Case(f"D = {d}, generic smooth branch f", printed, derived, {})

    what = (
        "I + (df/dx) diag(nu) equals the transpose of sympy's Jacobian of x + nu * f(x)"
        if weighted
        else "I + df/dx equals the transpose of sympy's Jacobian of x + f(x)"
    )
    return decide(statement, [case(d) for d in VECTOR_SIZES], what)


#: (D, H) of the FFN checks: every activation pattern is enumerated.
FFN_SIZES = ((2, 3), (3, 2))


def ffn_jacobian(statement: str, shortcut: bool) -> Decision:
    def case(d: int, h: int, pattern) -> Case:
        x, W1, b1 = R.vector("x", d), R.matrix("W1", h, d), R.vector("b1", h)
        W2, b2 = R.matrix("W2", d, h), R.vector("b2", d)

        def printed() -> sp.Matrix:
            J = W1.T * sp.diag(*[1 if on else 0 for on in pattern]) * W2.T
            return sp.eye(d) + J if shortcut else J

        def derived() -> sp.Matrix:
            y = R.ffn_on_pattern(x, W1, b1, W2, b2, pattern)
            return R.jacobian(x + y if shortcut else y, x).T

        return Case(f"D = {d}, H = {h}, active units {pattern}", printed, derived, {})

    cases = [
        case(d, h, pattern)
        for d, h in FFN_SIZES
        for pattern in itertools.product((True, False), repeat=h)
    ]
    what = (
        "on the region of this activation pattern (where 1(W1 x + b1 > 0) is the pattern), "
        "the printed matrix equals the transpose of sympy's Jacobian (exhaustive over the "
        "patterns; on the kinks z_h = 0 the indicator is relu'(0) = 0)"
    )
    return decide(statement, cases, what, general=ffn_general(shortcut))


def ffn_general(shortcut: bool, factor: int = 1) -> General:
    """Entry (b, a) of the printed Eq. 27 (the paper's layout) against the chain rule for
    every D and H: ``delta_ab`` (with the shortcut) plus ``sum_h W2_ah P_h dz_h/dx_b``, with
    ``dz_h/dx_b`` by sympy.diff of ``z_h = sum_{j <= D} W1_hj x_j + b1_h`` and ``P_h``
    standing for ``relu'(z_h) = 1(z_h > 0)``. ``factor`` scales the derived side (a
    test's false variant)."""
    hidden = sp.Symbol("H", integer=True, positive=True)
    x, b1 = sp.IndexedBase("x", real=True), sp.IndexedBase("b1", real=True)
    W1, W2 = sp.IndexedBase("W1", real=True), sp.IndexedBase("W2", real=True)
    P = sp.IndexedBase("P", real=True)
    a, b, h, j = sp.symbols("a b h j", integer=True, positive=True)
    z = total(W1[h, j] * x[j], j) + b1[h]
    skip = sp.KroneckerDelta(a, b) if shortcut else 0
    derived = skip + factor * total(W2[a, h] * P[h] * sp.diff(z, x[b]), h, hidden)
    printed = skip + total(W1[h, b] * P[h] * W2[a, h], h, hidden)
    return General(
        printed,
        derived,
        "every D and H (symbolic D and H; entry (b, a), P_h = relu'(z_h), the chain rule "
        "through z = W1 x + b1)",
    )


def _triangle_steps() -> list[Step]:
    """Cauchy-Schwarz and the triangle inequality for vectors of any size D (symbolic D,
    :func:`proofs.core.sum_identity`)."""
    i, j = INDICES
    a, b = sp.IndexedBase("a", real=True), sp.IndexedBase("b", real=True)
    aa, bb, ab = total(a[i] ** 2, i), total(b[i] ** 2, i), total(a[i] * b[i], i)
    lagrange = total(total((a[i] * b[j] - a[j] * b[i]) ** 2, j), i) / 2
    return [
        Step(
            "Cauchy-Schwarz by Lagrange's identity, for every D: "
            r"$\|a\|^2\|b\|^2 - (a \cdot b)^2 = \frac{1}{2}\sum_{i,j}(a_i b_j - a_j b_i)^2 "
            r"\ge 0$",
            "symbolic identity",
            sum_identity(aa * bb - ab**2, lagrange),
        ),
        Step(
            r"hence the triangle inequality, $(\|a\| + \|b\|)^2 - \|a + b\|^2 = "
            r"2(\|a\|\|b\| - a \cdot b) \ge 0$ for every D, and for y = x + g(x): "
            r"$\|y(x) - y(x')\| \le \|x - x'\| + \|g(x) - g(x')\| \le "
            r"(1 + \mathrm{Lip}(g))\|x - x'\|$",
            "symbolic identity",
            sum_identity(
                (sp.sqrt(aa) + sp.sqrt(bb)) ** 2 - total((a[i] + b[i]) ** 2, i),
                2 * (sp.sqrt(aa) * sp.sqrt(bb) - ab),
            ),
        ),
    ]


def _ffn_scaled_identity(c: int) -> Callable[[sp.Matrix], sp.Matrix]:
    """FFN with W1 = I, b1 = 0, W2 = c I, b2 = 0 (D = 2): c relu(x)."""
    return lambda x: R.ffn(x, sp.eye(2), sp.zeros(2, 1), c * sp.eye(2), sp.zeros(2, 1))


def _spectral_norm(J: sp.Matrix) -> sp.Expr:
    """The 2-norm of a small exact matrix: sqrt of the largest eigenvalue of J^T J."""
    return sp.sqrt(max((J.T * J).eigenvals()))


def _pattern_norms(c: int) -> list[sp.Expr]:
    """|dy/dx|_2 of x + FFN(x) (W1 = I, b1 = 0, W2 = c I, b2 = 0; D = 2) on every
    activation pattern, from sympy's Jacobian of the FFN restricted to the pattern."""
    x = R.vector("x", 2)
    norms = []
    for pattern in itertools.product((True, False), repeat=2):
        y = x + R.ffn_on_pattern(
            x, sp.eye(2), sp.zeros(2, 1), c * sp.eye(2), sp.zeros(2, 1), pattern
        )
        norms.append(_spectral_norm(R.jacobian(y, x)))
    return norms


def residual_lipschitz(statement: str) -> Proof:
    x, u = R.vector("x", 2), R.vector("u", 2)
    pos = {x[0]: 1, x[1]: 2, u[0]: 3, u[1]: 5}
    up = _ffn_scaled_identity(2)
    gain = (R.residual(x, up) - R.residual(u, up)).subs(pos).norm() / (x - u).subs(pos).norm()
    branch = (up(x) - up(u)).subs(pos).norm() / (x - u).subs(pos).norm()
    return Proof(
        statement,
        (
            *_triangle_steps(),
            Step(
                "attained within the FFN class: W1 = I, b1 = 0, W2 = 2I, b2 = 0 (D = 2), so "
                "f(x) = 2 relu(x) with Lip(f) = 2; at x = (1, 2), x' = (3, 5) both positive: "
                "$\\|y - y'\\| / \\|x - x'\\| = 3 = 1 + \\mathrm{Lip}(f)$ and "
                "$\\|f(x) - f(x')\\| / \\|x - x'\\| = 2$",
                "exact witness",
                lambda: sp.simplify(gain - 3) == 0 and sp.simplify(branch - 2) == 0,
            ),
            Step(
                "not reached in general: W2 = -2I gives Jacobians I - 2 diag(pattern), of 2-norm "
                "1 on every activation pattern (exhaustive), so Lip(x + f) = 1 < 3 = "
                "1 + Lip(f). For a linear branch A the bound is reached exactly when |A|_2 is an "
                "eigenvalue of A (equality in the triangle inequality needs Av = |A| v)",
                "exhaustive enumeration",
                lambda: all(n == 1 for n in _pattern_norms(-2)) and max(_pattern_norms(2)) == 3,
            ),
        ),
    )


def weighted_definition(statement: str) -> Decision:
    """The printed f = x + nu * f: at nu = 0 it forces f(x) = x; the intent is Eq. 55."""
    x = sp.Matrix([sp.Integer(1)])
    nu = sp.Matrix([sp.Integer(0)])
    zero_branch = lambda v: sp.zeros(*v.shape)  # noqa: E731 - a one-line branch f = 0
    printed = Case(
        "D = 1, nu = 0, branch f = 0, x = 1: the printed equation's two sides f(x) and "
        "x + nu * f(x)",
        lambda: zero_branch(x),
        lambda: x + sp.matrix_multiply_elementwise(nu, zero_branch(x)),
        {},
    )

    def intended(d: int) -> Case:
        xs, nus = R.vector("x", d), R.vector("nu", d)
        f = R.generic_branch(d)
        return Case(
            f"D = {d}, generic branch",
            lambda: xs + sp.Matrix([nus[i] * f(xs)[i] for i in range(d)]),
            lambda: R.weighted_residual(xs, f, nus),
            {},
        )

    return decide(
        statement,
        [printed],
        "the printed equation holds",
        [intended(d) for d in VECTOR_SIZES],
        "y = x + nu * f(x, W) (Eq. 55) is the block the row's Jacobian and constant describe",
    )


def weighted_lipschitz(statement: str) -> tuple[Proof, Proof, dict]:
    """(literal counterexample, proof of the intended bound with |nu|, witness)."""
    t, s = sp.symbols("t s", real=True)
    nu, lip_f = sp.Integer(-3), sp.Integer(1)
    block = lambda v: v + nu * v  # noqa: E731 - f(x) = x, y = x + nu x
    lip = abs(sp.diff(block(t), t))
    printed = 1 + nu * lip_f
    witness = {
        "D": 1,
        "nu": str(nu),
        "f": "f(x) = x",
        "lipschitz": str(lip),
        "printed": str(printed),
    }
    literal = Proof(
        statement,
        (
            Step(
                "D = 1, nu = -3, f(x) = x (Lip(f) = 1): y = -2x has Lipschitz constant 2, the "
                "printed $1 + \\max_D(\\nu_D)\\,\\mathrm{Lip}(f) = -2$",
                "exact witness",
                lambda: lip == 2 and printed == -2,
            ),
        ),
    )
    i = INDICES[0]
    w = sp.IndexedBase("w", real=True)
    bound = sp.Symbol("n", nonnegative=True)
    slack = sp.IndexedBase("s", nonnegative=True)  # n^2 - nu_i^2 >= 0
    c = sp.Symbol("c", positive=True)
    difference = total(bound**2 * w[i] ** 2, i) - total((bound**2 - slack[i]) * w[i] ** 2, i)
    intended = Proof(
        "1 + max_D |nu_D| Lip(f)",
        (
            *_triangle_steps(),
            Step(
                "$\\|\\mathrm{diag}(\\nu) w\\|^2 \\le \\max_D|\\nu_D|^2 \\|w\\|^2$ for "
                "every D: with $n^2 = \\nu_i^2 + s_i$, $s_i \\ge 0$, the difference is "
                "$\\sum_i s_i w_i^2$",
                "symbolic identity",
                sum_identity(difference, total(slack[i] * w[i] ** 2, i)),
            ),
            Step(
                "and each of its D terms $s_i w_i^2$ is nonnegative",
                "symbolic sign",
                assumption(slack[i] * w[i] ** 2, "nonnegative"),
            ),
            Step(
                "attained: nu = c 1 with c > 0 and f(x) = x give y = (1 + c) x, Lipschitz "
                "constant 1 + c = 1 + max|nu| Lip(f)",
                "symbolic identity",
                identity(sp.diff(s + c * s, s), 1 + c),
            ),
        ),
    )
    return literal, intended, witness


# --- Closed forms the kernels use ------------------------------------------------------


def softmax_closed_forms() -> Proof:
    """kernels.softmax's VJP forms, proven equal to sympy.diff of g^T softmax(x) for a
    symbolic D and at D = 1..5.

    ``dx_i = y_i (g_i - <g, y>)`` for every i, and at the argmax m the form without
    cancellation, ``dx_m = y_m sum_{j != m} y_j (g_m - g_j)`` (equal since sum_j y_j = 1).
    """
    y_of, xi = _softmax_entries()
    gi = sp.IndexedBase("g", real=True)
    a, b = sp.symbols("a b", integer=True, positive=True)
    inner = total(gi[b] * y_of(b), b)
    general = total(sp.diff(y_of(b), xi[a]) * gi[b], b)
    steps = [
        Step(
            "every D (symbolic D, entry a): $dx_a = y_a(g_a - \\langle g, y \\rangle)$ equals "
            "$\\sum_b g_b\\, \\partial y_b / \\partial x_a$",
            "symbolic identity",
            sum_identity(y_of(a) * (gi[a] - inner), general),
        ),
        Step(
            "every D (symbolic D, entry a): $dx_a = y_a \\sum_{b} y_b (g_a - g_b)$ equals it "
            "too (the kernel's form at the argmax, whose term at b = a is 0)",
            "symbolic identity",
            sum_identity(y_of(a) * total(y_of(b) * (gi[a] - gi[b]), b), general),
        ),
    ]
    for d in (1, 2, 3, 4, 5):
        x, g = R.vector("x", d), R.vector("g", d)
        y = R.softmax(x)
        derived = sp.Matrix([sp.diff((g.T * y)[0], s) for s in x])
        inner = (g.T * y)[0]
        plain = sp.Matrix([y[i] * (g[i] - inner) for i in range(d)])
        stable = sp.Matrix(
            [y[i] * sum(y[j] * (g[i] - g[j]) for j in range(d) if j != i) for i in range(d)]
        )
        steps += [
            Step(
                f"D = {d}: $dx_i = y_i(g_i - \\langle g, y \\rangle)$ equals sympy.diff of "
                "$g^\\top \\mathrm{softmax}(x)$",
                "symbolic identity",
                lambda a=plain, b=derived: same(a, b),
            ),
            Step(
                f"D = {d}: $dx_i = y_i \\sum_{{j \\ne i}} y_j (g_i - g_j)$ (the kernel's form "
                "at the row's argmax) equals it too",
                "symbolic identity",
                lambda a=stable, b=derived: same(a, b),
            ),
        ]
    return Proof("kernels.softmax: the VJP forms", tuple(steps))
