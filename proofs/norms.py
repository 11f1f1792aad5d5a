r"""Proofs for the normalization rows of Table 2: Jacobians in the paper's layout, and
Lipschitz constants with their tightness.

Conventions. The paper (001_76ce3a8a4b6079c3.txt) writes Jacobians in denominator layout
(its Linear Jacobian is W^T): the printed matrix is the transpose of ``dy/dx``. Its eps,
:data:`EPS_PAPER`, is added to a squared norm; PyTorch's eps is added to a mean, so
``eps_paper = D eps``. In PyTorch terms the LayerNorm scale is ``r = 1/sqrt(var + eps)``,
``sqrt(D)/sqrt(|y|^2 + eps_paper) = r``, and ``y y^T/(|y|^2 + eps_paper) = z z^T / D`` with
``z = (x - mean) r``.

The structure every Lipschitz proof here uses: with ``P = I - 11^T/D`` (the centering
projector), LayerNorm's Jacobian is ``J = r diag(gamma) A``, ``A = P - z z^T/D``. Since
``z`` is orthogonal to 1 and ``|z|^2/D = var/(var + eps)``, ``A = (P - Q) + eps/(var + eps) Q``
with ``Q = z z^T/|z|^2``: two orthogonal projectors onto orthogonal subspaces, so the
eigenvalues of A are 0, eps/(var+eps) and 1 -- ``|A| <= 1`` and ``P A = A``. Hence
``|J| <= r |diag(gamma) P| <= |diag(gamma) P| / sqrt(eps)``, with equality at constant rows.
The printed Jacobians of LayerNorm (and Eq. 19), RMSNorm and CenterNorm are checked for a
symbolic size D: entry (a, b) with the row sums written as sums over 1..D
(:func:`proofs.core.sum_identity`), cross-checked with concrete matrices at D = 2 and 3. The other
matrix identities are still checked exactly at D = 1..5 only (the proofs say so); scalar
identities are checked with D and the variance as symbols.
"""

from __future__ import annotations

from functools import cache

import sympy as sp

from derive.definitions.norms import (
    CROSS_CHECK_SIZES,
    PROOF_SIZES,
    WEIGHTNORM,
    eps,
    n,
    paper_forward,
    paper_forward_entry,
    row_norm,
    sum_statistics,
    symbolic_row_norm_checks,
    vector,
    weightnorm_checks,
)
from proofs.core import (
    SIZE,
    Proof,
    Step,
    Verdict,
    assumption,
    identity,
    is_zero,
    sum_identity,
    total,
)

#: The paper's eps (added to a squared norm): eps_paper = D * eps.
EPS_PAPER = sp.Symbol("epsilon_p", positive=True)
#: A row's variance (LayerNorm) or mean square (RMSNorm), as a symbol.
var = sp.Symbol("sigma2", nonnegative=True)
#: A squared norm |v_i|^2 (WeightNorm).
q = sp.Symbol("q", nonnegative=True)


def centering(size: int) -> sp.Matrix:
    """P = I - 11^T / D."""
    return sp.eye(size) - sp.ones(size, size) / size


def _zero(m: sp.Matrix) -> bool:
    return all(is_zero(entry) for entry in m)


# --- printed Jacobians (denominator layout) -----------------------------------------------


def printed_jacobian(key: str, size: int) -> sp.Matrix:
    """Table 2's printed Jacobian of ``key`` at D = ``size``, in the paper's layout and eps.

    ``"layernorm_z"`` is Eq. 19: the Jacobian of z = sqrt(D) y / sqrt(|y|^2 + eps), no gamma.
    """
    xs, gammas = vector("x", size), vector("gamma", size)
    gamma = sp.diag(*gammas)
    p = centering(size)
    if key in ("layernorm", "layernorm_z"):
        y = p * xs
        s2 = (y.T * y)[0] + EPS_PAPER
        core = sp.sqrt(size) / sp.sqrt(s2) * p * (sp.eye(size) - y * y.T / s2)
        return core if key == "layernorm_z" else core * gamma
    if key == "rmsnorm":
        s2 = (xs.T * xs)[0] + EPS_PAPER
        return sp.sqrt(size) / sp.sqrt(s2) * (sp.eye(size) - xs * xs.T / s2) * gamma
    if key == "centernorm":
        return sp.Rational(size, size - 1) * p * gamma
    raise KeyError(key)


def _paper_numerator_jacobian(key: str, size: int) -> sp.Matrix:
    """sympy.diff of the paper's forward (paper eps), numerator layout."""
    xs = vector("x", size)
    if key == "layernorm_z":
        y = centering(size) * xs
        z = sp.sqrt(size) * y / sp.sqrt((y.T * y)[0] + EPS_PAPER)
        return z.jacobian(xs)
    return paper_forward(key, size, EPS_PAPER).jacobian(xs)


@cache
def _numerator_jacobian(key: str, size: int) -> sp.Matrix:
    return _paper_numerator_jacobian(key, size)


def printed_jacobian_matches(key: str, size: int, printed=printed_jacobian) -> bool:
    """The printed matrix equals the transpose of dy/dx (the paper's denominator layout)."""
    return _zero(printed(key, size) - _numerator_jacobian(key, size).T)


def witness_point(size: int) -> dict[sp.Symbol, sp.Rational]:
    """An exact point: x = (1, 3, 4, ...) (not constant), gamma = (1, 2, ...), eps_p = 1/2."""
    xs, gammas = vector("x", size), vector("gamma", size)
    point = {xs[i]: sp.Integer(i * i + 1 if i else 1) + i for i in range(size)}
    point |= {gammas[i]: sp.Integer(i + 1) for i in range(size)}
    point[EPS_PAPER] = sp.Rational(1, 2)
    return point


def jacobian_counterexample(key: str, size: int, printed=printed_jacobian) -> dict | None:
    """An exact point where the printed and derived matrices differ, with both values."""
    point = witness_point(size)
    shown = printed(key, size).subs(point)
    true = _numerator_jacobian(key, size).T.subs(point)
    for (i, j), value in zip(
        [(i, j) for i in range(size) for j in range(size)], shown - true, strict=True
    ):
        if not is_zero(sp.nsimplify(value)):
            return {
                "D": size,
                "point": {str(k): str(v) for k, v in point.items()},
                "entry": (i, j),
                "printed": str(sp.nsimplify(shown[i, j])),
                "derived": str(sp.nsimplify(true[i, j])),
            }
    return None


