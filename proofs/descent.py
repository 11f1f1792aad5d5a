"""Proofs of the statements about Lipschitz continuity, smoothness, gradient descent and SGD
(``derive/definitions/descent.py``).

General theorems ("for every beta-smooth f") are not proven for every f by SymPy. What is
machine-checked here: every algebraic step of their proofs, for symbolic sizes (D, N, K, T,
L) where the step is about every size; the inequality chains on symbols (a chain
``a <= b <= c`` is checked by writing each hypothesis with a nonnegative slack and asking
SymPy's assumption system for the sign of what is left); the exact integrals; and the
equality cases, exactly. What is taken as standard analysis (the mean value theorem, the
fundamental theorem of calculus, the chain rule, linearity of expectation, Taylor's first
order) is named where it is used, in the checkers' statements.

Every function returns ``True`` only if its statement is established; a ``factor`` or
``printed`` argument is there for the tests' false variants.
"""

from __future__ import annotations

import itertools
from functools import cache

import sympy as sp

from derive.definitions import descent as de
from proofs.core import INDICES, SIZE, is_zero, sum_identity, total
from proofs.theory import lagrange_identity

__all__ = [
    "cauchy_schwarz",
    "coefficient_interval",
    "composition_attained",
    "composition_induction",
    "composition_step",
    "composition_strict",
    "decrease_identity",
    "decrease_witness",
    "directional_derivative",
    "eigenvalue_gloss",
    "first_order_change",
    "gradient_attains",
    "hessian_quotient",
    "lagrange_identity",
    "linear_difference",
    "minibatch_probability",
    "minibatch_unbiased",
    "nonconvex_witness",
    "nonnegative",
    "quadratic_decrease_is_equality",
    "quadratic_smooth",
    "relu_lipschitz",
    "relu_one_sided",
    "remainder_identity",
    "residual_block_witness",
    "sampled_constants",
    "sgd_degenerate",
    "sgd_expectation",
    "square_quotient",
]

i, j = INDICES


def nonnegative(expr: sp.Expr) -> bool:
    """SymPy's assumption system answers that ``expr`` (expanded) is >= 0: the last step of
    an inequality chain whose hypotheses were written with nonnegative slacks."""
    return sp.expand(expr).is_nonnegative is True


def cauchy_schwarz() -> bool:
    """``|<u, w>| <= ||u|| ||w||`` for a symbolic size: Lagrange's identity
    (:func:`proofs.theory.lagrange_identity`)."""
    return lagrange_identity()


def gradient_attains(sign: int = 1) -> bool:
    """``<a, sign * a/||a||> = sign * ||a||`` for a symbolic size D: the unit vector along the
    gradient attains Cauchy-Schwarz (``sign = -1``: the steepest descent direction)."""
    a = de.a_vec
    norm = sp.sqrt(de.norm_sq(a))
    return sum_identity(sign * de.dot(a, a) / norm, sign * norm)()


def linear_difference(factor: int = 1) -> bool:
    """``f(y) - f(x) = <a, y - x>`` for ``f = a^T x + 1``, symbolic D; at ``y - x = a`` the
    quotient is ``||a||^2 / ||a|| = ||a||`` (:func:`gradient_attains`)."""
    f = de.LINEAR_AFFINE
    f_y = f.xreplace({de.x_vec: de.y_vec})
    return sum_identity(f_y - f, factor * total(de.a_vec[i] * (de.y_vec[i] - de.x_vec[i]), i))()


def square_quotient() -> tuple[sp.Expr, sp.Expr]:
    """For ``f = x^T x + 2`` at ``x = 0``, ``y = t e_1`` (``||y|| = |t|`` at every D): the
    difference quotient ``|f(y) - f(0)| / ||y||`` is ``t`` (t > 0), and its limit as
    ``t -> oo``. Returns ``(quotient, limit)``."""
    t = sp.Symbol("t", positive=True)
    quotient = sp.simplify(sp.Abs((t**2 + 2) - 2) / t)
    return quotient, sp.limit(quotient, t, sp.oo)


def directional_derivative(dimension: int) -> bool:
    """For a generic (undefined) differentiable f of ``dimension`` variables,
    ``d/dh f(x + h v)`` at ``h = 0`` is ``grad f(x) . v`` (the chain rule, as SymPy applies it):
    the limit of the difference quotient along v is the directional derivative."""
    h = sp.Symbol("h", real=True)
    us = sp.symbols(f"u1:{dimension + 1}", real=True)
    xs = sp.symbols(f"x1:{dimension + 1}", real=True)
    vs = sp.symbols(f"v1:{dimension + 1}", real=True)
    f = sp.Function("f")(*us)
    along = f.subs(
        {u: xk + h * vk for u, xk, vk in zip(us, xs, vs, strict=True)}, simultaneous=True
    )
    derivative = sp.diff(along, h).subs(h, 0)
    gradient = sum(
        sp.diff(f, u).subs(dict(zip(us, xs, strict=True)), simultaneous=True) * vk
        for u, vk in zip(us, vs, strict=True)
    )
    return is_zero(sp.simplify(derivative - gradient))


