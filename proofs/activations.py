r"""Machine-checked proofs of :math:`\sup_x |f'(x)|` for the elementwise activations.

For an elementwise map ``y_i = f(x_i)`` the 2-norm Lipschitz constant is
``sup_x |f'(x)|`` (the Jacobian is ``diag(f'(x_i))``); Table 2 of
001_76ce3a8a4b6079c3.txt prints 1/4 (Sigmoid), 1.0 (ReLU), ~1.1 (GeLU, Swish). Every
function below is taken from :data:`derive.definitions.activations.ELEMENTWISE` (``.derivative`` and
``.second_derivative`` are ``sympy.diff`` of the forward); the arb enclosures are produced
from those same SymPy trees by :func:`proofs.arb.to_arb`.

Methods per activation:

* ``sigmoid``: ``1/4 - f' = (f - 1/2)^2`` (identity), ``f' > 0`` (assumptions), ``f'(0) = 1/4``.
* ``relu``: the branches of the Piecewise ``f'`` (``relu'(0) = 0``) and the four sign cases
  of ``|relu(a) - relu(b)| <= |a - b|``, enumerated; witnesses ``relu'(1) = 1`` and
  ``(a, b) = (0, 1)``.
* ``gelu_none``: ``f'' = phi (2 - x^2)`` (identity), the sign pattern of ``f''`` (solveset),
  the limits of ``f'`` at infinity, so ``f'`` peaks at ``sqrt(2)``; exact value by identity.
* ``swish``, ``gelu_sigmoid``, ``gelu_tanh``: all are ``f(x) = x sigma(h(x))`` with ``h`` odd
  and increasing (``h = x``, ``1.702 x``, ``2 sqrt(2/pi) (x + 0.044715 x^3)``). On
  ``[-R, R]``: every zero of ``f''`` isolated (arb), the maximizer refined to 48 digits,
  ``|f'| <= U`` by branch-and-bound. For ``|x| >= R``: ``|f'(x) - 1| <= m(x)`` for
  ``x >= 0`` and ``|f'(x)| <= m(-x)`` for ``x <= 0`` with
  ``m(x) = (1 + x h'(x)) e^{-h(x)}``, by identities and polynomial sign certificates; ``m``
  is non-increasing on ``[R, oo)`` (sign certificate) and ``1 + m(R)`` is below the
  interior maximum (arb).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import sympy as sp

from derive.definitions.activations import (
    GELU_SIGMOID_SLOPE,
    GELU_TANH_CUBIC,
    Elementwise,
    elementwise,
    x,
)
from proofs import arb as ball
from proofs.core import (
    Proof,
    Step,
    assumption,
    every,
    identity,
    limit,
    solution_set,
    witness,
)

#: Working precision of every arb step (bits; about 77 decimal digits).
PREC = 256
#: Significant digits of ``value_decimal``.
VALUE_DIGITS = 50
#: Significant digits of the enclosure endpoints and of a decimal maximizer.
ENCLOSURE_DIGITS = 45
#: A transcendental maximizer is refined to this relative width, ``10**-ROOT_DIGITS``.
ROOT_DIGITS = 48


@dataclass(frozen=True)
class SupDerivative:
    """``sup_x |f'(x)|`` for one activation, with its proof.

    ``maximizer`` and ``value`` are SymPy-parsable exact strings when ``maximizer_exact`` /
    ``value_exact``, else decimals (``maximizer`` to ``ENCLOSURE_DIGITS`` significant digits,
    within one unit of the last digit; ``value`` equal to ``value_decimal``).
    ``value_decimal`` has ``VALUE_DIGITS`` significant digits, rounded to nearest from an
    enclosure much narrower than its last digit; ``enclosure`` holds rigorous lower and upper
    decimal bounds of the supremum (width < 1e-35). ``proof`` establishes that the supremum
    over all real ``x`` lies in ``enclosure`` (equals ``value`` when exact) and is attained
    at ``maximizer``.
    """

    key: str
    maximizer: str
    maximizer_exact: bool
    value: str
    value_exact: bool
    value_decimal: str
    enclosure: tuple[str, str]
    proof: Proof


def _tex(expr: sp.Basic) -> str:
    return sp.latex(expr)


def _fprime_tex(module: Elementwise) -> str:
    return rf"f(x) = {_tex(module.forward)}"


def _exact_result(
    module: Elementwise,
    maximizer: sp.Expr,
    value: sp.Expr,
    steps: tuple[Step, ...],
    also: str = "",
) -> SupDerivative:
    """Package an exact supremum: decimals and enclosure from an arb ball of ``value``;
    ``also`` is LaTeX inserted into the claim after the value."""
    lo, hi = ball.endpoints(ball.enclose(value, prec=PREC), prec=PREC)
    claim = (
        rf"\sup_{{x \in \mathbb{{R}}}} \lvert f'(x) \rvert = {also}{_tex(value)},"
        rf"\ \text{{attained at }} x = {_tex(maximizer)},\ \text{{for }} {_fprime_tex(module)}"
    )
    return SupDerivative(
        key=module.key,
        maximizer=str(maximizer),
        maximizer_exact=True,
        value=str(value),
        value_exact=True,
        value_decimal=ball.to_decimal((lo + hi) / 2, VALUE_DIGITS),
        enclosure=(
            ball.to_decimal(lo, ENCLOSURE_DIGITS, "floor"),
            ball.to_decimal(hi, ENCLOSURE_DIGITS, "ceiling"),
        ),
        proof=Proof(claim, steps),
    )


# --------------------------------------------------------------------------------------
# Sigmoid
# --------------------------------------------------------------------------------------


def _sigmoid() -> SupDerivative:
    module = elementwise("sigmoid")
    f, f1 = module.forward, module.derivative
    quarter = sp.Rational(1, 4)
    steps = (
        Step(
            rf"$\frac{{1}}{{4}} - f'(x) = \left(f(x) - \frac{{1}}{{2}}\right)^2$ for all real $x$,"
            rf" where $f'(x) = {_tex(f1)}$; hence $f'(x) \le \frac{{1}}{{4}}$.",
            "symbolic identity",
            identity(quarter - f1, (f - sp.Rational(1, 2)) ** 2),
        ),
        Step(
            rf"$f'(x) = {_tex(f1)} > 0$ for all real $x$, so $\lvert f'(x) \rvert = f'(x)$.",
            "symbolic sign",
            assumption(f1, "positive"),
        ),
        Step(
            r"$f'(0) = \frac{1}{4}$ exactly: the bound is attained at $x = 0$.",
            "exact witness",
            witness(f1, x, 0, quarter),
        ),
    )
    return _exact_result(module, sp.Integer(0), quarter, steps)


# --------------------------------------------------------------------------------------
# ReLU
# --------------------------------------------------------------------------------------

#: The sign cases of a real variable: a label, SymPy assumptions, and the set they describe.
_SIGN_CASES: tuple[tuple[str, dict[str, bool], sp.Set], ...] = (
    ("> 0", {"positive": True}, sp.Interval.open(0, sp.oo)),
    (r"\le 0", {"nonpositive": True}, sp.Interval(-sp.oo, 0)),
)


def _branches_bounded(derivative: sp.Expr, bound: sp.Expr) -> Callable[[], bool]:
    """Every branch value of the Piecewise ``derivative`` has absolute value <= bound, and
    the last condition is ``True`` (so the branches cover every real ``x``)."""

    def check() -> bool:
        if not isinstance(derivative, sp.Piecewise):
            return False
        pieces = derivative.args
        if pieces[-1].cond != sp.true:
            return False
        return all((bound - sp.Abs(piece.expr)).is_nonnegative is True for piece in pieces)

    return check


def _sign_cases_cover() -> bool:
    """The sign cases partition the real line."""
    sets = [case_set for _, _, case_set in _SIGN_CASES]
    return sp.Union(*sets) == sp.S.Reals and sp.Intersection(*sets) == sp.S.EmptySet


def _relu_lipschitz_cases(forward: sp.Expr) -> tuple[Callable[[], bool], ...]:
    """One check per sign case of (a, b): |f(a) - f(b)| <= |a - b| by SymPy's assumptions."""
    checks = []
    for _, a_assumptions, _ in _SIGN_CASES:
        for _, b_assumptions, _ in _SIGN_CASES:
            a = sp.Dummy("a", **a_assumptions)
            b = sp.Dummy("b", **b_assumptions)
            gap = sp.Abs(a - b) - sp.Abs(forward.subs(x, a) - forward.subs(x, b))
            checks.append(assumption(gap, "nonnegative"))
    return (_sign_cases_cover, *checks)