@cache
def paper_definition_matches(key: str, size: int) -> bool:
    """The paper's forward with eps_paper = D eps is PyTorch's forward."""
    printed = paper_forward(key, size, size * eps)
    _, _, _, torch = row_norm(key).forward(size)
    return _zero(printed - torch)


#: The entry (a, b) of a Jacobian for every size D, and the summation index.
_ROW, _COLUMN = sp.symbols("a b", integer=True, positive=True)
_L = sp.Symbol("l", integer=True, positive=True)


def projector_entry(r: sp.Symbol, c: sp.Symbol, centered: bool = True) -> sp.Expr:
    """Entry (r, c) of ``P = I - 11^T/D`` for every size D (``I`` if not ``centered``)."""
    return sp.KroneckerDelta(r, c) - (1 / SIZE if centered else 0)


def printed_jacobian_entry(key: str) -> sp.Expr:
    """Entry (a, b) of :func:`printed_jacobian` for every size D (sums over 1..D)."""
    x, gamma = sp.IndexedBase("x", real=True), sp.IndexedBase("gamma", real=True)
    a, b, l = _ROW, _COLUMN, _L  # noqa: E741 - the summation index
    centering, delta = projector_entry, sp.KroneckerDelta
    scale = 1 if key == "layernorm_z" else gamma[b]
    if key in ("layernorm", "layernorm_z"):
        mean = total(x[l], l) / SIZE
        s2 = total((x[l] - mean) ** 2, l) + EPS_PAPER
        outer = total(centering(a, l) * (delta(l, b) - (x[l] - mean) * (x[b] - mean) / s2), l)
        return sp.sqrt(SIZE) / sp.sqrt(s2) * outer * scale
    if key == "rmsnorm":
        s2 = total(x[l] ** 2, l) + EPS_PAPER
        return sp.sqrt(SIZE) / sp.sqrt(s2) * (delta(a, b) - x[a] * x[b] / s2) * scale
    if key == "centernorm":
        return SIZE / (SIZE - 1) * centering(a, b) * scale
    raise KeyError(key)


def _derived_entry(key: str) -> sp.Expr:
    """d y_b / d x_a by sympy.diff of the paper's forward for every size D: entry (a, b) of
    the transpose of the numerator-layout Jacobian (the paper's denominator layout)."""
    x = sp.IndexedBase("x", real=True)
    if key == "layernorm_z":
        gamma = sp.IndexedBase("gamma", real=True)
        forward = paper_forward_entry("layernorm", _COLUMN).subs(gamma[_COLUMN], 1)
    else:
        forward = paper_forward_entry(key, _COLUMN)
    return sp.diff(forward, x[_ROW])


@cache
def symbolic_jacobian_matches(key: str) -> bool:
    """The printed Jacobian's entry (a, b) equals d y_b / d x_a for a symbolic size D."""
    return sum_identity(printed_jacobian_entry(key), _derived_entry(key))()


def jacobian_decision(
    key: str, statement: str, printed=printed_jacobian
) -> tuple[str, Proof, dict | None]:
    """(verdict, proof, witness) of a printed Jacobian: ``holds`` if its entry (a, b) equals
    that of the transpose of sympy.diff for a symbolic size D (and, as a cross-check of the
    two transcriptions of the printed matrix, at D = 2 and 3 with concrete matrices); else
    ``fails`` with an exact point where an entry differs, searched at D = 1..5 (2..5 for
    CenterNorm)."""
    first = 2 if key == "centernorm" else 1

    def equal_at(size: int, what: str) -> Step:
        return Step(
            statement=f"D = {size}{what}: the printed matrix equals the transpose of sympy.diff "
            "of the paper's forward (denominator layout, eps added to the squared norm)",
            method="symbolic identity",
            check=lambda: printed_jacobian_matches(key, size, printed),
        )

    if printed is printed_jacobian and symbolic_jacobian_matches(key):
        at_least = "D >= 2" if key == "centernorm" else "every D"
        steps = (
            Step(
                statement=(
                    f"{at_least}, symbolic D: entry (a, b) of the printed matrix equals "
                    "d y_b / d x_a, sympy.diff of the paper's forward (eps added to the squared "
                    "norm) with its row sums written as sums over 1..D; Kronecker deltas of a "
                    "and b decided for a = b and a != b"
                ),
                method="symbolic identity",
                check=lambda: symbolic_jacobian_matches(key),
            ),
            *(equal_at(size, ", cross-check with concrete matrices") for size in CROSS_CHECK_SIZES),
        )
        return Verdict.HOLDS, Proof(claim=statement, steps=steps), None
    sizes = [s for s in PROOF_SIZES if s >= first]
    for size in sizes:
        if printed_jacobian_matches(key, size, printed):
            continue
        witness = jacobian_counterexample(key, size, printed)
        if witness is None:
            break
        step = Step(
            statement=(
                f"D = {size}, at the exact point {witness['point']}: entry {witness['entry']} "
                f"of the printed matrix is {witness['printed']}, of the transpose of sympy.diff "
                f"{witness['derived']}"
            ),
            method="exact witness",
            check=lambda s=size, w=witness: jacobian_counterexample(key, s, printed) == w,
        )
        return Verdict.FAILS, Proof(claim=statement, steps=(step,)), witness
    steps = tuple(equal_at(size, "") for size in sizes)
    return Verdict.HOLDS, Proof(claim=statement, steps=steps), None


@cache
def symbolic_definition_matches(key: str, eps_factor: int = 1) -> bool:
    """:func:`paper_definition_matches` for a symbolic D: entry b of the printed forward
    (:func:`derive.definitions.norms.paper_forward_entry`) with ``epsilon_p = D eps`` equals
    PyTorch's ``gamma_b (x_b - mean) / sqrt(second moment + eps) + beta_b``, the row sums as
    sums over 1..D. ``eps_factor`` scales PyTorch's eps (a test's false variant)."""
    b = _COLUMN
    x, gamma, beta = (sp.IndexedBase(name, real=True) for name in ("x", "gamma", "beta"))
    printed = paper_forward_entry(key, b).subs(EPS_PAPER, SIZE * eps)
    center, second = sum_statistics(x, centered=key != "rmsnorm")
    torch = gamma[b] * (x[b] - center) / sp.sqrt(second + eps_factor * eps) + beta[b]
    return sum_identity(printed, torch)()