def nonconvex_witness() -> dict[str, sp.Expr]:
    """On the non-convex domain ``R minus [-1, 1]``, ``f = sign(x)`` has ``f' = 0`` everywhere
    on it, yet ``|f(2) - f(-2)| = 2 > 0 * |2 - (-2)|``: the gradient bound does not give
    the Lipschitz bound off a convex (or connected) domain."""
    f = sp.sign(de.x)
    p = sp.Symbol("p", positive=True)
    return {
        "slope_right": sp.diff(f.subs(de.x, 1 + p), p),
        "slope_left": sp.diff(f.subs(de.x, -1 - p), p),
        "jump": sp.Abs(f.subs(de.x, 2) - f.subs(de.x, -2)),
    }


def square_witness(f: sp.Expr | None = None) -> tuple[sp.Expr, sp.Expr, sp.Expr, sp.Expr]:
    """``(f, x1, x2, quotient)``: the difference quotient of ``f`` (default ``x^2``) between
    ``x1 = 0`` and ``x2 = K + 1`` for a symbolic ``K >= 0``."""
    f = de.x**2 if f is None else f
    start, point = sp.S.Zero, de.K + 1
    quotient = sp.Abs(f.subs(de.x, point) - f.subs(de.x, start)) / (point - start)
    return f, start, point, sp.simplify(quotient)


def square_exceeds(f: sp.Expr | None = None) -> bool:
    """``f(x) = x^2`` (continuously differentiable: ``f' = 2x``) is K-Lipschitz for no K:
    for a symbolic ``K >= 0`` the quotient at ``(0, K + 1)`` is ``K + 1 > K``
    (:func:`square_witness`). (Another ``f``: whether its quotient there exceeds every K.)"""
    quotient = square_witness(f)[3]
    return (quotient - de.K).is_positive is True


def relu_lipschitz() -> bool:
    """``|relu(y) - relu(x)| <= |y - x|`` in each of the four sign cases (p, q > 0 symbolic,
    and the zeros), with equality at ``(0, 1)``: an exhaustive case split."""
    p, q = sp.symbols("p q", positive=True)
    points = (p, -p, sp.S.Zero)
    others = (q, -q, sp.S.Zero)
    for x0, y0 in itertools.product(points, others):
        gap = sp.Abs(y0 - x0) - sp.Abs(de.RELU.subs(de.x, y0) - de.RELU.subs(de.x, x0))
        if not (gap == 0 or gap.is_nonnegative is True):
            return False
    return de.RELU.subs(de.x, 1) - de.RELU.subs(de.x, 0) == 1


def relu_one_sided() -> tuple[sp.Expr, sp.Expr]:
    """The one-sided limits of ``(relu(h) - relu(0)) / h`` at ``h -> 0^-`` and ``0^+``:
    ``(0, 1)``, different, so ReLU is not differentiable at 0."""
    h = sp.Symbol("h", real=True)
    quotient = (de.RELU.subs(de.x, h) - de.RELU.subs(de.x, 0)) / h
    return sp.limit(quotient, h, 0, "-"), sp.limit(quotient, h, 0, "+")


def quadratic_smooth(dimension_free: bool = True) -> bool:
    """``f = (K1/2) ||x||^2``: ``||grad f(y) - grad f(x)||^2 = K1^2 ||y - x||^2`` for a symbolic
    size D (so f is K1-smooth with no smaller constant), while its Hessian is ``K1 I`` with
    spectral norm K1. In one variable: ``f'' = K1``."""
    k1 = sp.Symbol("K_1", positive=True)
    gy = total((k1 * de.y_vec[i] - k1 * de.x_vec[i]) ** 2, i)
    moves = sum_identity(gy, k1**2 * de.diff_norm_sq(de.y_vec, de.x_vec))()
    scalar = sp.diff(k1 / 2 * de.x**2, de.x, 2) == k1
    return moves and scalar and dimension_free


def composition_step(factor: sp.Expr = sp.S.One) -> bool:
    """The two-layer step: from ``a <= Lg b`` and ``b <= Lf r`` (a = ||g(f(x)) - g(f(y))||,
    b = ||f(x) - f(y)||, r = ||x - y||) and ``Lg >= 0``: ``a <= Lg Lf r``. The hypotheses
    with slacks ``u, w >= 0``; what is left, ``u + Lg w``, is nonnegative."""
    lg, lf, r, u, w = sp.symbols("L_g L_f r u w", nonnegative=True)
    b = lf * r - w
    a = lg * b - u
    return nonnegative(factor * lg * lf * r - a)