def _relu() -> SupDerivative:
    module = elementwise("relu")
    f, f1 = module.forward, module.derivative
    one = sp.Integer(1)
    cases = ", ".join(f"$a {sa},\\ b {sb}$" for sa, _, _ in _SIGN_CASES for sb, _, _ in _SIGN_CASES)

    def unit_ratio() -> bool:
        a, b = sp.Integer(0), sp.Integer(1)
        return sp.Abs(f.subs(x, b) - f.subs(x, a)) / sp.Abs(b - a) == 1

    steps = (
        Step(
            rf"$f'(x) = {_tex(f1)}$ (the convention $f'(0) = 0$ of Table 2, PyTorch and JAX):"
            r" every branch has $\lvert f'(x) \rvert \le 1$ and the branches cover $\mathbb{R}$.",
            "exhaustive enumeration",
            _branches_bounded(f1, one),
        ),
        Step(
            r"$f'(1) = 1$: the supremum is attained (at every $x > 0$).",
            "exact witness",
            witness(f1, x, 1, one),
        ),
        Step(
            r"$\lvert f(a) - f(b) \rvert \le \lvert a - b \rvert$ for all real $a, b$; the sign"
            f" cases {cases} cover $\\mathbb{{R}}^2$ and each is decided by SymPy.",
            "exhaustive enumeration",
            every(_relu_lipschitz_cases(f)),
        ),
        Step(
            r"$a = 0,\ b = 1$: $\lvert f(1) - f(0) \rvert / \lvert 1 - 0 \rvert = 1$ exactly, so"
            r" the Lipschitz constant is exactly 1.",
            "exact witness",
            unit_ratio,
        ),
    )
    lipschitz = r"\sup_{a \ne b} \frac{\lvert f(a) - f(b) \rvert}{\lvert a - b \rvert} = "
    return _exact_result(module, one, one, steps, also=lipschitz)