@cache
def symbolic_centernorm_definition(scale_factor: int = 1) -> bool:
    """Entry b of Table 2's CenterNorm forward, ``D/(D-1) gamma_b (x_b - mean) + beta_b``,
    equals the row-norm data the kernels are generated from (``CENTERNORM``: centered, scaled
    by its ``scale``), for a symbolic D (sums over 1..D). ``scale_factor`` scales the
    kernels' side (a test's false variant)."""
    b = _COLUMN
    x, gamma, beta = (sp.IndexedBase(name, real=True) for name in ("x", "gamma", "beta"))
    module = row_norm("centernorm")
    center, _ = sum_statistics(x, centered=module.centered)
    kernel = gamma[b] * scale_factor * module.scale * (x[b] - center) + beta[b]
    return sum_identity(paper_forward_entry("centernorm", b), kernel)()


@cache
def weightnorm_definition_matches(size: int, outputs: int) -> bool:
    """Table 2's WeightNorm, ``W(i, :) = gamma_i v_i / sqrt(|v_i|^2 + eps)`` and ``WN(x) =
    W x``, written out here entry by entry, is the kernels' forward at D = ``size`` with
    ``outputs`` rows."""
    xs, vs, gammas, y = WEIGHTNORM.forward(size, outputs)
    for i in range(outputs):
        norm2 = sum(vs[i, j] ** 2 for j in range(size))
        printed = sum(gammas[i] * vs[i, j] * xs[j] for j in range(size)) / sp.sqrt(norm2 + eps)
        if not is_zero(printed - y[i]):
            return False
    return True


@cache
def symbolic_weightnorm_definition(eps_factor: int = 1) -> bool:
    """Entry (i, j) of the printed W for a symbolic D (``|v_i|^2`` a sum over 1..D) equals
    the kernels' ``gamma_i v_ij scale(|v_i|^2)``; ``eps_factor`` scales the printed eps (a
    test's false variant)."""
    i, j, l = _ROW, _COLUMN, _L  # noqa: E741 - the summation index
    v, gamma = sp.IndexedBase("v", real=True), sp.IndexedBase("gamma", real=True)
    norm2 = total(v[i, l] ** 2, l)
    printed = gamma[i] * v[i, j] / sp.sqrt(norm2 + eps_factor * eps)
    kernel = gamma[i] * v[i, j] * WEIGHTNORM.scale.subs(q, norm2)
    return sum_identity(printed, kernel)()


def weightnorm_definition_proof(statement: str) -> Proof:
    """Table 2's WeightNorm forward is the kernels' (symbolic D; D = 1..4 with O = 1, 2), and
    at eps = 0 it is Salimans and Kingma's ``gamma_i v_i / |v_i|`` (PyTorch's
    ``weight_norm``)."""
    every = Step(
        statement="for every D (entry (i, j), symbolic D): the printed "
        "$\\gamma_i v_{ij} / \\sqrt{\\|v_i\\|_2^2 + \\epsilon}$ equals the kernels' W",
        method="symbolic identity",
        check=symbolic_weightnorm_definition,
    )
    concrete = Step(
        statement="D = 1..4 with O = 1 and 2 outputs: WN(x) = W x as printed equals the "
        "kernels' forward",
        method="symbolic identity",
        check=lambda: all(
            weightnorm_definition_matches(size, outputs)
            for size in range(1, 5)
            for outputs in (1, 2)
        ),
    )
    no_eps = Step(
        statement="at eps = 0 the row is $\\gamma_i v_i / \\|v_i\\|_2$, Salimans and "
        "Kingma's reparametrization (PyTorch's weight_norm, the kernels' default eps = 0)",
        method="symbolic identity",
        check=lambda: is_zero((WEIGHTNORM.scale - 1 / sp.sqrt(q)).subs(eps, 0)),
    )
    return Proof(claim=statement, steps=(every, concrete, no_eps))


def centernorm_definition_proof(statement: str) -> Proof:
    """Table 2's CenterNorm forward is the kernels' (D >= 2): symbolic D and D = 2..5."""
    every = Step(
        statement="for every D >= 2 (entry b, symbolic D): the printed "
        "$\\frac{D}{D-1}\\gamma \\odot (I - \\tfrac{1}{D}\\mathbf{1}\\mathbf{1}^\\top)x "
        "+ \\beta$ equals the kernels' centered, D/(D-1)-scaled row",
        method="symbolic identity",
        check=symbolic_centernorm_definition,
    )
    concrete = tuple(
        Step(
            statement=f"D = {size}: the printed forward equals the kernels' definition",
            method="symbolic identity",
            check=lambda s=size: paper_definition_matches("centernorm", s),
        )
        for size in PROOF_SIZES
        if size >= 2
    )
    return Proof(claim=statement, steps=(every, *concrete))


def definition_proof(key: str, statement: str) -> Proof:
    every = Step(
        statement=(
            "for every D (entry b, symbolic D): the printed forward with "
            "$\\epsilon_p = D\\epsilon$ equals PyTorch's, the row's statistics as sums over "
            "1..D"
        ),
        method="symbolic identity",
        check=lambda: symbolic_definition_matches(key),
    )
    concrete = tuple(
        Step(
            statement=(
                f"D = {size}: the printed forward with $\\epsilon_p = D\\epsilon$ equals "
                "PyTorch's (eps added to the "
                + ("variance" if key == "layernorm" else "mean of squares")
                + ")"
            ),
            method="symbolic identity",
            check=lambda s=size: paper_definition_matches(key, s),
        )
        for size in PROOF_SIZES
    )
    return Proof(claim=statement, steps=(every, *concrete))


# --- the centered gamma norm |diag(gamma) P|_2 ----------------------------------------------


def centered_gamma_norm(gammas: list) -> sp.Expr:
    """|diag(gamma) (I - 11^T/D)|_2, exactly: sqrt of the largest eigenvalue of
    ``diag(gamma^2) - gamma gamma^T / D``."""
    size = len(gammas)
    g = sp.Matrix([sp.nsimplify(v) for v in gammas])
    gram = sp.diag(*[v**2 for v in g]) - g * g.T / size
    eigenvalues = [sp.nsimplify(e) for e in gram.eigenvals()]
    return sp.sqrt(max(eigenvalues, key=lambda e: sp.N(e, 50)))


#: The looseness witness: a unique largest |gamma_i| (D = 3).
LOOSE_GAMMA = (2, 1, 1)


def _gram_identity(size: int) -> bool:
    """(diag(gamma) P)(diag(gamma) P)^T = diag(gamma)^2 - gamma gamma^T / D."""
    gammas = vector("gamma", size)
    m = sp.diag(*gammas) * centering(size)
    return _zero(m * m.T - (sp.diag(*[g**2 for g in gammas]) - gammas * gammas.T / size))