def composition_induction() -> bool:
    """The induction on the depth, for a symbolic L: with ``Lip(F_L) <= P_L`` (slack w) and
    the two-layer step ``Lip(F_{L+1}) <= c_{L+1} Lip(F_L)`` (slack u), ``Lip(F_{L+1}) <=
    c_{L+1} P_L = P_{L+1}``; and ``P_{L+1} = c_{L+1} P_L`` for the products at L = 1..8."""
    c_next, p_l, u, w = sp.symbols("c_next P_L u w", nonnegative=True)
    lip_l = p_l - w
    lip_next = c_next * lip_l - u
    step = nonnegative(c_next * p_l - lip_next)
    ell = sp.Symbol("l", integer=True, positive=True)
    c = sp.IndexedBase("c", positive=True)
    recurrence = all(
        is_zero(
            sp.Product(c[ell], (ell, 1, n + 1)).doit()
            - sp.Product(c[ell], (ell, 1, n)).doit() * c[n + 1]
        )
        for n in range(1, 9)
    )
    return step and recurrence


def composition_strict() -> bool:
    """ReLU layers ``f^1 = relu(1 x)``, ``f^2 = relu(-1 y)``: each 1-Lipschitz, but
    ``relu(-relu(x)) = 0`` for every x (both signs, symbolically): Lip 0 < 1 * 1."""
    p = sp.Symbol("p", positive=True)
    composed = de.RELU.subs(de.x, -de.RELU)
    return all(composed.subs(de.x, point) == 0 for point in (p, -p, 0))


def composition_attained() -> bool:
    """ReLU layers with weights 2 and 3: ``relu(3 relu(2x)) = 6 relu(x)`` for every x (both
    signs), so Lip = 6 = 2 * 3: the product is attained."""
    p = sp.Symbol("p", positive=True)
    composed = de.RELU.subs(de.x, 3 * de.RELU.subs(de.x, 2 * de.x))
    return all(
        is_zero(composed.subs(de.x, point) - 6 * de.RELU.subs(de.x, point)) for point in (p, -p, 0)
    )


def sampled_constants() -> dict[str, tuple[sp.Expr, sp.Expr, sp.Expr]]:
    """``(K_s, K_t, K_u)`` of two ReLU networks, exactly: ``K_s`` the largest difference
    quotient over the sampled pairs (0, 1), (-1, 2), (1/2, 3); ``K_t`` the true constant (6
    and 0: :func:`composition_attained`, :func:`composition_strict`); ``K_u`` the product of
    the layers' constants (2 * 3 and 1 * 1)."""
    pairs = ((0, 1), (-1, 2), (sp.Rational(1, 2), 3))
    attaining = de.RELU.subs(de.x, 3 * de.RELU.subs(de.x, 2 * de.x))
    cancelling = de.RELU.subs(de.x, -de.RELU)

    def sampled(f: sp.Expr) -> sp.Expr:
        return max(sp.Abs(f.subs(de.x, b) - f.subs(de.x, a)) / abs(b - a) for a, b in pairs)

    return {
        "attaining": (sampled(attaining), sp.Integer(6), sp.Integer(2 * 3)),
        "strict": (sampled(cancelling), sp.Integer(0), sp.Integer(1 * 1)),
    }


def residual_block_witness() -> tuple[sp.Expr, sp.Expr]:
    """Eq. 46's block with SA(x) = -x (Lip 1) and FFN = 0 (Lip 0) in D = 1: the block is
    ``x + (-x) = 0`` (Lip 0), against the printed ``(1 + 1)(1 + 0) = 2``."""
    sa = -de.x
    ffn = sp.S.Zero
    y = de.x + sa
    block = y + ffn
    return sp.simplify(block), (1 + 1) * (1 + 0)


def eigenvalue_gloss() -> dict[str, sp.Expr]:
    """``O = [[0, 1], [0, 0]]``: its eigenvalues (both 0), the largest eigenvalue of ``O^T O``
    (1, so sigma_max(O) = 1) and ``||O e_2||`` (1): the map x -> O x moves e_2 by 1, while
    the largest absolute eigenvalue is 0."""
    o = sp.Matrix([[0, 1], [0, 0]])
    moved = o * sp.Matrix([0, 1])
    return {
        "eigenvalues": sp.Tuple(*sorted(o.eigenvals(multiple=True))),
        "largest_gram": max((o.T * o).eigenvals(multiple=True)),
        "moved": sp.sqrt(moved.dot(moved)),
    }


def residual_bound() -> bool:
    """``Lip(x + g(x)) <= 1 + Lip(g)``: with ``|g(y) - g(x)| = Lg r - w`` (slack w >= 0) and
    the triangle inequality ``|y + g(y) - x - g(x)| = r + (Lg r - w) - u`` (slack u >= 0),
    ``(1 + Lg) r`` minus it is nonnegative."""
    lg, r, u, w = sp.symbols("L_g r u w", nonnegative=True)
    moved = r + (lg * r - w) - u
    return nonnegative((1 + lg) * r - moved)