# --------------------------------------------------------------------------------------
# GeLU (exact)
# --------------------------------------------------------------------------------------


def _gelu_none() -> SupDerivative:
    module = elementwise("gelu_none")
    f1, f2 = module.derivative, module.second_derivative
    phi = sp.exp(-(x**2) / 2) / sp.sqrt(2 * sp.pi)
    root2 = sp.sqrt(2)
    value = sp.Rational(1, 2) + sp.erf(1) / 2 + sp.exp(-1) / sp.sqrt(sp.pi)
    at_max, at_min = f1.subs(x, root2), f1.subs(x, -root2)
    lo, hi = ball.endpoints(ball.enclose(value, prec=PREC), prec=PREC)
    lower = ball.to_decimal(lo, ENCLOSURE_DIGITS, "floor")
    upper = ball.to_decimal(hi, ENCLOSURE_DIGITS, "ceiling")
    steps = (
        Step(
            rf"$f''(x) = \varphi(x) (2 - x^2)$ with $\varphi(x) = {_tex(phi)}$, where"
            rf" $f'(x) = {_tex(f1)}$.",
            "symbolic identity",
            identity(f2, phi * (2 - x**2)),
        ),
        Step(
            r"$\varphi(x) > 0$ for all real $x$.",
            "symbolic sign",
            assumption(phi, "positive"),
        ),
        Step(
            r"$2 - x^2 > 0$ exactly on $(-\sqrt{2}, \sqrt{2})$ and $< 0$ exactly on"
            r" $(-\infty, -\sqrt{2}) \cup (\sqrt{2}, \infty)$; so $f'$ decreases on"
            r" $(-\infty, -\sqrt{2}]$, increases on $[-\sqrt{2}, \sqrt{2}]$ and decreases on"
            r" $[\sqrt{2}, \infty)$.",
            "symbolic solution set",
            every(
                (
                    solution_set(2 - x**2 > 0, x, sp.Interval.open(-root2, root2)),
                    solution_set(
                        2 - x**2 < 0,
                        x,
                        sp.Union(sp.Interval.open(-sp.oo, -root2), sp.Interval.open(root2, sp.oo)),
                    ),
                )
            ),
        ),
        Step(
            r"$\lim_{x \to -\infty} f'(x) = 0$ and $\lim_{x \to \infty} f'(x) = 1$; with the"
            r" monotonicity above, $f'(-\sqrt{2}) \le f'(x) \le \max(0, f'(\sqrt{2}))$ for all"
            r" real $x$.",
            "symbolic limit",
            every((limit(f1, x, -sp.oo, 0), limit(f1, x, sp.oo, 1))),
        ),
        Step(
            rf"$f'(\sqrt{{2}}) = {_tex(value)}$ exactly.",
            "symbolic identity",
            identity(at_max, value),
        ),
        Step(
            rf"${_tex(value)} \in [{lower}, {upper}]$, and"
            r" $0 < \lvert f'(-\sqrt{2}) \rvert < f'(\sqrt{2})$; hence"
            r" $\sup \lvert f' \rvert = f'(\sqrt{2})$, attained only at $x = \sqrt{2}$.",
            "arb enclosure",
            every(
                (
                    lambda: ball.within(value, lower, upper, prec=PREC),
                    lambda: ball.within(sp.Abs(at_min), lower=0, strict=True, prec=PREC),
                    lambda: ball.within(at_max - sp.Abs(at_min), lower=0, strict=True, prec=PREC),
                )
            ),
        ),
    )
    return _exact_result(module, root2, value, steps)