def _repeated_max_eigenvector(size: int) -> bool:
    """If gamma_2 = +-gamma_1, w = gamma_2 e_1 - gamma_1 e_2 has gamma^T w = 0 and is an
    eigenvector of diag(gamma^2) - gamma gamma^T/D with eigenvalue gamma_1^2."""
    gammas = vector("gamma", size)
    ok = True
    for sign in (1, -1):
        g = gammas.subs(gammas[1], sign * gammas[0])
        gram = sp.diag(*[v**2 for v in g]) - g * g.T / size
        w = sp.zeros(size, 1)
        w[0], w[1] = g[1], -g[0]
        ok &= _zero(gram * w - g[0] ** 2 * w) and is_zero((g.T * w)[0])
    return ok


@cache
def symbolic_projector_identity() -> bool:
    """``P^2 = P`` and ``P = P^T`` for a symbolic D: entry (a, b) of ``P = I - 11^T/D``."""
    a, b, l = _ROW, _COLUMN, _L  # noqa: E741 - the summation index
    square = total(projector_entry(a, l) * projector_entry(l, b), l)
    return (
        sum_identity(square, projector_entry(a, b))()
        and sum_identity(projector_entry(a, b), projector_entry(b, a))()
    )


def centering_shortens(factor: int = 1) -> bool:
    """``|x|^2 - |P x|^2 = D mean(x)^2`` with ``P = I - 11^T/D``, for a symbolic D (sums over
    1..D) and at D = 1..5: the centered row is never longer than x, and as long exactly when
    the mean is 0. ``factor`` scales the right side (a test's false variant)."""
    a, b = _ROW, _COLUMN
    x = sp.IndexedBase("x", real=True)
    mean = total(x[b], b) / SIZE
    gap = total(x[a] ** 2, a) - total((x[a] - mean) ** 2, a)
    if not sum_identity(gap, factor * SIZE * mean**2)():
        return False
    for size in range(1, 6):
        xs = vector("x", size)
        y = centering(size) * xs
        if not is_zero((xs.T * xs)[0] - (y.T * y)[0] - factor * size * (sum(xs) / size) ** 2):
            return False
    return True


@cache
def symbolic_repeated_max_eigenvector(factor: int = 1) -> bool:
    """:func:`_repeated_max_eigenvector` for a symbolic D, for ``w = gamma_j e_i - gamma_i e_j``
    (i != j): entry t of ``(diag(gamma^2) - gamma gamma^T/D) w`` is ``gamma_t^2 w_t`` and
    ``gamma^T w = 0`` for every D and gamma (sums over 1..D); and ``gamma_t^2 w_t = gamma_i^2
    w_t`` for t = i, j (w vanishes elsewhere) once ``gamma_j = +-gamma_i``. ``factor`` scales
    the claimed eigenvalue (a test's false variant)."""
    i, j, t = sp.symbols("i j t", integer=True, positive=True)
    l = _L  # noqa: E741 - the summation index
    gamma = sp.IndexedBase("gamma", real=True)

    def w(index):
        return gamma[j] * sp.KroneckerDelta(index, i) - gamma[i] * sp.KroneckerDelta(index, j)

    gram = sp.KroneckerDelta(t, l) * gamma[l] ** 2 - gamma[t] * gamma[l] / SIZE
    distinct = [(i, j)]
    if not sum_identity(total(gram * w(l), l), gamma[t] ** 2 * w(t), distinct)():
        return False
    if not sum_identity(total(gamma[l] * w(l), l), 0, distinct)():
        return False
    for sign in (1, -1):
        tied = {gamma[j]: sign * gamma[i]}
        for entry in (i, j):
            left = (gamma[entry] ** 2 * w(entry)).xreplace(tied)
            right = (factor * gamma[i] ** 2 * w(entry)).xreplace(tied)
            if not is_zero(sp.expand(left - right).subs(sp.KroneckerDelta(i, j), 0)):
                return False
    return True


def _loose_witness() -> bool:
    """gamma = (2, 1, 1): |diag(gamma) P|^2 < 4 = max gamma^2, exactly."""
    value = centered_gamma_norm(list(LOOSE_GAMMA)) ** 2
    return bool(sp.N(4 - value, 50) > 0) and value.is_algebraic


def symbolic_gram_identity() -> bool:
    """:func:`_gram_identity` for a symbolic D: entry (a, b) with sums over 1..D."""
    gamma = sp.IndexedBase("gamma", real=True)
    a, b, l = _ROW, _COLUMN, _L  # noqa: E741 - the summation index
    p = projector_entry
    left = total(gamma[a] * p(a, l) * gamma[b] * p(b, l), l)
    right = gamma[a] ** 2 * sp.KroneckerDelta(a, b) - gamma[a] * gamma[b] / SIZE
    return sum_identity(left, right)()


def gamma_norm_steps() -> list[Step]:
    """|diag(gamma) P| <= max|gamma|, equality iff the largest |gamma_i| occurs twice."""
    return [
        Step(
            statement=(
                r"$(\mathrm{diag}(\gamma) P)(\mathrm{diag}(\gamma) P)^\top = "
                r"\mathrm{diag}(\gamma^2) - \gamma\gamma^\top / D$ ($P^2 = P$), for every D "
                r"(entry (a, b), symbolic D) and with concrete matrices at D = 2..5; "
                r"subtracting the positive semidefinite $\gamma\gamma^\top/D$ "
                r"gives $\|\mathrm{diag}(\gamma) P\|_2 \le \max_i |\gamma_i|$"
            ),
            method="symbolic identity",
            check=lambda: (
                symbolic_gram_identity() and all(_gram_identity(s) for s in PROOF_SIZES[1:])
            ),
        ),
        Step(
            statement=(
                r"If the largest $|\gamma_i|$ occurs twice ($\gamma_j = \pm\gamma_i$), "
                r"$w = \gamma_j e_i - \gamma_i e_j$ is orthogonal to $\gamma$ and an "
                r"eigenvector with eigenvalue $\gamma_i^2$: the bound is attained "
                r"(e.g. $\gamma = \mathbf{1}$); for every D (entry t, symbolic D) and "
                r"with concrete matrices at D = 2..5"
            ),
            method="symbolic identity",
            check=lambda: (
                symbolic_repeated_max_eigenvector()
                and all(_repeated_max_eigenvector(s) for s in PROOF_SIZES[1:])
            ),
        ),
        Step(
            statement=(
                r"If it occurs once it is not attained: for $\gamma = (2, 1, 1)$, "
                r"$\|\mathrm{diag}(\gamma) P\|_2^2 = "
                + sp.latex(centered_gamma_norm(list(LOOSE_GAMMA)) ** 2)
                + r" < 4$ exactly (in general $w^\top(\mathrm{diag}(\gamma^2) - \gamma_1^2 I)w"
                r" \le 0$ vanishes only for $w \parallel e_1$, where "
                r"$w^\top\gamma\gamma^\top w/D = \gamma_1^2 w_1^2 / D > 0$)"
            ),
            method="exact witness",
            check=_loose_witness,
        ),
    ]