def remainder_identity() -> dict[str, bool]:
    """The integral remainder for a generic (undefined) twice differentiable g:
    ``d/ds[(1 - s) g'(s) + g(s)] = (1 - s) g''(s)`` (so, by the fundamental theorem of
    calculus, ``g(1) = g(0) + g'(0) + int_0^1 (1 - s) g''(s) ds``), the printed integration
    by parts ``d/ds[(1 - s) g'(s)] + g'(s) = (1 - s) g''(s)``, the antiderivative's values at
    1 and 0, and ``int_0^1 (1 - s) beta ds = beta/2``, ``int_0^1 beta s ds = beta/2``."""
    s = sp.Symbol("s", real=True)
    g = sp.Function("g")
    antiderivative = (1 - s) * g(s).diff(s) + g(s)
    at_ends = antiderivative.subs(s, 1) - antiderivative.subs(s, 0)
    return {
        "remainder": is_zero(sp.diff(antiderivative, s) - (1 - s) * g(s).diff(s, 2)),
        "by_parts": is_zero(
            sp.diff((1 - s) * g(s).diff(s), s) + g(s).diff(s) - (1 - s) * g(s).diff(s, 2)
        ),
        "ends": is_zero(at_ends - (g(1) - g(0) - sp.Subs(g(s).diff(s), s, 0).doit())),
        "weight": sp.integrate((1 - s) * de.beta, (s, 0, 1)) == de.beta / 2,
        "c1_weight": sp.integrate(de.beta * s, (s, 0, 1)) == de.beta / 2,
        "weight_nonnegative": sp.solveset(1 - s >= 0, s, sp.Interval(0, 1)) == sp.Interval(0, 1),
    }


def chain_rule_along(dimension: int = 2) -> dict[str, bool]:
    """For a generic f of ``dimension`` variables and ``g(t) = f(x + t d)``: ``g'(t) = grad f .
    d`` and ``g''(t) = d^T Hess f d`` at ``x + t d`` (sympy.diff of the composition)."""
    t = sp.Symbol("t", real=True)
    us = sp.symbols(f"u1:{dimension + 1}", real=True)
    xs = sp.symbols(f"x1:{dimension + 1}", real=True)
    ds = sp.symbols(f"d1:{dimension + 1}", real=True)
    f = sp.Function("f")(*us)
    at = {u: xk + t * dk for u, xk, dk in zip(us, xs, ds, strict=True)}
    g = f.subs(at, simultaneous=True)
    d = sp.Matrix(ds)
    gradient = sp.Matrix([f.diff(u) for u in us]).subs(at, simultaneous=True)
    hessian = sp.hessian(f, us).subs(at, simultaneous=True)
    return {
        "first": is_zero(sp.simplify(sp.diff(g, t) - (gradient.T * d)[0])),
        "second": is_zero(sp.simplify(sp.diff(g, t, 2) - (d.T * hessian * d)[0])),
    }


def printed_first_derivative() -> tuple[sp.Expr, sp.Expr]:
    """003's printed ``g'(t) = (y - x)^T Hess f (y - x)`` at ``f = x^2``, ``x = 0``, ``y = 1``,
    ``t = 1/2``: ``g(t) = t^2``, so ``(g'(1/2), (y - x) f'' (y - x)) = (1, 2)``."""
    t = sp.Symbol("t", real=True)
    f = de.x**2
    g = f.subs(de.x, 0 + t * (1 - 0))
    return sp.diff(g, t).subs(t, sp.Rational(1, 2)), (1 - 0) * sp.diff(f, de.x, 2) * (1 - 0)


def quadratic_lemma_equality() -> bool:
    """``f = (beta/2)||x||^2`` meets Lemma 3.1 with equality for every x, y, symbolic D:
    ``f(y) = f(x) + <beta x, y - x> + (beta/2)||y - x||^2``."""
    f_x = de.quadratic(de.beta, de.x_vec)
    f_y = de.quadratic(de.beta, de.y_vec)
    linear = total(de.beta * de.x_vec[i] * (de.y_vec[i] - de.x_vec[i]), i)
    return sum_identity(f_y, f_x + linear + de.beta / 2 * de.diff_norm_sq(de.y_vec, de.x_vec))()


def decrease_identity(factor: int = 1) -> bool:
    """Lemma 3.1 at ``y = x - eta a`` (a = grad f(x)), symbolic D: ``<a, -eta a> + (beta/2)
    ||eta a||^2 = -(eta - beta eta^2/2) ||a||^2``."""
    a = de.a_vec
    left = total(a[i] * (-de.eta * a[i]), i) + de.beta / 2 * total((de.eta * a[i]) ** 2, i)
    return sum_identity(left, -factor * de.descent_coefficient() * de.norm_sq(a))()