# --------------------------------------------------------------------------------------
# x * sigma(h(x)): Swish and the two GeLU approximations
# --------------------------------------------------------------------------------------

_u, _p = sp.symbols("u p")
#: f'(x) - 1 for x >= 0 in terms of u = exp(-h(x)) and p = x h'(x).
_RIGHT_TAIL = _u / (1 + _u) * (_p / (1 + _u) - 1)
#: f'(x) for x <= 0 in terms of v = exp(h(x)) and q = -x h'(x) (same symbols, renamed).
_LEFT_TAIL = _u / (1 + _u) * (1 - _p / (1 + _u))
#: The bound of both tails: u (1 + p).
_TAIL_BOUND = _u * (1 + _p)
_TAIL_MULTIPLIER = (1 + _u) ** 2 / _u


def _outward(lo: Fraction, hi: Fraction, digits: int) -> tuple[str, str]:
    """Decimal bounds just outside ``[lo, hi]``, with a margin of one relative unit in the
    ``digits``-th place (so that an upper bound is strictly above the true supremum)."""
    unit = Fraction(1, 10**digits)
    return (
        ball.to_decimal(lo - abs(lo) * unit, digits, "floor"),
        ball.to_decimal(hi + abs(hi) * unit, digits, "ceiling"),
    )