# --- LayerNorm and RMSNorm: the spectral decomposition of A ---------------------------------


@cache
def spectral_check(key: str, size: int) -> bool:
    """A = (Pc - Q) + eps/(s + eps) Q with Q = z z^T/|z|^2, QPc = Q, Pc A = A (s > 0).

    Pc is P for LayerNorm, I for RMSNorm; s the variance / mean square of the row.
    """
    module = row_norm(key)
    xs = vector("x", size)
    deviations, scale = module.statistics(xs)
    z = deviations * scale
    pc = centering(size) if module.centered else sp.eye(size)
    a = pc - z * z.T / size
    second = sum(v**2 for v in deviations) / size
    qm = deviations * deviations.T / (deviations.T * deviations)[0]
    ok = _zero(a - ((pc - qm) + eps / (second + eps) * qm))
    ok &= _zero(qm * pc - qm) and _zero(pc * a - a) and _zero(pc * pc - pc)
    return ok


@cache
def symbolic_spectral_check(key: str) -> bool:
    """:func:`spectral_check` for a symbolic size D, entry (a, b) with the row sums as sums
    over 1..D: A = (Pc - Q) + eps/(s + eps) Q, QPc = Q, Pc A = A, Pc Pc = Pc."""
    module = row_norm(key)
    x = sp.IndexedBase("x", real=True)
    a, b, l = _ROW, _COLUMN, _L  # noqa: E741 - the summation index
    center, second = sum_statistics(x, module.centered)
    scale = module.scale_of(second)

    def dev(t):
        return x[t] - center

    def pc(r, c):
        return projector_entry(r, c, module.centered)

    def qm(r, c):
        return dev(r) * dev(c) / (SIZE * second)

    def am(r, c):
        return pc(r, c) - dev(r) * scale * dev(c) * scale / SIZE

    checks = (
        (am(a, b), (pc(a, b) - qm(a, b)) + eps / (second + eps) * qm(a, b)),
        (total(qm(a, l) * pc(l, b), l), qm(a, b)),
        (total(pc(a, l) * am(l, b), l), am(a, b)),
        (total(pc(a, l) * pc(l, b), l), pc(a, b)),
    )
    return all(sum_identity(left, right)() for left, right in checks)


@cache
def symbolic_attained_check(key: str) -> bool:
    """:func:`attained_check` for a symbolic D: sympy.diff of the forward (sums over 1..D)
    at a constant row x = c (LayerNorm) or at x = 0 (RMSNorm), entry (a, b)."""
    module = row_norm(key)
    forms = module.entry_forms(_ROW, _COLUMN)
    x, gamma = sp.IndexedBase("x", real=True), sp.IndexedBase("gamma", real=True)
    c = sp.Symbol("c", real=True) if module.centered else sp.S.Zero
    derived = sp.diff(forms["y_a"], x[_COLUMN]).replace(
        lambda e: isinstance(e, sp.Indexed) and e.base == x, lambda e: c
    )
    centering = projector_entry(_ROW, _COLUMN, module.centered)
    return sum_identity(derived, gamma[_ROW] * centering / sp.sqrt(eps))()


@cache
def attained_check(key: str, size: int) -> bool:
    """J at the worst-case input equals the bound's matrix: constant row (LayerNorm:
    diag(gamma) P / sqrt(eps)) or the zero row (RMSNorm: diag(gamma) / sqrt(eps))."""
    module = row_norm(key)
    xs, gammas, _, y = module.forward(size)
    c = sp.Symbol("c", real=True)
    point = {v: (c if module.centered else 0) for v in xs}
    jacobian = y.jacobian(xs).subs(point)
    pc = centering(size) if module.centered else sp.eye(size)
    return _zero(jacobian - sp.diag(*gammas) * pc / sp.sqrt(eps))


def _scale_bound() -> bool:
    """1/sqrt(eps) - 1/sqrt(s + eps) = s / (sqrt(eps) sqrt(s+eps) (sqrt(s+eps) + sqrt(eps)))."""
    rewritten = var / (sp.sqrt(eps) * sp.sqrt(var + eps) * (sp.sqrt(var + eps) + sp.sqrt(eps)))
    return is_zero(1 / sp.sqrt(eps) - 1 / sp.sqrt(var + eps) - rewritten) and bool(
        rewritten.subs(eps, sp.Symbol("e", positive=True)).is_nonnegative
    )