def first_order_change() -> bool:
    """``<a, -alpha a> = -alpha ||a||^2`` for a symbolic size D: the change of the linear
    model along ``-alpha grad L``."""
    alpha = sp.Symbol("alpha", positive=True)
    return sum_identity(
        total(de.a_vec[i] * (-alpha * de.a_vec[i]), i), -alpha * de.norm_sq(de.a_vec)
    )()


def quadratic_decrease_is_equality() -> bool:
    """On ``f = (beta/2)||x||^2`` (gradient beta x) the step ``x - eta beta x`` decreases f by
    exactly ``(eta - beta eta^2/2)||beta x||^2``, symbolic D: the bound is attained."""
    after = total((de.x_vec[i] - de.eta * de.beta * de.x_vec[i]) ** 2, i) * de.beta / 2
    before = de.quadratic(de.beta, de.x_vec)
    gradient_sq = total((de.beta * de.x_vec[i]) ** 2, i)
    return sum_identity(after, before - de.descent_coefficient() * gradient_sq)()


def coefficient_interval() -> sp.Set:
    """``{eta real : eta - beta eta^2/2 > 0}`` for a symbolic ``beta > 0`` (solveset):
    ``(0, 2/beta)``."""
    e = sp.Symbol("e", real=True)
    return sp.solveset(de.descent_coefficient(e, de.beta) > 0, e, sp.S.Reals)


#: 003's counterexample to "eta < 1 then positive": beta = 10 (f = 5 x^2), eta = 1/2.
WITNESS_BETA, WITNESS_ETA = sp.Integer(10), sp.Rational(1, 2)
#: 003's factor of the second-order term, beta/2.
HALF = sp.Rational(1, 2)


def decrease_witness(b: sp.Expr = WITNESS_BETA, step: sp.Expr = WITNESS_ETA) -> dict[str, sp.Expr]:
    """Gradient descent on ``f = (b/2) x^2`` (b-smooth) from ``x_0 = 1`` with step ``step``:
    the coefficient, ``x_1``, ``f(x_0)`` and ``f(x_1)``, exactly."""
    b, step = sp.sympify(b), sp.sympify(step)
    f = b / 2 * de.x**2
    x1 = de.gd_step(f, sp.S.One, step)
    return {
        "coefficient": de.descent_coefficient(step, b),
        "x1": x1,
        "f0": f.subs(de.x, 1),
        "f1": f.subs(de.x, x1),
    }


def small_beta_positive() -> bool:
    """For ``0 < beta <= 2`` and ``0 < eta < 1`` the coefficient ``eta (1 - beta eta/2)`` is
    positive: with ``beta = 2 - s`` (s >= 0) and ``eta = 1 - r`` (r > 0),
    ``1 - beta eta/2 = (r (2 - s) + s)/2 = (r beta + s)/2 > 0``."""
    s = sp.Symbol("s", nonnegative=True)
    r = sp.Symbol("r", positive=True)
    bracket = 1 - (2 - s) * (1 - r) / 2
    rewritten = (r * (2 - s) + s) / 2
    # 2 - s = beta > 0 and r > 0 make r (2 - s) > 0; s >= 0.
    b = sp.Symbol("b", positive=True)
    return is_zero(bracket - rewritten) and (r * b + s).is_positive is True


def sgd_expectation() -> bool:
    """``E_t[<a, g~>] = <a, E_t g~>`` for g~ drawn uniformly from N vectors ``g_n`` (symbolic
    N and D): the double sum ``sum_n sum_i a_i g_{n,i}`` is ``sum_i sum_n a_i g_{n,i}``
    (SymPy's ``Sum.reorder``: finite sums commute), and ``sum_n a_i g_{n,i} = a_i sum_n
    g_{n,i}`` (a factor free of n leaves the sum; :func:`proofs.core.sum_identity`). With
    ``E_t g~ = a`` the term is ``||a||^2``."""
    size = sp.Symbol("N", integer=True, positive=True)
    n = sp.Symbol("n", integer=True, positive=True)
    g = sp.IndexedBase("g", real=True)
    a_i = sp.Symbol("a_i", real=True)
    over_n_first = sp.Sum(de.a_vec[i] * g[n, i], (i, 1, SIZE), (n, 1, size))
    over_i_first = sp.Sum(de.a_vec[i] * g[n, i], (n, 1, size), (i, 1, SIZE))
    commute = over_n_first.reorder((0, 1)) == over_i_first
    g_i = sp.IndexedBase("h", real=True)  # g_{n,i} at a fixed coordinate i
    linear = sum_identity(total(a_i * g_i[n], n, size) / size, a_i * total(g_i[n], n, size) / size)
    return commute and linear()


def sgd_step_identity() -> bool:
    """Lemma 3.1 at ``y = x - eta g~``, symbolic D: ``<a, -eta g~> + (beta/2)||eta g~||^2 =
    -eta <a, g~> + (beta/2) eta^2 ||g~||^2``."""
    a, g = de.a_vec, de.v_vec
    left = total(a[i] * (-de.eta * g[i]), i) + de.beta / 2 * total((de.eta * g[i]) ** 2, i)
    right = -de.eta * de.dot(a, g) + de.beta / 2 * de.eta**2 * de.norm_sq(g)
    return sum_identity(left, right)()