def _tail_steps(module: Elementwise, h: sp.Expr, radius: Fraction, lower: str) -> tuple[Step, ...]:
    """The steps proving ``|f'(x)| <= 1 + m(R) < lower`` for ``|x| >= R``."""
    f1 = module.derivative
    h1, h2 = sp.diff(h, x), sp.diff(h, x, 2)
    s = sp.Symbol("s", nonnegative=True)
    m = (1 + x * h1) * sp.exp(-h)
    decay = x * (h1**2 - h2)
    big_r = sp.Rational(radius.numerator, radius.denominator)
    right = _RIGHT_TAIL.subs({_u: sp.exp(-h), _p: x * h1})
    left = _LEFT_TAIL.subs({_u: sp.exp(h), _p: -x * h1})
    return (
        Step(
            rf"With $h(x) = {_tex(h)}$, $u = e^{{-h(x)}} > 0$ and $p = x h'(x)$:"
            r" $f'(x) - 1 = \frac{u}{1 + u} \left( \frac{p}{1 + u} - 1 \right)$.",
            "symbolic identity",
            identity(f1 - 1, right),
        ),
        Step(
            rf"$p = x h'(x) = {_tex(sp.expand(x * h1))} \ge 0$ for $x \ge 0$ (a polynomial in"
            r" $x$ with nonnegative coefficients).",
            "sign certificate",
            lambda: ball.coefficients_sign(x * h1, x, "nonnegative", prec=PREC),
        ),
        Step(
            r"For $u > 0$, $p \ge 0$: $\left\lvert \frac{u}{1 + u} \left( \frac{p}{1 + u} - 1"
            r" \right) \right\rvert \le u (1 + p)$ (both $u(1 + p) \mp (\ldots)$ times"
            r" $(1 + u)^2 / u$ are polynomials with nonnegative coefficients). Hence"
            r" $\lvert f'(x) - 1 \rvert \le m(x) := (1 + x h'(x)) e^{-h(x)}$ for $x \ge 0$.",
            "sign certificate",
            every(
                (
                    lambda: ball.orthant_nonnegative(
                        _TAIL_BOUND - _RIGHT_TAIL, (_u, _p), _TAIL_MULTIPLIER, prec=PREC
                    ),
                    lambda: ball.orthant_nonnegative(
                        _TAIL_BOUND + _RIGHT_TAIL, (_u, _p), _TAIL_MULTIPLIER, prec=PREC
                    ),
                )
            ),
        ),
        Step(
            r"$m'(x) = -e^{-h(x)} \, x \left( h'(x)^2 - h''(x) \right)$.",
            "symbolic identity",
            identity(sp.diff(m, x), -sp.exp(-h) * decay),
        ),
        Step(
            rf"$x (h'(x)^2 - h''(x))$ at $x = {big_r} + s$ is a polynomial in $s$ with"
            rf" nonnegative coefficients, so $m' \le 0$ and $m$ is non-increasing on"
            rf" $[{big_r}, \infty)$.",
            "sign certificate",
            lambda: ball.coefficients_sign(
                sp.expand(decay.subs(x, big_r + s)), s, "nonnegative", prec=PREC
            ),
        ),
        Step(
            r"With $v = e^{h(x)} > 0$ and $q = -x h'(x)$: $f'(x) = \frac{v}{1 + v} \left( 1 -"
            r" \frac{q}{1 + v} \right)$.",
            "symbolic identity",
            identity(f1, left),
        ),
        Step(
            r"$h(-x) = -h(x)$ and $h'(-x) = h'(x)$, so $v (1 + q) = m(-x)$ and"
            r" $q = p(-x) \ge 0$ for $x \le 0$.",
            "symbolic identity",
            every((identity(h.subs(x, -x), -h), identity(h1.subs(x, -x), h1))),
        ),
        Step(
            r"For $v > 0$, $q \ge 0$: $\left\lvert \frac{v}{1 + v} \left( 1 - \frac{q}{1 + v}"
            r" \right) \right\rvert \le v (1 + q)$ (same certificate). Hence"
            r" $\lvert f'(x) \rvert \le m(-x)$ for $x \le 0$.",
            "sign certificate",
            every(
                (
                    lambda: ball.orthant_nonnegative(
                        _TAIL_BOUND - _LEFT_TAIL, (_u, _p), _TAIL_MULTIPLIER, prec=PREC
                    ),
                    lambda: ball.orthant_nonnegative(
                        _TAIL_BOUND + _LEFT_TAIL, (_u, _p), _TAIL_MULTIPLIER, prec=PREC
                    ),
                )
            ),
        ),
        Step(
            rf"$1 + m({big_r}) = {_tex(1 + m.subs(x, big_r))} < {lower}$. So for"
            rf" $\lvert x \rvert \ge {big_r}$:"
            rf" $\lvert f'(x) \rvert \le 1 + m(\lvert x \rvert) \le 1 + m({big_r}) < {lower}$.",
            "arb enclosure",
            lambda: ball.within(1 + m.subs(x, big_r), upper=lower, strict=True, prec=PREC),
        ),
    )