def row_lipschitz_proof(key: str) -> Proof:
    """The global Lipschitz constant of LayerNorm or RMSNorm (PyTorch eps), with attainment."""
    module = row_norm(key)
    centered = module.centered
    what = "variance" if centered else "mean square"
    p_text = r"P = I - \mathbf{1}\mathbf{1}^\top/D" if centered else "P = I"
    sizes = PROOF_SIZES
    steps = [
        Step(
            statement=(
                rf"$J = r\,\mathrm{{diag}}(\gamma)\,A$ with $A = P - z z^\top / D$, ${p_text}$, "
                rf"$r = 1/\sqrt{{\sigma^2 + \epsilon}}$ ($\sigma^2$ the row's {what}), "
                r"equal to sympy.diff of the forward for every D (entry (a, b), symbolic D)"
            ),
            method="symbolic identity",
            check=lambda: symbolic_row_norm_checks(key)["jacobian"],
        ),
        Step(
            statement=(
                r"$|z|^2 / D = \sigma^2/(\sigma^2+\epsilon)$, so $1 - |z|^2/D = "
                r"\epsilon/(\sigma^2+\epsilon) \in (0, 1]$"
            ),
            method="symbolic identity",
            check=identity(1 - (n * var / (var + eps)) / n, eps / (var + eps)),
        ),
        Step(
            statement=(
                r"$A = (P - Q) + \frac{\epsilon}{\sigma^2+\epsilon} Q$ with "
                r"$Q = z z^\top/|z|^2$, $QP = Q$, $P^2 = P$: orthogonal projectors onto "
                r"orthogonal subspaces, so the eigenvalues of $A$ lie in "
                r"$\{0, \epsilon/(\sigma^2+\epsilon), 1\}$, $\|A\|_2 \le 1$ and $PA = A$; "
                r"checked for every D (entry (a, b), symbolic D) where $\sigma^2 > 0$ "
                r"($A = P$ when $\sigma^2 = 0$), and with concrete matrices at D = 2, 3"
            ),
            method="symbolic identity",
            check=lambda: (
                symbolic_spectral_check(key)
                and all(spectral_check(key, s) for s in CROSS_CHECK_SIZES)
            ),
        ),
        Step(
            statement=(
                r"$r \le 1/\sqrt{\epsilon}$: $1/\sqrt{\epsilon} - 1/\sqrt{\sigma^2+\epsilon} = "
                r"\sigma^2 / (\sqrt{\epsilon}\sqrt{\sigma^2+\epsilon}"
                r"(\sqrt{\sigma^2+\epsilon}+\sqrt{\epsilon})) \ge 0$; hence "
                r"$\|J\|_2 = r\|\mathrm{diag}(\gamma) P A\|_2 \le "
                r"\|\mathrm{diag}(\gamma) P\|_2 / \sqrt{\epsilon}$"
            ),
            method="symbolic sign",
            check=_scale_bound,
        ),
        Step(
            statement=(
                r"Attained: at every constant row ($\sigma^2 = 0$), "
                r"$J = \mathrm{diag}(\gamma) P / \sqrt{\epsilon}$ exactly, for every D "
                r"(entry (a, b), symbolic D) and at D = 1..5"
                if centered
                else r"Attained: at $x = 0$, $J = \mathrm{diag}(\gamma)/\sqrt{\epsilon}$ "
                r"exactly, for every D (entry (a, b), symbolic D) and at D = 1..5, whose norm "
                r"is $\max_i |\gamma_i| / \sqrt{\epsilon}$"
            ),
            method="exact witness",
            check=lambda: (
                symbolic_attained_check(key) and all(attained_check(key, s) for s in sizes)
            ),
        ),
    ]
    if centered:
        steps += gamma_norm_steps()
        steps.append(
            Step(
                statement=(
                    r"D = 1: the centered row is 0, the output is $\beta$ and $J = 0$: "
                    r"the Lipschitz constant is 0"
                ),
                method="symbolic identity",
                check=lambda: _zero(row_norm(key).forward(1)[3].jacobian(vector("x", 1))),
            )
        )
    bound = (
        r"\|\mathrm{diag}(\gamma)(I - \mathbf{1}\mathbf{1}^\top/D)\|_2 / \sqrt{\epsilon}"
        if centered
        else r"\max_i |\gamma_i| / \sqrt{\epsilon}"
    )
    return Proof(
        claim=f"{module.title}: $\\mathrm{{Lip}} = \\sup_x \\|J(x)\\|_2 = {bound}$ (PyTorch eps)",
        steps=tuple(steps),
    )


def centernorm_lipschitz_proof() -> Proof:
    steps = [
        Step(
            statement=(
                r"$J = \frac{D}{D-1}\mathrm{diag}(\gamma) P$ at every x (sympy.diff, every "
                r"D >= 2, entry (a, b) for symbolic D): "
                r"$\mathrm{Lip} = \frac{D}{D-1}\|\mathrm{diag}(\gamma) P\|_2$"
            ),
            method="symbolic identity",
            check=lambda: symbolic_row_norm_checks("centernorm")["jacobian"],
        ),
        *gamma_norm_steps(),
    ]
    return Proof(
        claim=r"CenterNorm: $\mathrm{Lip} = \frac{D}{D-1}\|\mathrm{diag}(\gamma)P\|_2 "
        r"\le \frac{D}{D-1}\max_i|\gamma_i|$",
        steps=tuple(steps),
    )


# --- WeightNorm ----------------------------------------------------------------------------


@cache
def symbolic_weightnorm_rows(factor: int = 1) -> dict[str, bool]:
    """WeightNorm for a symbolic D, row a of ``W = diag(gamma) V`` with rows normalized,
    ``W_ab = gamma_a v_ab / sqrt(|v_a|^2 + eps)`` (sums over 1..D): ``"jacobian"``, d y_a /
    d x_b = W_ab for ``y = W x``; ``"frobenius"``, ``|W_a|^2 = gamma_a^2 |v_a|^2 / (|v_a|^2 +
    eps)``, so ``|W|_F^2`` is their sum over the rows for any number of rows. ``factor``
    scales the claimed right-hand sides (a test's false variant)."""
    a, b, l = _ROW, _COLUMN, _L  # noqa: E741 - the summation index
    inner = sp.Symbol("q", integer=True, positive=True)
    v, gamma, x = (sp.IndexedBase(name, real=True) for name in ("v", "gamma", "x"))
    norm2 = total(v[a, inner] ** 2, inner)

    def weight(column):
        return gamma[a] * v[a, column] / sp.sqrt(norm2 + eps)

    output = total(weight(l) * x[l], l)
    return {
        "jacobian": sum_identity(sp.diff(output, x[b]), factor * weight(b))(),
        "frobenius": sum_identity(
            total(weight(l) ** 2, l), factor * gamma[a] ** 2 * norm2 / (norm2 + eps)
        )(),
    }


def _frobenius_identity(size: int, outputs: int) -> bool:
    """|W|_F^2 = sum_i gamma_i^2 |v_i|^2 / (|v_i|^2 + eps)."""
    vs = sp.Matrix(outputs, size, lambda i, j: sp.Symbol(f"v{i + 1}_{j + 1}", real=True))
    gammas = vector("gamma", outputs)
    w = WEIGHTNORM.weights(vs, gammas)
    total = sum(w[i, j] ** 2 for i in range(outputs) for j in range(size))
    expected = 0
    for i in range(outputs):
        norm2 = sum(vs[i, j] ** 2 for j in range(size))
        expected += gammas[i] ** 2 * norm2 / (norm2 + eps)
    return is_zero(total - expected)


def weight_matrix(v: list[list], gamma: list, epsilon) -> sp.Matrix:
    """W for exact numbers."""
    vs = sp.Matrix(v).applyfunc(sp.nsimplify)
    gammas = sp.Matrix([sp.nsimplify(g) for g in gamma])
    return WEIGHTNORM.weights(vs, gammas).subs(eps, sp.nsimplify(epsilon))


def sigma_max(m: sp.Matrix) -> sp.Expr:
    """The largest singular value of an exact matrix."""
    eigenvalues = list((m.T * m).eigenvals())
    return sp.sqrt(max(eigenvalues, key=lambda e: sp.N(e, 50)))