def sgd_chain(printed_coefficient: sp.Expr = HALF) -> dict[str, bool]:
    """The SGD chain on symbols: F_t = E f(x_t), g2_t = E||grad f(x_t)||^2, with
    ``E_t f(x_{t+1}) = f(x_t) - eta g2 + (beta/2) eta^2 S - u`` (Lemma 3.1 in expectation,
    slack u) and ``S = G - w`` (slack w): the step, its rearrangement, and the printed
    constant ``beta/2`` (``printed_coefficient``)."""
    f_t = sp.Symbol("F_t", real=True)
    u = sp.Symbol("u", nonnegative=True)
    w = sp.Symbol("w", nonnegative=True)
    second = de.G - w
    f_next = f_t - de.eta * de.grad_sq + de.beta / 2 * de.eta**2 * second - u
    step_bound = f_t - de.eta * de.grad_sq + printed_coefficient * de.beta * de.eta**2 * de.G
    rearranged = (f_t - f_next) / de.eta + printed_coefficient * de.beta * de.eta * de.G
    return {
        "step": nonnegative(step_bound - f_next),
        "rearranged": nonnegative(rearranged - de.grad_sq),
    }


def telescoping(printed_factor: sp.Expr = sp.S.One) -> dict[str, bool]:
    """For a symbolic T: ``sum_{t=0}^{T-1} [(F_t - F_{t+1})/eta + beta eta G/2] = (F_0 - F_T)
    /eta + beta eta G T/2`` (SymPy telescopes the sum), and with ``F_T = f* + w`` (w >= 0:
    f* a lower bound) it is at most ``(f_0 - f*)/eta + beta eta G T/2``; dividing by T gives
    the printed min bound (``printed_factor`` scales its first term)."""
    t = sp.Symbol("t", integer=True, nonnegative=True)
    f = sp.IndexedBase("F", real=True)
    per_step = (f[t] - f[t + 1]) / de.eta + de.beta * de.eta * de.G / 2
    summed = sp.Sum(per_step, (t, 0, de.T - 1)).doit()
    closed = (f[0] - f[de.T]) / de.eta + de.beta * de.eta * de.G * de.T / 2
    f_star = sp.Symbol("f_star", real=True)
    w = sp.Symbol("w", nonnegative=True)
    bound = (f[0] - f_star) / de.eta + de.beta * de.eta * de.G * de.T / 2
    printed_min = printed_factor * (f[0] - f_star) / (de.eta * de.T) + de.beta * de.eta * de.G / 2
    return {
        "telescopes": is_zero(sp.expand(summed - closed)),
        "lower_bound": nonnegative(bound - closed.subs(f[de.T], f_star + w)),
        "average": is_zero(sp.expand(bound / de.T - printed_min)),
    }


def sgd_degenerate() -> dict[str, bool]:
    """The SGD chain's bounds are attained: for a constant f (``f(x_t) = f_0 = f*`` for every
    t, gradient 0), ``g~ = 0`` and ``G = 0``, each printed right side equals its left side
    (the step's, the rearranged, the sum's for a symbolic T, the min's)."""
    f0 = sp.Symbol("f_0", real=True)
    zero = sp.S.Zero
    step = f0 - de.eta * zero + de.beta / 2 * de.eta**2 * zero
    rearranged = (f0 - f0) / de.eta + de.beta / 2 * de.eta * zero
    summed = (f0 - f0) / de.eta + de.beta / 2 * de.eta * zero * de.T
    minimum = de.sgd_min_bound(f0 - f0).subs(de.G, zero)
    return {
        "step": is_zero(step - f0),
        "rearranged": is_zero(rearranged - zero),
        "sum": is_zero(summed - zero),
        "min": is_zero(minimum - zero),
    }


def min_below_average() -> bool:
    """``min_t a_t <= (1/T) sum_t a_t`` for a symbolic T: with ``a_t = m + d_t`` (d_t >= 0,
    m the minimum), ``(1/T) sum (m + d_t) - m = (1/T) sum d_t``, a sum of nonnegative
    terms (SymPy's assumptions, symbolic T)."""
    m = sp.Symbol("m", real=True)
    t = sp.Symbol("t", integer=True, positive=True)
    d = sp.IndexedBase("d", nonnegative=True)
    size = sp.Symbol("T", integer=True, positive=True)
    average = total(m + d[t], t, size) / size
    gap = average - m
    return (
        sum_identity(gap, total(d[t], t, size) / size)()
        and (total(d[t], t, size) / size).is_nonnegative is True
    )


