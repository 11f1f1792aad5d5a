"""Proofs of the statements about Adam's update (``derive/definitions/theory.py``).

The size of ``mu_t = m_t / sqrt(v_t)`` from ``m_0 = v_0 = 0``: unrolled,
``m_t = (1 - beta1) sum_i beta1^(t-i) g_i`` and ``v_t = (1 - beta2) sum_i beta2^(t-i) g_i^2``,
so Cauchy-Schwarz with the weights ``beta2^(t-i)`` gives

    |m_t| <= (1 - beta1) sqrt(sum_i beta1^(2(t-i)) / beta2^(t-i)) sqrt(v_t / (1 - beta2)),

that is ``|mu_t| <= (1 - beta1)/sqrt(1 - beta2) sqrt(S_t)`` with ``S_t = sum_{k<t} r^k`` and
``r = beta1^2/beta2``, with equality for ``g_i`` proportional to ``(beta1/beta2)^(t-i)``.
:func:`lagrange_identity` proves the inequality for every length (the Lagrange identity
``(sum x^2)(sum y^2) - (sum x y)^2 = (1/2) sum_i sum_j (x_i y_j - x_j y_i)^2`` for a
symbolic size), :func:`attains` the equality case at concrete lengths.
"""

from __future__ import annotations

from functools import cache

import sympy as sp

from derive.definitions import theory as th
from proofs.core import INDICES, is_zero, sum_identity, total

__all__ = [
    "DEFAULT",
    "algorithm2_witness",
    "arcsin_example",
    "attaining_gradients",
    "attains",
    "default_exceeds",
    "lagrange_identity",
    "limit_of_largest",
    "sign_sgd",
    "single_step_limit",
    "single_step_witness",
    "square_example",
]

#: PyTorch's default (beta1, beta2), exactly.
DEFAULT = (sp.Rational(9, 10), sp.Rational(999, 1000))


def lagrange_identity(factor: int = 1) -> bool:
    """``(sum x_i^2)(sum y_i^2) - (sum x_i y_i)^2 = (1/2) sum_i sum_j (x_i y_j - x_j y_i)^2``
    for a symbolic size: Cauchy-Schwarz for every length. ``factor`` scales the right side
    (a test's false variant)."""
    i, j = INDICES
    x, y = sp.IndexedBase("x", real=True), sp.IndexedBase("y", real=True)
    gap = total(x[i] ** 2, i) * total(y[j] ** 2, j) - total(x[i] * y[i], i) ** 2
    squares = total(total((x[i] * y[j] - x[j] * y[i]) ** 2, j), i)
    return sum_identity(gap, factor * sp.Rational(1, 2) * squares)()


def attaining_gradients(steps: int) -> list[sp.Expr]:
    """``g_i = (beta1/beta2)^(t - i)``, i = 1..t: Cauchy-Schwarz's equality case."""
    return [(th.beta1 / th.beta2) ** (steps - i) for i in range(1, steps + 1)]


def attains(steps: int) -> bool:
    """``mu_t`` at :func:`attaining_gradients` equals :func:`largest_update` (squared, both
    positive), for symbolic beta1, beta2."""
    reached = th.update(attaining_gradients(steps)) ** 2
    bound = th.largest_update(steps).doit() ** 2
    return is_zero(sp.simplify(reached - bound))


def default_exceeds() -> tuple[sp.Expr, sp.Expr]:
    """``(mu_2^2, bound^2)`` at PyTorch's default betas for ``g = (1, 1)``: ``(361/1999 *
    100, 10)``, the first larger."""
    mu = th.update([1, 1], *DEFAULT)
    return sp.nsimplify(mu**2), sp.nsimplify(th.update_bound(*DEFAULT) ** 2)


def limit_of_largest(first: sp.Expr, second: sp.Expr) -> sp.Expr:
    """``sup_t`` of :func:`derive.definitions.theory.largest_update` at the given betas
    (``beta1^2 < beta2``), the limit of its increasing partial sums: ``(1 - beta1)/sqrt(1 -
    beta2) / sqrt(1 - beta1^2/beta2)``, by SymPy's sum of the geometric series."""
    k = sp.Symbol("k", integer=True, nonnegative=True)
    series = sp.Sum((first**2 / second) ** k, (k, 0, sp.oo)).doit()
    return sp.nsimplify(th.update_bound(first, second) * sp.sqrt(series))


def single_step_limit() -> sp.Expr:
    """``lim_{g -> oo} mu_t`` with ``m_{t-1}``, ``v_{t-1}`` fixed: ``(1 - beta1)/sqrt(1 -
    beta2)``."""
    return sp.limit(th.step_update(), th.g, sp.oo)