#: WeightNorm witnesses: (v, gamma, eps).
PARALLEL_OPPOSITE = ([[1, 0], [-2, 0]], [1, 1], 0)
EQUAL_WITH_EPS = ([[1, 0], [1, 0]], [1, 1], 1)
FROBENIUS_WITNESS = ([[1]], [1], 1)


def weightnorm_bound_steps() -> list[Step]:
    return [
        Step(
            statement=(
                r"$\partial y/\partial x = W$ (numerator layout; sympy.diff, for every D "
                r"row by row (symbolic D), and at D = 1..5, O = 1, 2): a linear map, "
                r"$\mathrm{Lip} = \sigma_{\max}(W)$"
            ),
            method="symbolic identity",
            check=lambda: (
                symbolic_weightnorm_rows()["jacobian"]
                and all(weightnorm_checks(s, o)["jacobian"] for s in PROOF_SIZES for o in (1, 2))
            ),
        ),
        Step(
            statement=(
                r"$\|W\|_F^2 = \sum_i \gamma_i^2 |v_i|^2/(|v_i|^2+\epsilon)$ (row by row for "
                r"every D, symbolic D, so for every O; and at D = 1..3, O = 1, 2)"
                r" and $\sigma_{\max}(W)^2 \le \sum_k \sigma_k^2 = \|W\|_F^2$"
            ),
            method="symbolic identity",
            check=lambda: (
                symbolic_weightnorm_rows()["frobenius"]
                and all(_frobenius_identity(s, o) for s in (1, 2, 3) for o in (1, 2))
            ),
        ),
        Step(
            statement=(
                r"$1 - q/(q+\epsilon) = \epsilon/(q+\epsilon) \ge 0$: "
                r"$\|W\|_F \le \sqrt{\sum_i \gamma_i^2}$, with equality iff $\epsilon = 0$ "
                r"(or every $\gamma_i$ with $\epsilon > 0$ is 0)"
            ),
            method="symbolic sign",
            check=lambda: (
                is_zero(1 - q / (q + eps) - eps / (q + eps))
                and bool(assumption(eps / (q + sp.Symbol("e", positive=True)), "nonnegative")())
            ),
        ),
        Step(
            statement=(
                r"Attained: $v = ((1, 0), (-2, 0))$, $\gamma = (1, 1)$, $\epsilon = 0$ gives "
                r"a rank-one $W$ with $\sigma_{\max}(W) = \sqrt{2} = \sqrt{\sum_i\gamma_i^2}$"
            ),
            method="exact witness",
            check=lambda: sigma_max(weight_matrix(*PARALLEL_OPPOSITE)) == sp.sqrt(2),
        ),
    ]


def weightnorm_lipschitz_proof() -> Proof:
    return Proof(
        claim=r"WeightNorm: $\mathrm{Lip} = \sigma_{\max}(W) \le \sqrt{\sum_i \gamma_i^2}$",
        steps=tuple(weightnorm_bound_steps()),
    )


def weightnorm_frobenius_counterexample() -> Proof:
    v, gamma, epsilon = FROBENIUS_WITNESS
    return Proof(
        claim=r"$\|W\|_F = \sqrt{\sum_i \gamma_i^2}$ fails for $\epsilon > 0$",
        steps=(
            Step(
                statement=(
                    r"$v = (1)$, $\gamma = (1)$, $\epsilon = 1$: $W = (1/\sqrt{2})$, "
                    r"$\|W\|_F = 1/\sqrt{2} \ne 1$"
                ),
                method="exact witness",
                check=lambda: (
                    sp.sqrt(sum(e**2 for e in weight_matrix(v, gamma, epsilon))) == 1 / sp.sqrt(2)
                ),
            ),
            weightnorm_bound_steps()[1],
        ),
    )


def weightnorm_equality_counterexample() -> Proof:
    return Proof(
        claim=r"equality $\sigma_{\max}(W) = \sqrt{\sum_i\gamma_i^2}$ iff all $v_i = v_j$: fails",
        steps=(
            Step(
                statement=(
                    r"Not necessary: $v = ((1, 0), (-2, 0))$, $\gamma = (1, 1)$, $\epsilon = 0$: "
                    r"$\sigma_{\max}(W) = \sqrt{2} = \sqrt{\sum_i\gamma_i^2}$ with $v_1 \ne v_2$"
                ),
                method="exact witness",
                check=lambda: sigma_max(weight_matrix(*PARALLEL_OPPOSITE)) == sp.sqrt(2),
            ),
            Step(
                statement=(
                    r"Not sufficient: $v = ((1, 0), (1, 0))$, $\gamma = (1, 1)$, $\epsilon = 1$: "
                    r"$v_1 = v_2$ but $\sigma_{\max}(W) = 1 < \sqrt{2}$"
                ),
                method="exact witness",
                check=lambda: sigma_max(weight_matrix(*EQUAL_WITH_EPS)) == 1,
            ),
            *weightnorm_bound_steps()[1:3],
        ),
    )


def printed_weightnorm_jacobian(vs: sp.Matrix, gammas: sp.Matrix) -> sp.Matrix:
    """Table 2's printed dWN/dx: the matrix W itself."""
    return WEIGHTNORM.weights(vs, gammas)


#: (D, O) sizes at which the printed WeightNorm Jacobian is compared: O != D shows layout.
LAYOUT_SIZES = ((2, 1), (3, 2))


def _layout_match(printed, size: int, outputs: int) -> str:
    """ "denominator" if printed equals (dy/dx)^T by sympy.diff, "numerator" if it equals
    dy/dx, else "neither"."""
    xs, vs, gammas, y = WEIGHTNORM.forward(size, outputs)
    shown, numerator = printed(vs, gammas), y.jacobian(xs)
    if shown.shape == numerator.T.shape and _zero(shown - numerator.T):
        return "denominator"
    if shown.shape == numerator.shape and _zero(shown - numerator):
        return "numerator"
    return "neither"