def rate() -> dict[str, sp.Expr]:
    """At ``eta = 1/sqrt(T)``: the min bound times sqrt(T) (free of T) and its limit."""
    gap = sp.Symbol("Delta", nonnegative=True)  # f_0 - f*
    bound = de.sgd_min_bound(gap, 1 / sp.sqrt(de.T))
    scaled = sp.simplify(bound * sp.sqrt(de.T))
    return {"scaled": scaled, "limit": sp.limit(bound * sp.sqrt(de.T), de.T, sp.oo)}


def hessian_quotient(dimension: int = 2) -> bool:
    """For a polynomial f of ``dimension`` variables (x1^3 + x1 x2^2 + x2^4 at D = 2), the
    quotient ``<grad f(x + h v) - grad f(x), h v> / h^2`` tends to ``v^T Hess f(x) v`` as
    h -> 0 (symbolic x, v): the last step of the notes' proof, on an example."""
    h = sp.Symbol("h", real=True)
    us = sp.symbols(f"u1:{dimension + 1}", real=True)
    vs = sp.symbols(f"v1:{dimension + 1}", real=True)
    f = us[0] ** 3 + us[0] * us[-1] ** 2 + us[-1] ** 4
    grad = sp.Matrix([sp.diff(f, u) for u in us])
    moved = grad.subs({u: u + h * v for u, v in zip(us, vs, strict=True)}, simultaneous=True)
    v = sp.Matrix(vs)
    quotient = sp.expand(((moved - grad).T * (h * v))[0] / h**2)
    hessian = (v.T * sp.hessian(f, us) * v)[0]
    return is_zero(sp.limit(quotient, h, 0) - hessian)


def quadratic_hessian_equality() -> bool:
    """``f = (beta/2)||x||^2`` has Hessian ``beta I``: ``v^T (beta I) v = beta ||v||^2`` for a
    symbolic size D, equality in the notes' bound."""
    v = de.v_vec
    return sum_identity(total(v[i] * de.beta * v[i], i), de.beta * de.norm_sq(v))()


def minibatch_probability(printed: sp.Expr | None = None) -> bool:
    """A uniform K-subset of N contains a given index with probability ``C(N-1, K-1) /
    C(N, K) = K/N`` (symbolic N, K)."""
    n, k = sp.symbols("N K", integer=True, positive=True)
    target = k / n if printed is None else printed
    return is_zero(sp.combsimp(sp.binomial(n - 1, k - 1) / sp.binomial(n, k)) - target)


def minibatch_unbiased(largest: int = 6) -> bool:
    """For every N = 1..``largest`` and K = 1..N, the mean over all C(N, K) subsets S of
    ``(1/K) sum_{k in S} g_k`` equals ``(1/N) sum_n g_n`` for symbolic g's (exhaustive
    enumeration); K = 1 is the stochastic estimate, K = N the full batch."""
    for n in range(1, largest + 1):
        g = sp.symbols(f"g1:{n + 1}", real=True)
        full = sum(g) / n
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(g, k))
            mean = sum(sum(s) / k for s in subsets) / len(subsets)
            if not is_zero(sp.expand(mean - full)):
                return False
    return True


def unbounded_linear_model() -> sp.Expr:
    """Without ``||v|| = 1``: ``<a, eta v>`` at ``v = -c a`` is ``-eta c ||a||^2``, which
    tends to -oo as c -> oo (here with ||a||^2 = 1 and eta = 1)."""
    c = sp.Symbol("c", positive=True)
    return sp.limit(-1 * c * 1, c, sp.oo)


def quadratic_sgd_is_equality() -> bool:
    """With g~ = grad f exactly (G = ||grad f||^2) on ``f = (beta/2)||x||^2``, the SGD step's
    bound is an equality: ``f(x - eta beta x) = f(x) - eta ||beta x||^2 + (beta/2) eta^2
    ||beta x||^2``, symbolic D."""
    after = total((de.x_vec[i] - de.eta * de.beta * de.x_vec[i]) ** 2, i) * de.beta / 2
    before = de.quadratic(de.beta, de.x_vec)
    gradient_sq = total((de.beta * de.x_vec[i]) ** 2, i)
    return sum_identity(
        after, before - de.eta * gradient_sq + de.beta / 2 * de.eta**2 * gradient_sq
    )()


def definitions_agree() -> dict[str, bool]:
    """000, 001 and 002 on a scalar f with the Euclidean norm: the 2-norm of a one-entry
    vector is the absolute value (001's ``||f(x1) - f(x2)||`` is 000's and 002's
    ``|f(y) - f(x)|``); for the constant function, ``0 <= K r`` (r = ||x1 - x2|| > 0) holds
    exactly for ``K >= 0`` (solveset), so 001 and 000 admit K = 0 while 002's ``L > 0``
    admits every positive L but not the least constant 0."""
    a = sp.Symbol("a", real=True)
    r = sp.Symbol("r", positive=True)
    k = sp.Symbol("k", real=True)
    admissible = sp.solveset(sp.Abs(de.c - de.c) <= k * r, k, sp.S.Reals)
    return {
        "norm_is_abs": is_zero(sp.sqrt(a**2) - sp.Abs(a)),
        "admissible": admissible == sp.Interval(0, sp.oo),
        "strict_excludes_zero": sp.Intersection(admissible, sp.Interval.open(0, sp.oo))
        == sp.Interval.open(0, sp.oo),
    }