def single_step_witness() -> tuple[sp.Expr, sp.Expr]:
    """``(mu_t, relative error)`` at the default betas with ``m_{t-1} = 0``, ``v_{t-1} = 1``,
    ``g_t = 1`` (|g_t| >> |m_{t-1}|): ``mu_t = 1/10`` against ``sqrt(10)``."""
    mu = th.step_update(*DEFAULT).subs({th.m_prev: 0, th.v_prev: 1, th.g: 1})
    printed = th.update_bound(*DEFAULT)
    return sp.nsimplify(mu), sp.simplify(abs(mu - printed) / printed)


def single_step_worst() -> sp.Expr:
    """The relative error of the "≈" at the default betas as ``v_{t-1}`` grows
    (``m_{t-1} = 0``, ``g_t = 1``): ``mu_t -> 0``, so the error tends to 1."""
    mu = th.step_update(*DEFAULT).subs({th.m_prev: 0, th.g: 1})
    printed = th.update_bound(*DEFAULT)
    return sp.limit(sp.Abs(mu - printed) / printed, th.v_prev, sp.oo)


def sign_sgd() -> bool:
    """With ``beta1 = beta2 = 0`` the update of one step (``m_{t-1}``, ``v_{t-1}`` play no
    part) is ``sign(g_t)``: +1 for every positive g, -1 for every negative one, both for the
    uncorrected and the corrected form."""
    a = sp.Symbol("a", positive=True)
    zero = sp.S.Zero
    forms = (
        th.step_update(zero, zero),
        th.corrected_update([th.g], zero, zero),
    )
    return all(
        sp.simplify(f.subs(th.g, a)) == 1 and sp.simplify(f.subs(th.g, -a)) == -1 for f in forms
    )


def algorithm2_witness() -> tuple[sp.Expr, sp.Expr]:
    """Algorithm 2's printed ``m_hat_1 / v_hat_1`` and the intended ``m_hat_1 / sqrt(v_hat_1)``
    at t = 1, g_1 = 2: ``(1/2, 1)``. As printed the update is ``1/g``, unbounded as
    ``g -> 0``."""
    m, v = th.moments([2])
    m_hat, v_hat = m / (1 - th.beta1), v / (1 - th.beta2)
    return sp.simplify(m_hat / v_hat), sp.simplify(m_hat / sp.sqrt(v_hat))


def square_example() -> dict[str, bool]:
    """000's f(x) = x^2: its derivative moves by exactly 2 |y - x| (2-smooth), and
    ``sup |f'| = lim_{x -> oo} 2x = oo`` (not Lipschitz on R)."""
    y = sp.Symbol("y", real=True)
    slope = sp.diff(th.SQUARE, th.x)
    return {
        "smooth": is_zero(slope.subs(th.x, y) - slope - 2 * (y - th.x)),
        "not_lipschitz": sp.limit(slope, th.x, sp.oo) == sp.oo,
    }


def arcsin_example() -> dict[str, bool]:
    """000's f(x) = (1/2) arcsin x + (1/2) x sqrt(1 - x^2) on [-1, 1]: ``f'(x) = sqrt(1 -
    x^2)`` (sympy.diff), so ``|f'| <= 1`` with ``f'(0) = 1`` (1-Lipschitz, by the mean value
    theorem on the interval), while ``f''(x) = -x/sqrt(1 - x^2)`` tends to ``-oo`` as x -> 1
    from below (no Lipschitz constant for f': not smooth). Decided once per process (1.4 s
    of SymPy; four proof steps ask)."""
    return dict(_arcsin_facts())


@cache
def _arcsin_facts() -> tuple[tuple[str, bool], ...]:
    slope = sp.diff(th.ARCSIN, th.x)
    curvature = sp.diff(slope, th.x)
    return (
        ("slope", is_zero(sp.simplify(slope - sp.sqrt(1 - th.x**2)))),
        ("bounded", sp.maximum(sp.sqrt(1 - th.x**2), th.x, sp.Interval(-1, 1)) == 1),
        ("not_smooth", sp.limit(curvature, th.x, 1, "-") == -sp.oo),
    )


def hinge_example() -> dict[str, bool]:
    """002's hinge loss ``max(0, 1 - z)``: ``1 - z`` below 1 and 0 above (for every z: at
    ``z = 1 -+ a`` with a symbolic ``a > 0``), slopes -1 and 0, continuous at the kink, so
    1-Lipschitz; the slope -1 means no smaller constant holds."""
    a = sp.Symbol("a", positive=True)
    below, above = 1 - th.x, sp.S.Zero
    return {
        "pieces": th.HINGE.subs(th.x, 1 - a) == below.subs(th.x, 1 - a)
        and th.HINGE.subs(th.x, 1 + a) == above,
        "slopes": sp.diff(below, th.x) == -1 and sp.diff(above, th.x) == 0,
        "continuous": sp.limit(th.HINGE, th.x, 1, "-") == 0 == sp.limit(th.HINGE, th.x, 1, "+"),
    }