def _logistic_product(
    key: str, h: sp.Expr, radius: int, extra: tuple[Step, ...] = ()
) -> SupDerivative:
    """``f(x) = x sigma(h(x))``: interior by arb on ``[-R, R]``, tails by :func:`_tail_steps`."""
    module = elementwise(key)
    f1, f2 = module.derivative, module.second_derivative
    big_r = Fraction(radius)
    critical = ball.isolate_roots(f2, x, -big_r, big_r, prec=PREC)
    refined = tuple(
        ball.refine_root(f2, x, lo, hi, digits=ROOT_DIGITS, prec=PREC) for lo, hi in critical
    )
    heights = [ball.enclose(sp.Abs(f1), x, lo, hi, prec=PREC) for lo, hi in refined]
    best = max(range(len(refined)), key=lambda i: float(heights[i].mid()))
    top_lo, top_hi = ball.endpoints(heights[best], prec=PREC)
    lower, upper = _outward(top_lo, top_hi, ENCLOSURE_DIGITS)
    root_lo, root_hi = refined[best]
    maximizer = ball.to_decimal((root_lo + root_hi) / 2, ENCLOSURE_DIGITS)
    value = ball.to_decimal((top_lo + top_hi) / 2, VALUE_DIGITS)
    others = [i for i in range(len(refined)) if i != best]

    def zeros_certified() -> bool:
        return all(
            ball.certify_unique_root(f2, x, lo, hi, prec=PREC)
            and critical[i][0] <= lo <= hi <= critical[i][1]
            for i, (lo, hi) in enumerate(refined)
        )

    intervals = ", ".join(f"$[{float(lo):.4g}, {float(hi):.4g}]$" for lo, hi in critical)
    steps = (
        *extra,
        Step(
            rf"On $[-{radius}, {radius}]$, $f''$ has exactly {len(critical)} zeros, one in each"
            rf" of {intervals}: where $f'''$ excludes 0 the signs of $f''$ at the ends differ,"
            r" and elsewhere the enclosure of $f''$ excludes 0.",
            "arb root isolation",
            lambda: ball.isolate_roots(f2, x, -big_r, big_r, prec=PREC) == critical,
        ),
        Step(
            rf"Each zero lies in a sub-interval of relative width $< 10^{{-{ROOT_DIGITS}}}$ with"
            rf" a sign change of $f''$ and $f''' \ne 0$; the maximizer is"
            rf" $x^* \approx {maximizer}$.",
            "arb root isolation",
            zeros_certified,
        ),
        Step(
            rf"$\lvert f'(x) \rvert \in [{lower}, {upper}]$ for every $x$ in the sub-interval"
            rf" of step {len(extra) + 2} that contains $x^*$, so"
            rf" $\lvert f'(x^*) \rvert \ge {lower}$ (attainment).",
            "arb enclosure",
            lambda: ball.within(sp.Abs(f1), lower, upper, var=x, lo=root_lo, hi=root_hi, prec=PREC),
        ),
        Step(
            rf"At the other zeros of $f''$ in $[-{radius}, {radius}]$,"
            rf" $\lvert f' \rvert < {lower}$: $x^*$ is the only maximizer in the interval.",
            "arb enclosure",
            lambda: all(
                ball.within(sp.Abs(f1), upper=lower, strict=True, var=x, lo=lo, hi=hi, prec=PREC)
                for lo, hi in (refined[i] for i in others)
            ),
        ),
        Step(
            rf"$\lvert f'(x) \rvert \le {upper}$ for all $x \in [-{radius}, {radius}]$, where"
            rf" $f'(x) = {_tex(f1)}$.",
            "arb branch-and-bound",
            lambda: ball.prove_abs_bound(f1, x, -big_r, big_r, upper, prec=PREC).proved,
        ),
        *_tail_steps(module, h, big_r, lower),
    )
    claim = (
        rf"\sup_{{x \in \mathbb{{R}}}} \lvert f'(x) \rvert = \lvert f'(x^*) \rvert"
        rf" \in [{lower}, {upper}],\ x^* \approx {maximizer},\ \text{{for }} {_fprime_tex(module)}"
    )
    return SupDerivative(
        key=key,
        maximizer=maximizer,
        maximizer_exact=False,
        value=value,
        value_exact=False,
        value_decimal=value,
        enclosure=(lower, upper),
        proof=Proof(claim, steps),
    )