#: The size symbol of the vector statements.
D = SIZE


def attains_minimum(sign: sp.Expr) -> bool:
    """``<a, sign * a/||a||> = -||a||`` (the Cauchy-Schwarz lower bound) for a symbolic size
    D: true for ``sign = -1`` only."""
    a = de.a_vec
    norm = sp.sqrt(de.norm_sq(a))
    return sum_identity(sign * de.dot(a, a) / norm, -norm)()


def remainder_weight() -> sp.Expr:
    """``int_0^1 (1 - s) beta ds``: the coefficient of ``||y - x||^2`` in Lemma 3.1."""
    s = sp.Symbol("s", real=True)
    return sp.integrate((1 - s) * de.beta, (s, 0, 1))


def quadratic_coefficients() -> dict[str, sp.Expr]:
    """On ``f = (beta/2) x^2`` (beta-smooth, attaining every bound below), the coefficients
    the statements print, computed from f: ``(f(y) - f(x) - f'(x)(y - x))/(y - x)^2``
    (Lemma 3.1), ``v f'' v / v^2`` (the Hessian bound), and, for one SGD step with g~ =
    f'(x), ``(f(x - eta g~) - f(x) + eta g~^2)/(eta^2 g~^2)`` (the step's bound) and that
    times ``eta^2 / eta`` per unit of ``eta`` (the rearranged line)."""
    y, v = sp.Symbol("y", real=True), sp.Symbol("v", real=True, nonzero=True)
    f = de.beta / 2 * de.x**2
    slope = sp.diff(f, de.x)
    remainder = sp.factor((f.subs(de.x, y) - f - slope * (y - de.x)) / (y - de.x) ** 2)
    curvature = sp.simplify(v * sp.diff(f, de.x, 2) * v / v**2)
    step = sp.factor(
        (f.subs(de.x, de.x - de.eta * slope) - f + de.eta * slope**2) / (de.eta**2 * slope**2)
    )
    return {
        "remainder": remainder,
        "curvature": curvature,
        "sgd_step": step,
        "sgd_rearranged": sp.simplify(step * de.eta**2 / de.eta / de.eta),
    }


def sum_bound() -> sp.Expr:
    """The bound the telescoping sum gives, ``(f_0 - f*)/eta + beta eta G T/2`` with
    ``Delta = f_0 - f*`` (from the closed form :func:`telescoping` checks)."""
    t = sp.Symbol("t", integer=True, nonnegative=True)
    f = sp.IndexedBase("F", real=True)
    per_step = (f[t] - f[t + 1]) / de.eta + de.beta * de.eta * de.G / 2
    summed = sp.Sum(per_step, (t, 0, de.T - 1)).doit()
    f_star = sp.Symbol("f_star", real=True)
    gap = sp.Symbol("Delta", nonnegative=True)
    return sp.expand(summed.subs(f[de.T], f_star).subs(f[0], f_star + gap))


def minibatch_weight() -> sp.Expr:
    """The weight c that makes ``c sum_{k in S} g_k`` over a uniform K-subset S unbiased:
    ``c K/N = 1/N`` with ``K/N = C(N-1, K-1)/C(N, K)``, so ``c = 1/K`` (symbolic N, K)."""
    n, k = sp.symbols("N K", integer=True, positive=True)
    c = sp.Symbol("c")
    inclusion = sp.combsimp(sp.binomial(n - 1, k - 1) / sp.binomial(n, k))
    (weight,) = sp.solve(sp.Eq(c * inclusion, 1 / n), c)
    return weight


@cache
def derivative_order(largest: int = 3) -> int:
    """The order n of the derivative of ``g(t) = f(x + t d)`` that equals ``d^T Hess f d``
    for a generic f of two variables (n = 1..``largest`` tried): 2."""
    t = sp.Symbol("t", real=True)
    us = sp.symbols("u1:3", real=True)
    xs = sp.symbols("x1:3", real=True)
    ds = sp.symbols("d1:3", real=True)
    f = sp.Function("f")(*us)
    at = {u: xk + t * dk for u, xk, dk in zip(us, xs, ds, strict=True)}
    g = f.subs(at, simultaneous=True)
    d = sp.Matrix(ds)
    form = (d.T * sp.hessian(f, us).subs(at, simultaneous=True) * d)[0]
    for order in range(1, largest + 1):
        if sp.simplify(sp.diff(g, t, order) - form) == 0:
            return order
    raise ValueError("no derivative order up to the largest matches the quadratic form")