def weightnorm_layout_decision(printed=printed_weightnorm_jacobian) -> tuple[str, Proof]:
    """``holds`` if the printed Jacobian is sympy.diff's in the paper's denominator layout,
    ``misprinted`` if it is the numerator-layout one (the intent of a layout slip), else
    ``fails``; compared at (D, O) = (2, 1) and (3, 2)."""
    found = {_layout_match(printed, d_, o_) for d_, o_ in LAYOUT_SIZES}
    verdict = {
        frozenset({"denominator"}): Verdict.HOLDS,
        frozenset({"numerator"}): Verdict.MISPRINTED,
    }.get(frozenset(found), Verdict.FAILS)
    layout = next(iter(found)) if len(found) == 1 else "neither"
    step = Step(
        statement=(
            "(D, O) = (2, 1) and (3, 2): the printed matrix is "
            + {
                "denominator": r"$(\partial y/\partial x)^\top$ (sympy.diff), the paper's "
                "denominator layout",
                "numerator": r"$\partial y/\partial x = W$ (sympy.diff), the numerator "
                r"layout; the paper's denominator layout (Linear: $W^\top$) needs $W^\top$, "
                "of shape D x O",
                "neither": "the Jacobian in neither layout",
            }[layout]
        ),
        method="symbolic identity",
        check=lambda: {_layout_match(printed, d_, o_) for d_, o_ in LAYOUT_SIZES} == found,
    )
    claim = r"Table 2 prints $\partial\,\mathrm{WN}/\partial x = W$ in denominator layout"
    return verdict, Proof(claim=claim, steps=(step,))


# --- 000's LayerNorm algorithm (the lecture slides' notation) ---------------------------------

#: 000 normalizes the activations a^1 .. a^N of one layer's N neurons, for each sample.
_NEURON = sp.Symbol("i", integer=True, positive=True)


def lecture_normalized(eps_value: sp.Expr = eps) -> sp.Expr:
    r"""Entry b of 000's ``\hat a = (a - \mu)/\sqrt{\sigma^2 + \epsilon}`` for one sample,
    written as printed: ``\mu = \frac1N \sum_i a^i``, ``\sigma^2 = \frac1N \sum_i (a^i -
    \mu)^2``, for every number of neurons N (``SIZE``)."""
    a, i = sp.IndexedBase("a", real=True), _NEURON
    mu = total(a[i], i) / SIZE
    sigma2 = total((a[i] - mu) ** 2, i) / SIZE
    return (a[_COLUMN] - mu) / sp.sqrt(sigma2 + eps_value)


@cache
def symbolic_lecture_layernorm(eps_factor: int = 1) -> bool:
    """000's normalization of neuron b, with a gain and a bias per neuron (Ba et al.'s,
    PyTorch's ``LayerNorm(N)``), equals the kernels' LayerNorm output ``gamma_b d_b r +
    beta_b`` (the row-norm data the kernels are generated from) for every N (symbolic);
    ``eps_factor`` scales the printed eps (a test's false variant)."""
    a = sp.IndexedBase("a", real=True)
    gamma, beta = sp.IndexedBase("gamma", real=True), sp.IndexedBase("beta", real=True)
    module, b = row_norm("layernorm"), _COLUMN
    center, second = sum_statistics(a, centered=module.centered)
    kernel = gamma[b] * (a[b] - center) * module.scale_of(second) + beta[b]
    printed = gamma[b] * lecture_normalized(eps_factor * eps) + beta[b]
    return sum_identity(printed, kernel)()


@cache
def lecture_samples_apart(other_sample: bool = True) -> bool:
    """000's LayerNorm of sample k does not depend on another sample k' != k: the derivative
    of neuron b's output at sample k by neuron c's activation at sample k' is 0, for every N
    (each sample's own sums over its N neurons, symbolic N, k and k' distinct).
    ``other_sample=False`` asks the same of sample k itself (false: a test's control)."""
    a = sp.IndexedBase("a", real=True)
    k, other, c = sp.symbols("k k_o c", integer=True, positive=True)
    i = _NEURON
    mu = total(a[i, k], i) / SIZE
    sigma2 = total((a[i, k] - mu) ** 2, i) / SIZE
    output = (a[_COLUMN, k] - mu) / sp.sqrt(sigma2 + eps)
    by = a[c, other] if other_sample else a[c, k]
    return sum_identity(sp.diff(output, by), 0, distinct=[(k, other)])()


#: The shared-gain witness: two rows of N = 2 neurons, eps, and LayerNorm's gains.
LECTURE_ROWS, LECTURE_EPS, LECTURE_GAINS = ((0, 2), (2, 0)), 1, (1, 2)
#: The worked example's witness: one sample of 3 neurons and eps.
LECTURE_SAMPLE, LECTURE_SAMPLE_EPS = (0, 0, 3), 2


def _lecture_two_inputs() -> tuple[sp.Matrix, sp.Matrix]:
    """000's normalized rows of :data:`LECTURE_ROWS` at eps = :data:`LECTURE_EPS`."""
    module = row_norm("layernorm")
    normalized = []
    for row in LECTURE_ROWS:
        deviations, scale = module.statistics(sp.Matrix(row))
        normalized.append((deviations * scale).subs(eps, LECTURE_EPS))
    return normalized[0], normalized[1]


def lecture_shared_gain_witness(gains: tuple[int, int] = LECTURE_GAINS) -> dict[str, object]:
    """One gain and one bias shared by the N = 2 neurons (000's gamma, beta in R^d with one
    value per neuron and sample, d = 1) against LayerNorm with ``gains`` and biases 0, at
    :data:`LECTURE_ROWS`, eps = :data:`LECTURE_EPS`: the solutions (gamma, beta) that
    reproduce both outputs (none for (1, 2); with equal gains, a test's control, the shared
    gain itself)."""
    g, bias = sp.symbols("gamma beta", real=True)
    per_neuron = sp.diag(*gains)
    equations = []
    for normalized in _lecture_two_inputs():
        target = per_neuron * normalized
        equations += [sp.Eq(g * normalized[i] + bias, target[i]) for i in range(2)]
    first = per_neuron * _lecture_two_inputs()[0]
    return {
        "solutions": sp.solve(equations, [g, bias], dict=True),
        "layernorm_at_first": tuple(first),
    }


def lecture_example_witness() -> tuple[sp.Expr, sp.Expr]:
    """000's worked example, ``(x - mu)/sigma`` over the 3 neurons of one sample, against its
    algorithm's ``(x - mu)/sqrt(sigma^2 + eps)``: the last neuron of :data:`LECTURE_SAMPLE`
    at eps = :data:`LECTURE_SAMPLE_EPS`: (printed, algorithm)."""
    xs = sp.Matrix(LECTURE_SAMPLE)
    module = row_norm("layernorm")
    deviations, scale = module.statistics(xs)
    sigma = sp.sqrt(sum(v**2 for v in deviations) / len(xs))
    return deviations[-1] / sigma, (deviations[-1] * scale).subs(eps, LECTURE_SAMPLE_EPS)