def _swish() -> SupDerivative:
    sigmoid_prime = elementwise("sigmoid").derivative
    f2 = elementwise("swish").second_derivative
    extra = (
        Step(
            r"$f''(x) = \sigma'(x) \left( 2 - x \tanh \frac{x}{2} \right)$ with"
            rf" $\sigma'(x) = {_tex(sigmoid_prime)} > 0$: the critical points of $f'$ solve"
            r" $x \tanh \frac{x}{2} = 2$.",
            "symbolic identity",
            identity(f2, sigmoid_prime * (2 - x * sp.tanh(x / 2))),
        ),
    )
    return _logistic_product("swish", x, 6, extra)


def _gelu_sigmoid() -> SupDerivative:
    swish_prime = elementwise("swish").derivative
    f1 = elementwise("gelu_sigmoid").derivative
    extra = (
        Step(
            rf"$f'(x) = s'({_tex(GELU_SIGMOID_SLOPE)} x)$ where $s(x) = x \sigma(x)$ is Swish:"
            r" $u = 1.702 x$ maps $\mathbb{R}$ onto itself, so the supremum equals Swish's and"
            r" the maximizer is Swish's divided by 1.702.",
            "symbolic identity",
            identity(f1, swish_prime.subs(x, GELU_SIGMOID_SLOPE * x)),
        ),
    )
    return _logistic_product("gelu_sigmoid", GELU_SIGMOID_SLOPE * x, 4, extra)


def _gelu_tanh() -> SupDerivative:
    h = 2 * sp.sqrt(2 / sp.pi) * (x + GELU_TANH_CUBIC * x**3)
    return _logistic_product("gelu_tanh", h, 4)


# --------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------

_BUILDERS: dict[str, Callable[[], SupDerivative]] = {
    "sigmoid": _sigmoid,
    "relu": _relu,
    "swish": _swish,
    "gelu_none": _gelu_none,
    "gelu_tanh": _gelu_tanh,
    "gelu_sigmoid": _gelu_sigmoid,
}

#: The activations with a proof of ``sup |f'|``, in the order of
#: ``derive.definitions.activations.ELEMENTWISE``.
SUP_DERIVATIVE_KEYS: tuple[str, ...] = tuple(_BUILDERS)


@functools.cache
def sup_abs_derivative(key: str) -> SupDerivative:
    """``sup_x |f'(x)|`` for the activation ``key``, with its (unverified) proof; cached.

    Call ``.proof.verify()`` to check it.

    >>> result = sup_abs_derivative("sigmoid")
    >>> result.value, result.maximizer, result.proof.verify().ok
    ('1/4', '0', True)
    """
    try:
        builder = _BUILDERS[key]
    except KeyError:
        known = ", ".join(SUP_DERIVATIVE_KEYS)
        raise KeyError(f"no sup |f'| proof for {key!r}; known: {known}") from None
    return builder()


def sup_abs_derivatives() -> tuple[SupDerivative, ...]:
    """All of them, in the order of :data:`SUP_DERIVATIVE_KEYS`."""
    return tuple(sup_abs_derivative(key) for key in SUP_DERIVATIVE_KEYS)
