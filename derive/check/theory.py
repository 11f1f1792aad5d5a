"""Verdicts of the statements about no single module: the size of Adam's update
(topic ``optimizers``) and the Lipschitz and smoothness examples (topic ``smoothness``).

Every verdict follows from ``proofs/theory.py``: the Cauchy-Schwarz bound on ``|m_t| /
sqrt(v_t)`` for every length (Lagrange's identity for a symbolic size), its equality case,
exact witnesses at PyTorch's default betas, the limits SymPy takes, and the derivatives of
the examples piece by piece.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import sympy as sp

from derive.check.core import approx_verdict, compared, result
from derive.claims import Claim
from derive.definitions import theory as th
from proofs import theory as pt
from proofs.core import Proof, Step, UnprovenError, Verdict, is_zero

_BETAS = {
    "optimizers.range_default": pt.DEFAULT,
    "optimizers.range_099": (sp.Rational(9, 10), sp.Rational(99, 100)),
    "optimizers.range_095": (sp.Rational(9, 10), sp.Rational(95, 100)),
}


def _algorithm2_update(c: Claim):
    printed, intended = pt.algorithm2_witness()
    steps = (
        Step(
            statement=r"t = 1, $g_1 = 2$: as printed $\hat m_1 / \hat v_1 = 2/4 = 1/2$; with "
            r"the square root $\hat m_1 / \sqrt{\hat v_1} = 1$. As printed the first update "
            r"is $1/g_1$, unbounded as $g_1 \to 0$, against the bounded update section 6.3 "
            r"describes",
            method="exact witness",
            check=lambda: (printed, intended) == (sp.Rational(1, 2), 1),
        ),
        Step(
            statement=r"as intended, $\hat m_t / \sqrt{\hat v_t}$ with the bias corrections of "
            r"lines 6-7 is Adam's direction (Kingma and Ba; PyTorch's at eps = 0): for every "
            r"t (symbolic t, m_t, v_t), and unrolled from the gradients at t = 1..3",
            method="symbolic identity",
            check=lambda: _intended_is_adam() and all(_intended_matches(t) for t in (1, 2, 3)),
        ),
    )
    if is_zero(printed - intended):
        raise UnprovenError(f"{c.id}: the witness does not separate printed and intended")
    return result(
        c,
        Verdict.MISPRINTED,
        "m_hat/sqrt(v_hat)",
        Proof(claim=c.statement_latex, steps=steps),
        witness={"t": "1", "g_1": "2", "printed": str(printed), "derived": str(intended)},
        notes=(f"Intended: {sp.sstr(c.intended)}, which holds.",),
    )


def _intended_is_adam() -> bool:
    t = sp.Symbol("t", integer=True, positive=True)
    m, v = sp.Symbol("m_t", real=True), sp.Symbol("v_t", positive=True)
    m_hat, v_hat = sp.Symbol("m_hat"), sp.Symbol("v_hat", positive=True)
    corrected = {m_hat: m / (1 - th.beta1**t), v_hat: v / (1 - th.beta2**t)}
    adam = (m / (1 - th.beta1**t)) / sp.sqrt(v / (1 - th.beta2**t))
    return is_zero((m_hat / sp.sqrt(v_hat)).subs(corrected) - adam)


def _intended_matches(steps: int) -> bool:
    gradients = [sp.Symbol(f"g{i + 1}", positive=True) for i in range(steps)]
    m, v = th.moments(gradients)
    m_hat, v_hat = sp.Symbol("m_hat"), sp.Symbol("v_hat", positive=True)
    corrected = {m_hat: m / (1 - th.beta1**steps), v_hat: v / (1 - th.beta2**steps)}
    intended = m_hat / sp.sqrt(v_hat)
    return is_zero(intended.subs(corrected) - th.corrected_update(gradients))


def _update_bound(c: Claim):
    mu2, bound2 = pt.default_exceeds()
    supremum = pt.limit_of_largest(*pt.DEFAULT)
    steps = (
        Step(
            statement=r"Cauchy-Schwarz for every length (Lagrange's identity "
            r"$(\sum x_i^2)(\sum y_i^2) - (\sum x_i y_i)^2 = \frac12 \sum_i \sum_j (x_i y_j - "
            r"x_j y_i)^2$ for a symbolic size), with $x_i = \beta_1^{t-i} \beta_2^{-(t-i)/2}$, "
            r"$y_i = \beta_2^{(t-i)/2} g_i$: $|\mu_t| \le \frac{1-\beta_1}{\sqrt{1-\beta_2}} "
            r"\sqrt{\sum_{k<t} (\beta_1^2/\beta_2)^k}$ for every t",
            method="symbolic identity",
            check=pt.lagrange_identity,
        ),
        Step(
            statement=r"equality at $g_i = (\beta_1/\beta_2)^{t-i}$, for symbolic betas at "
            r"t = 1..4",
            method="symbolic identity",
            check=lambda: all(pt.attains(t) for t in (1, 2, 3, 4)),
        ),
        Step(
            statement=r"PyTorch's default betas (0.9, 0.999), $g = (1, 1)$: $\mu_2^2 = "
            rf"{sp.latex(mu2)} > 10 = \left(\frac{{1-\beta_1}}{{\sqrt{{1-\beta_2}}}}\right)^2$",
            method="exact witness",
            check=lambda: mu2 > bound2 == 10,
        ),
        Step(
            statement=r"at the default betas the supremum over t is $\sqrt{10} \sqrt{1/(1 - "
            rf"0.81/0.999)}} = {sp.latex(supremum)} \approx {sp.N(supremum, 6)}$ (the "
            r"geometric series, summed exactly)",
            method="symbolic identity",
            check=lambda: pt.limit_of_largest(*pt.DEFAULT) == supremum,
        ),
    )
    if not mu2 > bound2:
        raise UnprovenError(f"{c.id}: the witness does not exceed the printed bound")
    return result(
        c,
        Verdict.FAILS,
        "(1 - beta_1)/sqrt(1 - beta_2)*sqrt(Sum((beta_1**2/beta_2)**k, (k, 0, t - 1)))",
        Proof(claim=c.statement_latex, steps=steps),
        witness={
            "beta_1": "9/10",
            "beta_2": "999/1000",
            "g": "(1, 1)",
            "printed": "sqrt(10)",
            "derived": f"sqrt({mu2})",
        },
        notes=(
            "value: the supremum of |mu_t| over every gradient sequence of t steps, "
            "attained. It grows with t to (1 - beta1)/sqrt(1 - beta2)/sqrt(1 - beta1^2/beta2) "
            f"when beta1^2 < beta2 ({sp.N(supremum, 4)} at the default betas, "
            f"{sp.N(pt.limit_of_largest(sp.Rational(9, 10), sp.Rational(95, 100)), 4)} at "
            "(0.9, 0.95) against the printed 0.447), and without bound otherwise. The printed "
            "constant is the first step's |mu_1| and the limit of section 6.3's single step.",
        ),
    )


def _single_step(c: Claim):
    mu, error = pt.single_step_witness()
    worst = pt.single_step_worst()
    steps = (
        Step(
            statement=r"at the default betas with $m_{t-1} = 0$ (so $|g_t| \gg |m_{t-1}|$), "
            r"$v_{t-1} = 1$, $g_t = 1$: $\mu_t = 1/10$ against $\sqrt{10}$, a relative error "
            rf"of ${sp.latex(error)}$",
            method="exact witness",
            check=lambda: pt.single_step_witness() == (mu, error),
        ),
        Step(
            statement=r"the relative error tends to 1 as $v_{t-1} \to \infty$ (the condition "
            r"on $g_t$ and $m_{t-1}$ leaves $v_{t-1}$ free)",
            method="symbolic limit",
            check=lambda: pt.single_step_worst() == 1,
        ),
        Step(
            statement=r"with $m_{t-1}$, $v_{t-1}$ fixed, $\mu_t \to \frac{1-\beta_1}"
            r"{\sqrt{1-\beta_2}}$ as $g_t \to \infty$: the reading under which it holds",
            method="symbolic limit",
            check=lambda: is_zero(pt.single_step_limit() - c.formal),
        ),
    )
    return result(
        c,
        approx_verdict(worst),
        "(beta_1*m_prev + (1 - beta_1)*g)/sqrt(beta_2*v_prev + (1 - beta_2)*g**2)",
        Proof(claim=c.statement_latex, steps=steps),
        witness={
            "m_prev": "0",
            "v_prev": "1",
            "g": "1",
            "printed": "sqrt(10)",
            "derived": "1/10",
            "relative_error": sp.sstr(error),
        },
        relative_error=str(worst),
        notes=(
            "value: mu_t of one step. The '≈' needs (1 - beta2) g_t^2 >> beta2 v_{t-1} as "
            "well as |g_t| >> |m_{t-1}|; worst relative error 1 over what the statement "
            "leaves free.",
        ),
    )


def _rounds_to(value: sp.Expr, printed: str) -> bool:
    """Whether ``value`` rounded to the digits of the decimal ``printed`` is ``printed``
    (exactly: the half-unit interval around it holds ``value``)."""
    digits = Decimal(printed)
    half = sp.Rational(1, 2) * sp.Rational(10) ** digits.as_tuple().exponent
    centre = sp.Rational(printed)
    return bool(centre - half <= value) and bool(value < centre + half)


def _range(c: Claim):
    first, second = _BETAS[c.id]
    derived = sp.nsimplify(th.update_bound(first, second))
    exact = is_zero(c.formal - derived)
    rounded = exact or _rounds_to(derived, c.printed_value)
    steps = (
        Step(
            statement=rf"$(1 - \beta_1)/\sqrt{{1 - \beta_2}}$ at $\beta_1 = {sp.latex(first)}$, "
            rf"$\beta_2 = {sp.latex(second)}$ is ${sp.latex(derived)}$"
            + ("" if exact else rf", which rounds to the printed {c.printed_value}"),
            method="symbolic identity" if exact else "exact witness",
            check=lambda: rounded,
        ),
    )
    if not rounded:
        wrong = Step(
            statement=rf"$(1 - \beta_1)/\sqrt{{1 - \beta_2}} = {sp.latex(derived)}$ does not "
            rf"round to the printed {c.printed_value}",
            method="exact witness",
            check=lambda: not _rounds_to(derived, c.printed_value),
        )
        return result(
            c,
            Verdict.FAILS,
            sp.sstr(derived),
            Proof(claim=c.statement_latex, steps=(wrong,)),
            witness={"printed": c.printed_value, "derived": sp.sstr(derived)},
        )
    return result(
        c,
        Verdict.HOLDS,
        sp.sstr(derived),
        Proof(claim=c.statement_latex, steps=steps),
        notes=(
            "The arithmetic holds; as the range of mu_t it does not: see update_bound "
            f"(the supremum at these betas is {sp.N(pt.limit_of_largest(first, second), 4)}).",
        ),
    )


def _sign_sgd(c: Claim):
    steps = (
        Step(
            statement=r"with $\beta_1 = \beta_2 = 0$ the update of one step is "
            r"$g_t / \sqrt{g_t^2} = \mathrm{sign}(g_t)$ for every $g_t \neq 0$, with or "
            r"without the bias corrections",
            method="symbolic identity",
            check=pt.sign_sgd,
        ),
    )
    return result(c, Verdict.HOLDS, "sign(g)", Proof(claim=c.statement_latex, steps=steps))


def _smoothness(c: Claim):
    square = c.id == "smoothness.square_000"
    if square:
        steps = (
            Step(
                statement=r"$f'(y) - f'(x) = 2(y - x)$ exactly: f is 2-smooth, and no smaller "
                r"constant holds",
                method="symbolic identity",
                check=lambda: pt.square_example()["smooth"],
            ),
            Step(
                statement=r"$\sup |f'| = \lim_{x \to \infty} 2x = \infty$: no Lipschitz "
                r"constant",
                method="symbolic limit",
                check=lambda: pt.square_example()["not_lipschitz"],
            ),
        )
        slope, y = sp.diff(th.SQUARE, th.x), sp.Symbol("y", real=True)
        smooth = sp.simplify((slope.subs(th.x, y) - slope) / (y - th.x))
        derived = sp.Tuple(smooth, sp.limit(sp.Abs(slope), th.x, sp.oo))
    else:
        steps = (
            Step(
                statement=r"$f'(x) = \sqrt{1 - x^2}$ on (-1, 1) (sympy.diff), as printed",
                method="symbolic identity",
                check=lambda: pt.arcsin_example()["slope"],
            ),
            Step(
                statement=r"$\max_{[-1, 1]} |f'| = 1$ (at x = 0): f is 1-Lipschitz on [-1, 1] "
                r"(mean value theorem), and no smaller constant holds",
                method="symbolic solution set",
                check=lambda: pt.arcsin_example()["bounded"],
            ),
            Step(
                statement=r"$f''(x) = -x/\sqrt{1 - x^2} \to -\infty$ as $x \to 1^-$: f' has no "
                r"Lipschitz constant",
                method="symbolic limit",
                check=lambda: pt.arcsin_example()["not_smooth"],
            ),
        )
        slope, interval = sp.simplify(sp.diff(th.ARCSIN, th.x)), sp.Interval(-1, 1)
        lipschitz = sp.Max(sp.maximum(slope, th.x, interval), -sp.minimum(slope, th.x, interval))
        derived = sp.Tuple(lipschitz, sp.limit(sp.Abs(sp.diff(slope, th.x)), th.x, 1, "-"))
    return compared(c, derived, steps)


def _hinge(c: Claim):
    steps = (
        Step(
            statement=r"$\max(0, 1 - z)$ is $1 - z$ for every $z < 1$ and 0 for every $z > 1$, "
            r"with slopes -1 and 0, and continuous at $z = 1$: 1-Lipschitz, and no smaller "
            r"constant holds (slope -1)",
            method="symbolic identity",
            check=lambda: all(pt.hinge_example().values()),
        ),
    )
    # the largest |slope| of the hinge's pieces, max(0, 1 - z)'s arguments
    derived = sp.Max(*(sp.Abs(sp.diff(piece, th.x)) for piece in th.HINGE.args))
    return compared(c, derived, steps)


def _extends(c: Claim):
    steps = (
        Step(
            statement=r"000's $f(x) = \tfrac12 \arcsin x + \tfrac12 x \sqrt{1 - x^2}$ has "
            r"$f' = \sqrt{1 - x^2}$, so it is 1-Lipschitz on [-1, 1], while "
            r"$f''(x) = -x/\sqrt{1 - x^2} \to -\infty$ as $x \to 1^-$: its derivative is "
            r"not Lipschitz",
            method="symbolic limit",
            check=lambda: all(pt.arcsin_example().values()),
        ),
    )
    return result(
        c,
        Verdict.FAILS,
        "oo",
        Proof(claim=c.statement_latex, steps=steps),
        witness={"f": sp.sstr(th.ARCSIN), "L": "1", "beta": "oo"},
        notes=(
            "value: the smallest beta of that 1-Lipschitz f; oo: none exists. Lipschitz "
            "continuity bounds the gradient's size, not its rate of change.",
        ),
    )


DECIDERS: dict[str, Callable[[Claim], object]] = {
    "smoothness.hinge_002": _hinge,
    "smoothness.extends_002": _extends,
    "smoothness.square_000": _smoothness,
    "smoothness.arcsin_000": _smoothness,
    "optimizers.algorithm2_update": _algorithm2_update,
    "optimizers.update_bound": _update_bound,
    "optimizers.single_step": _single_step,
    "optimizers.range_default": _range,
    "optimizers.range_099": _range,
    "optimizers.range_095": _range,
    "optimizers.sign_sgd": _sign_sgd,
}


def check_theory(c: Claim):
    """The verdict of a claim about no single module."""
    return DECIDERS[c.id](c)
