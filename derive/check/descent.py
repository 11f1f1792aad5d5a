"""Verdicts of the statements about Lipschitz continuity, smoothness, gradient descent and
SGD (topics ``lipschitz_foundations`` and ``descent``).

A general theorem ("for every beta-smooth f") is decided by its proof's machine-checked
steps (``proofs/descent.py``): every algebraic step for symbolic sizes, the inequality
chains on symbols, the exact integrals, and the equality case, which shows the bound is
attained; the analysis facts a step takes as given are named in its statement. A printed
number, interval or formula is compared with the one derived here, and a statement that
fails carries the exact witness that refutes it.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy as sp

from derive.check.core import Result, result
from derive.claims import Claim
from derive.definitions import descent as de
from proofs import descent as pd
from proofs.core import Proof, Step, UnprovenError, Verdict, is_zero

_SYMBOLIC = "symbolic identity"


def _proof(c: Claim, steps: tuple[Step, ...]) -> Proof:
    return Proof(claim=c.statement_latex, steps=steps)


def _decided(c: Claim, holds: bool, value: str, steps: tuple[Step, ...], **extra) -> Result:
    """``holds`` when the derived statement agrees with the printed one, else ``fails``
    (``extra`` then carries the witness)."""
    return result(c, Verdict.HOLDS if holds else Verdict.FAILS, value, _proof(c, steps), **extra)


def _misprinted(c: Claim, printed_wrong: bool, intent_holds: bool, value: str, steps, **extra):
    """``misprinted`` when the printed statement is refuted and its intent is proven."""
    if not (printed_wrong and intent_holds):
        raise UnprovenError(f"{c.id}: printed refuted {printed_wrong}, intent {intent_holds}")
    return result(c, Verdict.MISPRINTED, value, _proof(c, steps), **extra)


# --- the first-order condition (001's Lemma 1 and 000's lemma) ------------------------------


def _first_order_steps() -> tuple[Step, ...]:
    return (
        Step(
            statement=r"if: for $x, y$ in $\mathbb{R}^D$ (convex), $g(t) = f(x + t(y - x))$ is "
            r"differentiable with $g'(t) = \langle \nabla f(x + t(y-x)), y - x\rangle$ (chain "
            r"rule, checked for a generic f at D = 2); by the mean value theorem (taken as "
            r"given) $f(y) - f(x) = g'(\xi)$ for some $\xi \in (0, 1)$",
            method=_SYMBOLIC,
            check=lambda: pd.chain_rule_along(2)["first"],
        ),
        Step(
            statement=r"Cauchy-Schwarz for every D (symbolic D) (Lagrange's identity): "
            r"$|\langle \nabla f(z), y - x\rangle| \le \|\nabla f(z)\| \|y - x\|$, and with "
            r"$\|\nabla f(z)\| \le K_0$ the chain gives $|f(y) - f(x)| \le K_0 \|y - x\|$ "
            r"(each hypothesis with a nonnegative slack; what is left is nonnegative)",
            method=_SYMBOLIC,
            check=lambda: pd.cauchy_schwarz() and pd.composition_step(),
        ),
        Step(
            statement=r"only if: for a unit v, $\lim_{h \to 0} (f(x + hv) - f(x))/h = "
            r"\nabla f(x)^\top v$ (the derivative of $h \mapsto f(x + hv)$ at 0, checked for a "
            r"generic f at D = 2 and D = 3), and each quotient is at most $K_0$ in absolute "
            r"value, so $|\nabla f(x)^\top v| \le K_0$",
            method=_SYMBOLIC,
            check=lambda: pd.directional_derivative(2) and pd.directional_derivative(3),
        ),
        Step(
            statement=r"$v = \nabla f(x)/\|\nabla f(x)\|$ gives $\nabla f(x)^\top v = \|\nabla "
            r"f(x)\|$ for every D (symbolic D): $\|\nabla f(x)\| \le K_0$",
            method=_SYMBOLIC,
            check=pd.gradient_attains,
        ),
        Step(
            statement=r"the constant is the least: $f = \mathbf{a}^\top \mathbf{x} + 1$ has "
            r"$f(y) - f(x) = \langle \mathbf{a}, y - x\rangle$ (symbolic D) and the quotient "
            r"$\|\mathbf{a}\|^2 / \|\mathbf{a}\| = \|\mathbf{a}\| = \sup \|\nabla f\|$ at "
            r"$y - x = \mathbf{a}$",
            method=_SYMBOLIC,
            check=lambda: pd.linear_difference() and pd.gradient_attains(),
        ),
        Step(
            statement=r"the domain matters: on $\mathbb{R} \setminus [-1, 1]$ (not convex) "
            r"$f = \mathrm{sign}(x)$ has $f' = 0$ everywhere, yet $|f(2) - f(-2)| = 2 > 0$",
            method="exact witness",
            check=lambda: pd.nonconvex_witness() == {"slope_right": 0, "slope_left": 0, "jump": 2},
        ),
    )


def _first_order(c: Claim) -> Result:
    return result(
        c,
        Verdict.HOLDS,
        "sup_grad_norm",
        _proof(c, _first_order_steps()),
        notes=(
            "value: the least Lipschitz constant of a differentiable f on R^D is sup ||grad "
            "f||_2 (Euclidean norm), attained by every linear f.",
        ),
    )


def _definitions(c: Claim) -> Result:
    agree = pd.definitions_agree()
    steps = (
        Step(
            statement=r"for a scalar f the Euclidean norm of $f(x_1) - f(x_2)$ is its absolute "
            r"value: $\sqrt{a^2} = |a|$, so 001's Definition 1 (p = 2, $D_1 = 1$) and "
            r"Definition 4 are 000's and 002's inequalities with $K_0 = L$, $K_1 = \beta$",
            method=_SYMBOLIC,
            check=lambda: agree["norm_is_abs"],
        ),
        Step(
            statement=r"the constant function: $0 \le K r$ for $r > 0$ holds exactly for "
            r"$K \in [0, \infty)$ (solveset), so 001 and 000 admit the least constant 0, and "
            r"002's $L > 0$ admits $(0, \infty)$, without a least element",
            method="symbolic solution set",
            check=lambda: agree["admissible"] and agree["strict_excludes_zero"],
        ),
    )
    return _decided(
        c,
        all(agree.values()),
        "(K_0, K_1)",
        steps,
        notes=(
            "value: 001's names for 000's and 002's L and beta. A function is L-Lipschitz "
            "for some admissible L under one definition exactly when it is under the others "
            "(an L >= 0 can always be raised to L + 1 > 0).",
        ),
    )


# --- Eq. 4 and the paragraph after it ------------------------------------------------------


def _square_steps() -> tuple[Step, ...]:
    quotient, limit = pd.square_quotient()
    return (
        Step(
            statement=r"$f(x) = x^2$ is continuously differentiable ($f' = 2x$), and for every "
            r"$K \ge 0$ (symbolic K) the quotient $|f(K+1) - f(0)| / |K + 1 - 0| = K + 1 > K$: "
            r"f is K-Lipschitz for no K",
            method="exact witness",
            check=pd.square_exceeds,
        ),
        Step(
            statement=r"001's own Example 1, $\mathbf{x}^\top\mathbf{x} + 2$ (continuously "
            r"differentiable): the quotient at $0$ and $t \mathbf{e}_1$ is $t \to \infty$",
            method="symbolic limit",
            check=lambda: quotient == sp.Symbol("t", positive=True) and limit == sp.oo,
        ),
    )


def _eq4(c: Claim) -> Result:
    _, limit = pd.square_quotient()
    if limit != sp.oo or not pd.square_exceeds():
        raise UnprovenError(f"{c.id}: the counterexample does not check")
    return _decided(
        c,
        False,
        "oo",
        _square_steps(),
        witness=dict(
            zip(("f", "x1", "x2", "quotient"), map(sp.sstr, pd.square_witness()), strict=True)
        ),
        notes=(
            "value: the least Lipschitz constant of the counterexample x^2 on R (oo: none). "
            "Corrected: continuously differentiable with a bounded gradient on R^D (or on a "
            "compact convex set) implies Lipschitz, with constant sup ||grad f|| (Lemma 1).",
        ),
    )


def _stricter(c: Claim) -> Result:
    slope = sp.diff(de.x**2, de.x)
    unbounded = sp.limit(sp.Abs(slope), de.x, sp.oo)
    left, right = pd.relu_one_sided()
    steps = (
        *_square_steps(),
        Step(
            statement=r"$x^2$ is continuously differentiable with $\sup |f'| = \lim_{x \to "
            r"\infty} 2x = \infty$: continuous differentiability does not require a bounded "
            r"gradient",
            method="symbolic limit",
            check=lambda: unbounded == sp.oo,
        ),
        Step(
            statement=r"ReLU is 1-Lipschitz and not differentiable at 0 (one-sided quotients "
            r"0 and 1): neither class contains the other, so neither condition is stricter",
            method="symbolic limit",
            check=lambda: pd.relu_lipschitz() and (left, right) == (0, 1),
        ),
    )
    return _decided(
        c,
        unbounded != sp.oo,
        "oo",
        steps,
        witness={"f": "x**2", "sup|f'|": str(unbounded)},
        notes=(
            "value: sup |f'| of the continuously differentiable x^2. Corrected: a "
            "differentiable f is Lipschitz exactly when its gradient is bounded (Lemma 1); "
            "neither class contains the other (x^2, ReLU).",
        ),
    )


def _relu(c: Claim) -> Result:
    left, right = pd.relu_one_sided()
    derived = sp.Integer(1) if pd.relu_lipschitz() else None
    steps = (
        Step(
            statement=r"$|\mathrm{relu}(y) - \mathrm{relu}(x)| \le |y - x|$ in every sign case "
            r"(symbolic $p, q > 0$ and the zeros), with equality at $(0, 1)$: the least "
            r"constant is 1",
            method="exhaustive enumeration",
            check=pd.relu_lipschitz,
        ),
        Step(
            statement=r"$(\mathrm{relu}(h) - \mathrm{relu}(0))/h \to 0$ as $h \to 0^-$ and $\to "
            r"1$ as $h \to 0^+$: not differentiable at 0, so not continuously differentiable",
            method="symbolic limit",
            check=lambda: (left, right) == (0, 1),
        ),
    )
    holds = derived is not None and c.formal == derived and left != right
    return _decided(c, holds, "1", steps, witness=None if holds else {"derived": str(derived)})


def _example1(c: Claim) -> Result:
    a_norm = sp.Symbol("a_norm", nonnegative=True)
    constant = sp.simplify(sp.Abs(de.CONSTANT - de.CONSTANT))
    _, squared = pd.square_quotient()
    linear = a_norm if pd.linear_difference() and pd.gradient_attains() else None
    derived = sp.Tuple(constant, linear, squared)
    steps = (
        Step(
            statement=r"$f = c$: $|f(y) - f(x)| = |c - c| = 0$ for all x, y: the least "
            r"constant is 0",
            method=_SYMBOLIC,
            check=lambda: constant == 0,
        ),
        Step(
            statement=r"$f = \mathbf{a}^\top\mathbf{x} + 1$: $f(y) - f(x) = \langle \mathbf{a}, "
            r"y - x\rangle$ for every D (symbolic D), at most $\|\mathbf{a}\| \|y - x\|$ "
            r"(Cauchy-Schwarz, Lagrange's identity), with equality at $y - x = \mathbf{a}$",
            method=_SYMBOLIC,
            check=lambda: pd.linear_difference() and pd.cauchy_schwarz() and pd.gradient_attains(),
        ),
        Step(
            statement=r"$f = \mathbf{x}^\top\mathbf{x} + 2$: the quotient between $0$ and $t "
            r"\mathbf{e}_1$ is $t$, unbounded as $t \to \infty$ (every D)",
            method="symbolic limit",
            check=lambda: squared == sp.oo,
        ),
    )
    equal = c.formal == derived
    return _decided(
        c,
        equal,
        sp.sstr(derived),
        steps,
        witness=None if equal else {"printed": sp.sstr(c.formal), "derived": sp.sstr(derived)},
        notes=("value: a_norm = ||a||_2.",),
    )


# --- Lemma 2 --------------------------------------------------------------------------------


def _lemma2(c: Claim) -> Result:
    k1 = sp.Symbol("K_1", positive=True)
    f = k1 / 2 * de.x**2
    curvature = sp.diff(f, de.x, 2)
    y = sp.Symbol("y", real=True)
    slope = sp.diff(f, de.x)
    smallest = sp.simplify((slope.subs(de.x, y) - slope) / (y - de.x))
    strict = sp.StrictLessThan(sp.Abs(curvature), k1)
    weak = c.intended.subs(sp.Symbol("sup_hessian_norm", nonnegative=True), sp.Abs(curvature))
    steps = (
        Step(
            statement=r"$f = \frac{K_1}{2} x^2$: $f'(y) - f'(x) = K_1 (y - x)$ exactly, so f is "
            r"$K_1$-smooth (and $K_1$ is its least constant); in $\mathbb{R}^D$, $\frac{K_1}{2}"
            r"\|x\|^2$ has $\|\nabla f(y) - \nabla f(x)\|^2 = K_1^2 \|y - x\|^2$ for "
            r"every D (symbolic D)",
            method=_SYMBOLIC,
            check=lambda: smallest == k1 and pd.quadratic_smooth(),
        ),
        Step(
            statement=r"its Hessian is $K_1$ ($K_1 I$ in $\mathbb{R}^D$, spectral norm $K_1$), "
            r"and $K_1 < K_1$ is false: the printed 'only if' fails; $\le$ holds",
            method="exact witness",
            check=lambda: strict is sp.false and weak is sp.true,
        ),
        Step(
            statement=r"with $\le$ (the intent) the lemma is Lemma 1 applied to the map "
            r"$\nabla f$, whose Jacobian is the Hessian: if: $\nabla f(y) - \nabla f(x) = "
            r"\int_0^1 \nabla^2 f(x + t(y-x))\,dt\,(y - x)$ (fundamental theorem of calculus; "
            r"$g'' = (y-x)^\top \nabla^2 f (y-x)$ along the segment, checked for a generic f "
            r"at D = 2), so its norm is at most $\sup\|\nabla^2 f\| \|y - x\|$; only if: "
            r"$\nabla^2 f(x) v = \lim_{h\to 0} (\nabla f(x + hv) - \nabla f(x))/h$ has norm at "
            r"most $K_1$ for every unit v, and the sup over unit v is the spectral norm",
            method=_SYMBOLIC,
            check=lambda: pd.chain_rule_along(2)["second"] and pd.hessian_quotient(2),
        ),
    )
    return _misprinted(
        c,
        strict is sp.false,
        weak is sp.true and pd.quadratic_smooth(),
        "sup_hessian_norm <= K_1",
        steps,
        witness={"f": "K_1*x**2/2", "f''": sp.sstr(curvature), "smallest K_1": sp.sstr(smallest)},
        notes=(
            "Intended: ||Hess f(x)||_2 <= K_1 for every x (sup over x), which holds; the "
            "strict inequality is sufficient but not necessary. With the Frobenius norm the "
            "'only if' holds but the 'if' is loose (||.||_2 <= ||.||_F).",
        ),
    )


# --- Lemma 3 and Eq. 46 ---------------------------------------------------------------------


def _composition_steps() -> tuple[Step, ...]:
    return (
        Step(
            statement=r"two layers: from $\|g(f(x)) - g(f(y))\| \le L_g \|f(x) - f(y)\|$, "
            r"$\|f(x) - f(y)\| \le L_f \|x - y\|$ and $L_g \ge 0$: $\|g(f(x)) - g(f(y))\| \le "
            r"L_g L_f \|x - y\|$ (hypotheses with slacks $u, w \ge 0$; what is left, "
            r"$u + L_g w$, is nonnegative)",
            method="symbolic sign",
            check=pd.composition_step,
        ),
        Step(
            statement=r"L layers, by induction on the depth for a symbolic L: $\mathrm{Lip}"
            r"(F_{L+1}) \le c_{L+1} \mathrm{Lip}(F_L) \le c_{L+1} P_L = P_{L+1}$ with $P_L = "
            r"\prod_{l \le L} c_l$ (the step's signs for symbolic L; the recurrence "
            r"$P_{L+1} = c_{L+1} P_L$ of the products evaluated at L = 1..8)",
            method="symbolic sign",
            check=pd.composition_induction,
        ),
    )


def _lemma3(c: Claim) -> Result:
    strict, attained = pd.composition_strict(), pd.composition_attained()
    steps = (
        *_composition_steps(),
        Step(
            statement=r"strict: $f^1 = \mathrm{relu}(x)$, $f^2 = \mathrm{relu}(-y)$ (each "
            r"1-Lipschitz): $\mathrm{relu}(-\mathrm{relu}(x)) = 0$ for every x, Lip 0 < 1",
            method="exhaustive enumeration",
            check=pd.composition_strict,
        ),
        Step(
            statement=r"attained: weights 2 and 3 with ReLU: $\mathrm{relu}(3\,\mathrm{relu}"
            r"(2x)) = 6\,\mathrm{relu}(x)$ for every x, Lip $6 = 2 \cdot 3$",
            method="exhaustive enumeration",
            check=pd.composition_attained,
        ),
    )
    return _decided(
        c,
        strict and attained,
        "Product(Lip_l, (l, 1, L))",
        steps,
        notes=(
            "value: the bound as printed; it is the best bound in the layers' constants alone "
            "(attained), and can be far from the network's constant (the strict example).",
        ),
    )


def _eq44(c: Claim) -> Result:
    found = pd.sampled_constants()
    ordered = all(k_s <= k_t <= k_u for k_s, k_t, k_u in found.values())
    steps = (
        Step(
            statement=r"$K_s \le K_t$: a maximum of $|F(x + \epsilon) - F(x)|/\|\epsilon\|$ "
            r"over sampled pairs is at most its supremum over all pairs, which is $K_t$ by "
            r"Definition 1; $K_t \le K_u$ is Lemma 3 (the composition step, with slacks)",
            method="symbolic sign",
            check=pd.composition_step,
        ),
        Step(
            statement=r"attained: $\mathrm{relu}(3\,\mathrm{relu}(2x))$ sampled at (0, 1), "
            r"(-1, 2), (1/2, 3) gives $K_s = 6 = K_t = K_u = 2 \cdot 3$ (exact quotients; "
            r"$K_t = 6$ for every x, both signs)",
            method="exact witness",
            check=lambda: found["attaining"] == (6, 6, 6) and pd.composition_attained(),
        ),
        Step(
            statement=r"strict: $\mathrm{relu}(-\mathrm{relu}(x))$ gives $K_s = K_t = 0 < 1 = "
            r"K_u$",
            method="exact witness",
            check=lambda: found["strict"] == (0, 0, 1) and pd.composition_strict(),
        ),
    )
    return _decided(
        c,
        ordered,
        "(K_s, K_t, K_u)",
        steps,
        notes=("value: the three constants, ordered; both inequalities can be equalities.",),
    )


def _eq46(c: Claim) -> Result:
    block, printed = pd.residual_block_witness()
    doubled = sp.simplify(de.x + de.x)  # SA(x) = x: x + SA(x) = 2x, Lip 2 = 1 + 1
    gloss = pd.eigenvalue_gloss()
    steps = (
        *_composition_steps(),
        Step(
            statement=r"SA(x) = -x (Lip 1), FFN = 0 (Lip 0), D = 1: the block is $x + (-x) + 0 "
            r"= 0$, Lip 0, against the printed $(1 + 1)(1 + 0) = 2$: the '=' fails",
            method="exact witness",
            check=lambda: (block, printed) == (0, 2),
        ),
        Step(
            statement=r"the intent, '$\le$': $\mathrm{Lip}(x + g(x)) \le 1 + \mathrm{Lip}(g)$ "
            r"(triangle inequality; slacks nonnegative), and the block is the composition of "
            r"$x \mapsto x + \mathrm{SA}(x)$ and $y \mapsto y + \mathrm{FFN}(y)$ (the "
            r"two-layer step above)",
            method="symbolic sign",
            check=pd.residual_bound,
        ),
        Step(
            statement=r"$1 + \mathrm{Lip}(g)$ is attained: SA(x) = x gives $x + x = 2x$, Lip "
            r"$2 = 1 + 1$",
            method="exact witness",
            check=lambda: doubled == 2 * de.x,
        ),
        Step(
            statement=r"$\mathrm{Lip}(\mathbf{O}\mathbf{x}) = \sigma_{max}(\mathbf{O})$ read as "
            r"the largest singular value, not the gloss's largest absolute eigenvalue: $\mathbf"
            r"{O} = \begin{pmatrix} 0 & 1 \\ 0 & 0 \end{pmatrix}$ has eigenvalues 0, 0, while "
            r"$\|\mathbf{O} e_2\| = 1 = \sqrt{\lambda_{max}(\mathbf{O}^\top\mathbf{O})}$",
            method="exact witness",
            check=lambda: gloss == {"eigenvalues": sp.Tuple(0, 0), "largest_gram": 1, "moved": 1},
        ),
    )
    return _misprinted(
        c,
        block != printed,
        pd.residual_bound() and pd.composition_step(),
        "Product((1 + Lip_SA_l)*(1 + Lip_FFN_l), (l, 1, L))*sigma_max_O",
        steps,
        witness={"SA": "-x", "FFN": "0", "Lip(block)": sp.sstr(block), "printed": str(printed)},
        notes=(
            "Intended: Lip(f^l) <= (1 + Lip(SA^l))(1 + Lip(FFN^l)), so the whole display is "
            "an upper bound, as its first line says; this holds. value: that bound.",
        ),
    )


# --- printed coefficients and bounds against derived ones ------------------------------------


def _bound_verdict(
    c: Claim, derived: sp.Expr, steps: tuple[Step, ...], value: str, attained: str, **extra
) -> Result:
    """A printed coefficient (or bound) against the derived tight one, attained by the
    quadratic: equal holds; provably larger holds_loose (valid, not tight); provably smaller
    fails, the quadratic exceeding the printed bound; otherwise no verdict."""
    gap = sp.simplify(c.formal - derived)
    if gap == 0:
        return _decided(c, True, value, steps, **extra)
    if gap.is_positive:
        return result(
            c,
            Verdict.HOLDS_LOOSE,
            value,
            _proof(c, steps),
            notes=(f"valid; the tight constant is {sp.sstr(derived)}, attained by {attained}.",),
        )
    if gap.is_negative:
        exceeds = Step(
            statement=rf"the printed ${sp.latex(c.formal)}$ is below ${sp.latex(derived)}$, "
            rf"which {attained} attains: the bound fails there",
            method="symbolic sign",
            check=lambda: (derived - c.formal).is_positive is True,
        )
        return _decided(
            c,
            False,
            value,
            (*steps, exceeds),
            witness={"f": attained, "printed": sp.sstr(c.formal), "attained": sp.sstr(derived)},
        )
    raise UnprovenError(f"{c.id}: cannot order printed {c.formal} and derived {derived}")


# --- 003: gradient estimates, steepest descent, 002's update ----------------------------------


def _estimates(c: Claim) -> Result:
    weight = pd.minibatch_weight()
    steps = (
        Step(
            statement=r"a uniform K-subset contains a given index with probability "
            r"$\binom{N-1}{K-1} / \binom{N}{K} = K/N$ (symbolic N and K), so "
            r"$\mathbb{E}[c\sum_{k \in S} \nabla f_k] = c \frac{K}{N} \sum_k \nabla f_k$ "
            r"(linearity of expectation), the full-batch mean exactly for $c = 1/K$",
            method=_SYMBOLIC,
            check=lambda: (
                pd.minibatch_probability()
                and is_zero(weight - 1 / sp.Symbol("K", integer=True, positive=True))
            ),
        ),
        Step(
            statement=r"every N = 1..6 and K = 1..N: the mean over all $\binom{N}{K}$ subsets "
            r"equals the full-batch mean, for symbolic gradients (K = 1: the stochastic "
            r"estimate over a uniform i; K = N: the full batch)",
            method="exhaustive enumeration",
            check=lambda: pd.minibatch_unbiased(6),
        ),
    )
    if is_zero(c.formal - weight):
        return _decided(
            c,
            True,
            sp.sstr(weight),
            steps,
            notes=("value: the weight of a K-subset's sum that makes the estimate unbiased.",),
        )
    n, k = sp.symbols("N K", integer=True, positive=True)
    sizes = next(
        (size, batch)
        for size in range(2, 6)
        for batch in range(1, size + 1)
        if c.formal.subs({k: batch, n: size}) != sp.Rational(1, batch)
    )
    size, batch = sizes
    mean = c.formal.subs({k: batch, n: size}) * sp.Rational(batch, size)
    biased = Step(
        statement=rf"N = {size}, K = {batch}, $g = e_1$: the estimate's mean is "
        rf"${sp.latex(mean)}$, the full batch's $1/{size}$",
        method="exact witness",
        check=lambda: mean != sp.Rational(1, size),
    )
    return _decided(
        c,
        False,
        sp.sstr(weight),
        (*steps, biased),
        witness={"N": str(size), "K": str(batch), "mean": sp.sstr(mean), "full_batch": f"1/{size}"},
    )


def _steepest(c: Claim) -> Result:
    unbounded = pd.unbounded_linear_model()
    steps = (
        Step(
            statement=r"over unit v, $\langle \nabla f, \eta v\rangle \ge -\eta \|\nabla f\|$ "
            r"(Cauchy-Schwarz for every D (symbolic D), Lagrange's identity)",
            method=_SYMBOLIC,
            check=pd.cauchy_schwarz,
        ),
        Step(
            statement=rf"the printed $v = {sp.latex(c.formal)}\,\nabla f/\|\nabla f\|$: "
            r"$\langle a, s\,a/\|a\|\rangle = -\|a\|$ (symbolic D) holds for $s = -1$ and "
            r"not for $s = +1$; "
            r"by Cauchy-Schwarz's equality case $-\nabla f/\|\nabla f\|$ is the only minimizer "
            r"(for $\nabla f \ne 0$)",
            method=_SYMBOLIC,
            check=lambda: pd.attains_minimum(-1) and not pd.attains_minimum(1),
        ),
        Step(
            statement=r"without $\|v\| = 1$ there is no minimum: at $v = -c\,\nabla f$, "
            r"$\langle \nabla f, \eta v\rangle = -\eta c \|\nabla f\|^2 \to -\infty$ as "
            r"$c \to \infty$",
            method="symbolic limit",
            check=lambda: unbounded == -sp.oo,
        ),
    )
    holds = pd.attains_minimum(c.formal)
    return _decided(
        c,
        holds,
        "-grad_f/norm_grad_f",
        steps,
        witness=None if holds else {"grad f": "(1)", "v": sp.sstr(c.formal), "minimizer": "-1"},
    )


def _update_002(c: Claim) -> Result:
    theta, alpha, grad = (
        sp.Symbol(n, **a)
        for n, a in (
            ("theta", {"real": True}),
            ("alpha", {"positive": True}),
            ("grad_L", {"real": True}),
        )
    )
    change = sp.expand(grad * (c.formal - theta))  # first-order change of L along the step
    at = {theta: 1, alpha: sp.Rational(1, 4), grad: 2}  # L = theta^2 at theta = 1
    loss = de.x**2
    values = tuple(loss.subs(de.x, e.subs(at)) for e in (theta, c.formal, c.intended))
    steps = (
        Step(
            statement=rf"the printed step ${sp.latex(c.formal)}$ changes L by "
            rf"${sp.latex(change)}$ to first order; at $L(\theta) = \theta^2$, $\theta^t = 1$, "
            rf"$\alpha = 1/4$ it moves to ${sp.latex(c.formal.subs(at))}$ and L from 1 to "
            rf"${sp.latex(values[1])}$",
            method="exact witness",
            check=lambda: loss.subs(de.x, c.formal.subs(at)) == values[1],
        ),
        Step(
            statement=r"the intent $\theta - \alpha\nabla L$: its first-order change "
            r"$\langle \nabla L, -\alpha\nabla L\rangle = -\alpha\|\nabla L\|^2 \le 0$ "
            r"(symbolic D); on the example it lowers L from 1 to 1/4",
            method=_SYMBOLIC,
            check=lambda: pd.first_order_change() and values[2] == sp.Rational(1, 4),
        ),
    )
    if (-change).is_nonnegative is True:
        return _decided(c, True, "theta - alpha*grad_L", steps)
    return _misprinted(
        c,
        change.is_nonnegative is True and values[1] > values[0],
        values[2] < values[0] and pd.first_order_change(),
        "theta - alpha*grad_L",
        steps,
        witness={
            "L": sp.sstr(loss.subs(de.x, theta)),
            "theta_t": sp.sstr(at[theta]),
            "alpha": sp.sstr(at[alpha]),
            "printed": sp.sstr(c.formal.subs(at)),
            "intended": sp.sstr(c.intended.subs(at)),
        },
        notes=("Intended: theta^{(t+1)} = theta^t + Delta theta = theta^t - alpha grad L.",),
    )


# --- Lemma 3.1, its proof, the Hessian bound -------------------------------------------------

_QUADRATIC = "beta_f*x**2/2"


def _quadratic_equality_step() -> Step:
    return Step(
        statement=r"equality: $f = \frac{\beta}{2}\|x\|^2$ (gradient $\beta x$, "
        r"$\beta$-smooth) meets it with equality for every x, y, symbolic D",
        method=_SYMBOLIC,
        check=pd.quadratic_lemma_equality,
    )


def _lemma31(c: Claim) -> Result:
    pieces = pd.remainder_identity()
    along = pd.chain_rule_along(2)
    weight = pd.remainder_weight()
    steps = (
        Step(
            statement=r"$g(t) = f(x + t(y-x))$: $g'(t) = \langle\nabla f, y - x\rangle$ and "
            r"$g''(t) = (y-x)^\top \nabla^2 f\,(y-x)$ along the segment (sympy.diff of a generic "
            r"f, D = 2)",
            method=_SYMBOLIC,
            check=lambda: along["first"] and along["second"],
        ),
        Step(
            statement=r"the integral remainder for a generic g: $\frac{d}{ds}[(1-s)g'(s) + "
            r"g(s)] = (1-s)g''(s)$, whose values at 1 and 0 give $g(1) = g(0) + g'(0) + "
            r"\int_0^1 (1-s) g''(s)\,ds$ (fundamental theorem of calculus); the notes' "
            r"integration by parts $\int_0^1 (1-s)g'' = [(1-s)g']_0^1 + \int_0^1 g'$ likewise",
            method=_SYMBOLIC,
            check=lambda: pieces["remainder"] and pieces["ends"] and pieces["by_parts"],
        ),
        Step(
            statement=r"with $(y-x)^\top \nabla^2 f (y-x) \le \beta\|y-x\|^2$ "
            r"(descent.hessian_bound) and $1 - s \ge 0$ on [0, 1]: the remainder is at most "
            rf"$\int_0^1 (1-s)\beta\,ds\,\|y-x\|^2 = {sp.latex(weight)}\|y-x\|^2$ (exact "
            r"integral)",
            method=_SYMBOLIC,
            check=lambda: pieces["weight"] and pieces["weight_nonnegative"],
        ),
        Step(
            statement=r"for f only continuously differentiable (the lemma's hypothesis): "
            r"$f(y) - f(x) - \langle\nabla f(x), y-x\rangle = \int_0^1 \langle \nabla f(x + "
            r"t(y-x)) - \nabla f(x), y - x\rangle dt \le \int_0^1 \beta t\,dt\,\|y-x\|^2 = "
            r"\frac{\beta}{2}\|y - x\|^2$ (fundamental theorem of calculus on g; Cauchy-Schwarz "
            r"for every D (symbolic D); exact integral)",
            method=_SYMBOLIC,
            check=lambda: pieces["c1_weight"] and pd.cauchy_schwarz(),
        ),
        _quadratic_equality_step(),
    )
    if not all(pieces.values()) or pd.quadratic_coefficients()["remainder"] != weight:
        raise UnprovenError(f"{c.id}: the derived coefficient is not attained")
    return _bound_verdict(
        c,
        weight,
        steps,
        "f_x + grad_dot_step + beta_f*step_norm**2/2",
        _QUADRATIC,
        notes=(
            "value: the bound; f_x = f(x), grad_dot_step = <grad f(x), y - x>, step_norm = "
            "||y - x||; attained by (beta/2)||x||^2.",
        ),
    )


def _proof_second_derivative(c: Claim) -> Result:
    first, form = pd.printed_first_derivative()
    order = pd.derivative_order()
    steps = (
        Step(
            statement=r"$f = x^2$, $x = 0$, $y = 1$: $g(t) = t^2$, $g'(1/2) = 1$, while "
            r"$(y-x)\,f''\,(y-x) = 2$: the first derivative is not the quadratic form",
            method="exact witness",
            check=lambda: (first, form) == (1, 2),
        ),
        Step(
            statement=r"the quadratic form $(y-x)^\top\nabla^2 f(x + t(y-x))(y-x)$ is the "
            rf"derivative of order {order} of g, for a generic f (D = 2; every D by the chain "
            r"rule)",
            method=_SYMBOLIC,
            check=lambda: pd.derivative_order() == order == c.intended,
        ),
    )
    if c.formal == order:
        return _decided(c, True, "Derivative(g(t), (t, 2))", steps[1:])
    return _misprinted(
        c,
        first != form,
        order == c.intended,
        "Derivative(g(t), (t, 2))",
        steps,
        witness={
            "f": "x**2",
            "x": "0",
            "y": "1",
            "t": "1/2",
            "g'(t)": sp.sstr(first),
            "printed": sp.sstr(form),
        },
        notes=("Intended: g''(t) = (y - x)^T Hess f(x + t(y - x)) (y - x) <= beta ||y - x||^2.",),
    )


def _hessian_bound(c: Claim) -> Result:
    curvature = pd.quadratic_coefficients()["curvature"]
    steps = (
        Step(
            statement=r"$\langle\nabla f(y) - \nabla f(x), y - x\rangle \le \|\nabla f(y) - "
            r"\nabla f(x)\|\|y - x\| \le \beta\|y - x\|^2$ (Cauchy-Schwarz for "
            r"every D, symbolic D; the chain's signs)",
            method=_SYMBOLIC,
            check=lambda: pd.cauchy_schwarz() and pd.composition_step(),
        ),
        Step(
            statement=r"$\nabla f(y) - \nabla f(x) = \int_0^1 \nabla^2 f(x + t(y-x))\,dt\,(y-x)$ "
            r"(fundamental theorem of calculus on $\phi(t) = \nabla f(x + t(y-x))$, $\phi' = "
            r"\nabla^2 f\,(y-x)$: the chain rule, generic f at D = 2)",
            method=_SYMBOLIC,
            check=lambda: pd.chain_rule_along(2)["second"],
        ),
        Step(
            statement=r"with $y = x + hv$: $\langle \nabla f(x + hv) - \nabla f(x), hv\rangle / "
            r"h^2 \le \beta\|v\|^2$ for every h, and its limit as $h \to 0$ is $v^\top\nabla^2 "
            r"f(x) v$ (continuity of the Hessian; checked as a limit on $x_1^3 + x_1 x_2^2 + "
            r"x_2^4$ for symbolic x, v)",
            method="symbolic limit",
            check=lambda: pd.hessian_quotient(2),
        ),
        Step(
            statement=r"equality: $f = \frac{\beta}{2}\|x\|^2$ has $v^\top (\beta I) v = "
            r"\beta\|v\|^2$ (symbolic D)",
            method=_SYMBOLIC,
            check=pd.quadratic_hessian_equality,
        ),
    )
    return _bound_verdict(c, curvature, steps, "beta_f*v_norm**2", _QUADRATIC)


# --- the descent step and its step sizes ----------------------------------------------------


def _decrease(c: Claim) -> Result:
    derived = de.descent_coefficient()
    steps = (
        Step(
            statement=r"Lemma 3.1 at $y = x_t - \eta\nabla f(x_t)$: $\langle a, -\eta a\rangle "
            r"+ \frac{\beta}{2}\|\eta a\|^2 = -(\eta - \frac{\beta}{2}\eta^2)\|a\|^2$ for "
            r"every D (symbolic D)",
            method=_SYMBOLIC,
            check=pd.decrease_identity,
        ),
        Step(
            statement=r"equality on $f = \frac{\beta}{2}\|x\|^2$: one step decreases f by "
            r"exactly $(\eta - \frac{\beta}{2}\eta^2)\|\nabla f\|^2$ (symbolic D)",
            method=_SYMBOLIC,
            check=pd.quadratic_decrease_is_equality,
        ),
    )
    equal = is_zero(c.formal - derived)
    return _decided(
        c,
        equal,
        sp.sstr(derived),
        steps,
        witness=None if equal else {"printed": sp.sstr(c.formal), "derived": sp.sstr(derived)},
    )


def _step_condition(c: Claim) -> Result:
    derived = pd.coefficient_interval()
    # The betas for which every printed step size has a positive bracket: the printed
    # interval (0, e) lies in (0, 2/beta) exactly when e <= 2/beta.
    covered = sp.solveset(c.formal.sup <= 2 / de.beta, de.beta, sp.Interval.open(0, sp.oo))
    holds = covered == sp.Interval.open(0, sp.oo)
    steps = (
        Step(
            statement=r"$\eta - \frac{\beta}{2}\eta^2 > 0$ exactly for $\eta \in (0, 2/\beta)$ "
            r"(solveset, symbolic $\beta > 0$)",
            method="symbolic solution set",
            check=lambda: derived == sp.Interval.open(0, 2 / de.beta),
        ),
        Step(
            statement=rf"the printed ${sp.latex(c.formal)}$ lies inside it exactly for "
            rf"$\beta \in {sp.latex(covered)}$ (solveset)",
            method="symbolic solution set",
            check=lambda: (
                sp.solveset(c.formal.sup <= 2 / de.beta, de.beta, sp.Interval.open(0, sp.oo))
                == covered
            ),
        ),
    )
    if holds:
        return _decided(c, True, "Interval.open(0, 2/beta_f)", steps)
    witness = pd.decrease_witness()
    outside = pd.WITNESS_BETA not in covered and pd.WITNESS_ETA in c.formal
    steps += (
        Step(
            statement=r"$f = 5x^2$ ($\beta = 10$), $x_0 = 1$, $\eta = 1/2 < 1$: the bracket is "
            r"$-3/4$, $x_1 = -4$ and f rises from 5 to 80",
            method="exact witness",
            check=lambda: (
                outside
                and witness == {"coefficient": sp.Rational(-3, 4), "x1": -4, "f0": 5, "f1": 80}
            ),
        ),
        Step(
            statement=r"for $\beta \le 2$ the printed condition suffices: with $\beta = 2 - s$, "
            r"$\eta = 1 - r$ ($s \ge 0$, $r > 0$), $1 - \beta\eta/2 = (r\beta + s)/2 > 0$",
            method="symbolic sign",
            check=pd.small_beta_positive,
        ),
    )
    return _decided(
        c,
        False,
        "Interval.open(0, 2/beta_f)",
        steps,
        witness={
            "beta": str(pd.WITNESS_BETA),
            "eta": str(pd.WITNESS_ETA),
            "x_0": "1",
            "x_1": str(witness["x1"]),
            "f(x_0)": str(witness["f0"]),
            "f(x_1)": str(witness["f1"]),
            "bracket": str(witness["coefficient"]),
        },
        notes=(
            "value: the step sizes with a positive bracket. Corrected: positive iff 0 < eta < "
            "2/beta; 'eta < 1' suffices only when beta <= 2.",
        ),
    )


# --- SGD ------------------------------------------------------------------------------------


def _degenerate_equality() -> Step:
    return Step(
        statement=r"attained: f constant, $\tilde\nabla f = 0$, $G = 0$, $f^* = f_0$ make "
        r"both sides equal (the chain's slacks all vanish)",
        method="exact witness",
        check=lambda: all(pd.sgd_degenerate().values()),
    )


def _sgd_step(c: Claim) -> Result:
    chain = pd.sgd_chain()
    coefficient = pd.quadratic_coefficients()["sgd_step"]
    steps = (
        Step(
            statement=r"Lemma 3.1 at $y = x_t - \eta\tilde\nabla f(x_t)$: $\langle a, -\eta "
            r"\tilde g\rangle + \frac{\beta}{2}\|\eta\tilde g\|^2 = -\eta\langle a, \tilde g"
            r"\rangle + \frac{\beta}{2}\eta^2\|\tilde g\|^2$ (symbolic D): the line before it",
            method=_SYMBOLIC,
            check=pd.sgd_step_identity,
        ),
        Step(
            statement=r"$\mathbb{E}_t\langle a, \tilde g\rangle = \langle a, \mathbb{E}_t\tilde g"
            r"\rangle = \|a\|^2$ for $\tilde g$ uniform among N vectors with mean a (symbolic "
            r"N and D: finite sums commute, constants leave them; any distribution by "
            r"linearity of expectation)",
            method=_SYMBOLIC,
            check=pd.sgd_expectation,
        ),
        Step(
            statement=r"with $\mathbb{E}_t\|\tilde g\|^2 \le G$ and $\frac{\beta}{2}\eta^2 \ge 0$ "
            r"the bound with $\frac{\beta}{2}$ follows (slacks nonnegative)",
            method="symbolic sign",
            check=lambda: chain["step"],
        ),
        Step(
            statement=r"equality: $\tilde\nabla f = \nabla f$ on $f = \frac{\beta}{2}\|x\|^2$ "
            r"with $G = \|\nabla f(x_t)\|^2$ (symbolic D)",
            method=_SYMBOLIC,
            check=pd.quadratic_sgd_is_equality,
        ),
    )
    return _bound_verdict(
        c,
        coefficient,
        steps,
        "f_x_t - eta*g2 + beta_f*eta**2*G/2",
        _QUADRATIC,
        notes=("value: the bound; g2 = ||grad f(x_t)||^2.",),
    )


def _sgd_rearranged(c: Claim) -> Result:
    chain = pd.sgd_chain()
    coefficient = pd.quadratic_coefficients()["sgd_rearranged"]
    steps = (
        Step(
            statement=r"from $F_{t+1} \le F_t - \eta g_2 + \frac{\beta}{2}\eta^2 G$ (total "
            r"expectation; the tower property taken as given) and $\eta > 0$: $g_2 \le (F_t - "
            r"F_{t+1})/\eta + \frac{\beta}{2}\eta G$ (slacks nonnegative)",
            method="symbolic sign",
            check=lambda: chain["rearranged"],
        ),
        Step(
            statement=r"equality: $\tilde\nabla f = \nabla f$ on $f = \frac{\beta}{2}\|x\|^2$ "
            r"with $G = \|\nabla f(x_t)\|^2$ (symbolic D)",
            method=_SYMBOLIC,
            check=pd.quadratic_sgd_is_equality,
        ),
    )
    return _bound_verdict(c, coefficient, steps, "(F_t - F_next)/eta + beta_f*eta*G/2", _QUADRATIC)


def _sum_steps(sums: dict[str, bool]) -> tuple[Step, ...]:
    return (
        Step(
            statement=r"$\sum_{t=0}^{T-1} [(F_t - F_{t+1})/\eta + \frac{\beta}{2}\eta G] = "
            r"(F_0 - F_T)/\eta + \frac{\beta}{2}\eta G T$ for a symbolic T (SymPy telescopes)",
            method=_SYMBOLIC,
            check=lambda: sums["telescopes"],
        ),
        Step(
            statement=r"$F_T \ge f^*$ ($f^*$ a lower bound of f) and $F_0 = f_0$: at most "
            r"$(f_0 - f^*)/\eta + \frac{\beta}{2}\eta G T$ (symbolic T, slack nonnegative)",
            method="symbolic sign",
            check=lambda: sums["lower_bound"],
        ),
    )


def _printed_bound(c: Claim, derived: sp.Expr, steps: tuple[Step, ...], value: str, **extra):
    """A printed bound against the one the chain derives: equal holds (attained in the
    degenerate case); provably larger holds_loose; a smaller one is not refuted by the chain
    alone, so no verdict."""
    gap = sp.simplify(c.formal - derived)
    if gap == 0:
        return _decided(c, True, value, (*steps, _degenerate_equality()), **extra)
    if gap.is_nonnegative:
        return result(
            c,
            Verdict.HOLDS_LOOSE,
            value,
            _proof(c, steps),
            notes=(f"valid; the chain gives the smaller {sp.sstr(derived)}.",),
        )
    raise UnprovenError(f"{c.id}: the printed bound {c.formal} is not above {derived}")


def _sgd_sum(c: Claim) -> Result:
    sums = pd.telescoping()
    return _printed_bound(
        c,
        pd.sum_bound(),
        _sum_steps(sums),
        "(f_0 - f_star)/eta + beta_f*eta*G*T/2",
        notes=("value: the bound, Delta = f_0 - f*.",),
    )


def _sgd_min(c: Claim) -> Result:
    sums = pd.telescoping()
    derived = sp.expand(pd.sum_bound() / de.T)
    steps = (
        *_sum_steps(sums),
        Step(
            statement=r"$\min_t a_t \le \frac{1}{T}\sum_t a_t$ for a symbolic T (the average "
            r"minus the minimum is a mean of nonnegative terms)",
            method=_SYMBOLIC,
            check=pd.min_below_average,
        ),
        Step(
            statement=r"the sum's bound divided by T is $\frac{1}{\eta T}(f_0 - f^*) + "
            r"\frac{\beta}{2}\eta G$ (symbolic T)",
            method=_SYMBOLIC,
            check=lambda: sums["average"],
        ),
    )
    return _printed_bound(
        c,
        derived,
        steps,
        sp.sstr(de.sgd_min_bound(sp.Symbol("Delta", nonnegative=True))),
        notes=("value: the bound, Delta = f_0 - f*.",),
    )


def _sgd_rate(c: Claim) -> Result:
    found = pd.rate()
    gap = sp.Symbol("Delta", nonnegative=True)
    constant = gap + de.beta * de.G / 2
    bound = de.sgd_min_bound(gap, 1 / sp.sqrt(de.T))
    ratio = sp.limit(bound / c.formal, de.T, sp.oo)
    steps = (
        Step(
            statement=r"at $\eta = 1/\sqrt{T}$ the bound times $\sqrt{T}$ is $(f_0 - f^*) + "
            r"\frac{\beta G}{2}$, free of T (symbolic T): the bound is $((f_0 - f^*) + "
            r"\beta G/2)/\sqrt{T}$",
            method=_SYMBOLIC,
            check=lambda: is_zero(found["scaled"] - constant),
        ),
        Step(
            statement=rf"the bound divided by the printed order ${sp.latex(c.formal)}$ tends "
            rf"to ${sp.latex(ratio)}$ as $T \to \infty$: finite, so the bound is "
            r"$O(\text{printed order})$",
            method="symbolic limit",
            check=lambda: is_zero(found["limit"] - constant) and bool(ratio.is_finite),
        ),
    )
    if not ratio.is_finite:
        raise UnprovenError(f"{c.id}: the bound is not O({c.formal}); the ratio tends to {ratio}")
    return _decided(
        c,
        True,
        "(Delta + beta_f*G/2)/sqrt(T)",
        steps,
        notes=("value: the min bound at eta = 1/sqrt(T); Delta = f_0 - f*.",),
    )


DECIDERS: dict[str, Callable[[Claim], Result]] = {
    "lipschitz_foundations.lemma1": _first_order,
    "lipschitz_foundations.lemma_000": _first_order,
    "lipschitz_foundations.definitions": _definitions,
    "lipschitz_foundations.eq4": _eq4,
    "lipschitz_foundations.stricter": _stricter,
    "lipschitz_foundations.relu": _relu,
    "lipschitz_foundations.example1": _example1,
    "lipschitz_foundations.lemma2": _lemma2,
    "lipschitz_foundations.lemma3": _lemma3,
    "lipschitz_foundations.eq44": _eq44,
    "lipschitz_foundations.eq46": _eq46,
    "descent.estimates": _estimates,
    "descent.steepest": _steepest,
    "descent.update_002": _update_002,
    "descent.lemma31": _lemma31,
    "descent.proof_second_derivative": _proof_second_derivative,
    "descent.hessian_bound": _hessian_bound,
    "descent.decrease": _decrease,
    "descent.step_condition": _step_condition,
    "descent.sgd_step": _sgd_step,
    "descent.sgd_rearranged": _sgd_rearranged,
    "descent.sgd_sum": _sgd_sum,
    "descent.sgd_min": _sgd_min,
    "descent.sgd_rate": _sgd_rate,
}


def check_descent(c: Claim) -> Result:
    """The verdict of a claim about Lipschitz continuity, smoothness or gradient descent."""
    return DECIDERS[c.id](c)
