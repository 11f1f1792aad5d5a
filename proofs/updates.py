"""Proofs of the optimizer statements (``derive/definitions/updates.py``).

Statements about every number of steps are proven for a symbolic count: a closed form by
SymPy's sum of the geometric series, or an induction whose base case is checked exactly and
whose step is an identity in a symbolic previous state (the state after ``t - 1`` steps is a
free symbol, so the step covers every ``t``). A sum over ``1..T`` is split into its last term
and the sum over ``1..T - 1`` (:func:`peeled`), and two sums over one range are equal when
their summands are (linearity). Witnesses are exact rationals or algebraic numbers; the
binary16 statements are decided over all 65,536 bit patterns exactly (``fractions``).
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from functools import cache

import numpy as np
import sympy as sp

from derive.definitions import updates as up
from proofs.core import is_zero

__all__ = [
    "ADADELTA_POINT",
    "accumulated",
    "adadelta_ratio",
    "adagrad_step_limit",
    "adam_v_witness",
    "closed_form_recurs",
    "coupled_decay_witness",
    "dampened_first_step",
    "eq38_cases",
    "expected_fraction",
    "momentum_iterates",
    "printed_b33",
    "rounds_to",
    "scaling_degree",
    "step_at",
    "torch_momentum_induction",
    "varying_schedule_witness",
    "weights_total",
]


def coefficients(expr: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    """``(old, new)``: the weights of the previous state and the new gradient in a linear
    update ``expr`` (its partial derivatives)."""
    return sp.diff(expr, up.prev), sp.diff(expr, up.g)


def torch_momentum_induction(update: sp.Expr = up.RUNNING_AVERAGE) -> bool:
    """PyTorch SGD's buffer with ``momentum = old``, ``dampening = 0`` is ``M_t / new``
    for every t, ``(old, new)`` the weights of ``update``: base ``b_1 = g_1 = M_1/new``
    (``M_0 = 0``) and the step for a symbolic ``M_{t-1}``: ``old (M_{t-1}/new) + g_t =
    update / new``."""
    old, new = coefficients(update)
    base = is_zero(update.subs(up.prev, 0) / new - up.g)
    step = old * (up.prev / new) + up.g
    return base and is_zero(step - update / new)


def dampened_first_step() -> tuple[sp.Expr, sp.Expr]:
    """``(b_1, M_1)`` for one gradient g: PyTorch's buffer with ``dampening = gamma`` starts
    at ``g`` (its first step is not dampened), 004's average at ``(1 - gamma) g``."""
    (b1,) = up.torch_sgd_buffers([up.g], up.gamma, up.gamma)
    (m1,) = up.ema([up.g])
    return b1, m1


def _summand(steps: sp.Expr) -> sp.Expr:
    """The weight of ``g_t`` in the average after ``steps`` steps, times ``g_t``."""
    return up.gamma ** (steps - up.t) * (1 - up.gamma) * up.G[up.t]


def closed_form(steps: sp.Expr, start: sp.Expr) -> sp.Expr:
    """``gamma^T A_0 + sum_{t=1}^T gamma^(T-t) (1 - gamma) g_t`` (B.34 with the weight of
    each gradient ``(1 - gamma)``)."""
    return up.gamma**steps * start + sp.Sum(_summand(steps), (up.t, 1, steps))


def peeled(total: sp.Sum) -> tuple[sp.Sum, sp.Expr]:
    """``sum_{t=1}^{T}`` as ``(sum_{t=1}^{T-1}, the term at T)``."""
    (index, low, high), summand = total.limits[0], total.function
    return sp.Sum(summand, (index, low, high - 1)), summand.subs(index, high)


def closed_form_recurs() -> bool:
    """The closed form is the running average for every T: ``C_1 = gamma A_0 + (1 -
    gamma) g_1`` and ``C_T = gamma C_{T-1} + (1 - gamma) g_T`` for a symbolic T: the
    ``A_0`` terms agree, the sum over ``1..T`` peeled into the sum over ``1..T-1`` (compared
    summand by summand with gamma times ``C_{T-1}``'s) and the term ``(1 - gamma) g_T``."""
    a0 = sp.Symbol("A_0", real=True)
    base = is_zero(closed_form(1, a0).doit() - up.ema([up.G[1]], start=a0)[0])
    rest, last = peeled(sp.Sum(_summand(up.T), (up.t, 1, up.T)))
    earlier = sp.Sum(_summand(up.T - 1), (up.t, 1, up.T - 1))
    starts = is_zero(up.gamma**up.T * a0 - up.gamma * up.gamma ** (up.T - 1) * a0)
    sums = rest.limits == earlier.limits and is_zero(rest.function - up.gamma * earlier.function)
    return base and starts and sums and is_zero(last - (1 - up.gamma) * up.G[up.T])


@cache
def weights_total() -> tuple[sp.Expr, sp.Expr]:
    """``(sum_{t=1}^T gamma^(T-t) (1 - gamma), gamma^T)``, the gradients' total weight
    summed for a symbolic T (``1 - gamma^T``), and the weight of ``A_0``."""
    total = sp.Sum(up.gamma ** (up.T - up.t) * (1 - up.gamma), (up.t, 1, up.T)).doit()
    return sp.simplify(total), up.gamma**up.T


def printed_b33(steps: int, rate: sp.Expr, gradients: list) -> tuple[sp.Expr, sp.Expr]:
    """(B.33 as printed, the running average) after ``steps`` steps from ``A_0 = 0``:
    ``sum_{t=0}^T gamma^(T-t) (1 - gamma)^t g_t`` with ``g_0 = A_0``."""
    values = [0, *gradients]
    printed = sum(rate ** (steps - k) * (1 - rate) ** k * values[k] for k in range(steps + 1))
    return sp.nsimplify(printed), sp.nsimplify(up.ema(gradients, rate)[-1])


def expected_fraction(rate: sp.Expr) -> sp.Expr:
    """``E[m_T] / E[g]`` for gradients of one mean (stationary) from ``m_0 = 0``, for a
    symbolic T: ``sum_{t=1}^T (1 - rate) rate^(T-t)`` (linearity of E), summed by SymPy."""
    return sp.simplify(sp.Sum((1 - rate) * rate ** (up.T - up.t), (up.t, 1, up.T)).doit())


def scaling_degree(rule: sp.Expr) -> sp.Expr | None:
    """The k with ``update(c g) = c^k update(g)`` for every c > 0, ``update = rule(G) g`` and
    ``G`` the running average of ``g^2`` (so ``G -> c^2 G``, :func:`second_moment_scales`),
    at ``eps = 0``; ``None`` if the ratio is not a power of c."""
    c = sp.Symbol("c", positive=True)
    avg = sp.Symbol("G", positive=True)
    update = rule.subs({up.eps: 0, up.G_tj: avg}) * up.g
    ratio = sp.simplify(update.subs({avg: c**2 * avg, up.g: c * up.g}, simultaneous=True) / update)
    power = sp.simplify(sp.log(ratio) / sp.log(c)) if ratio != 1 else sp.S.Zero
    return power if power.is_number else None


def second_moment_scales() -> bool:
    """``G_t(c g) = c^2 G_t(g)`` for every t: ``G_0 = 0`` and the step for a symbolic
    ``G_{t-1}``: ``gamma c^2 G_{t-1} + (1 - gamma) (c g_t)^2 = c^2 G_t``."""
    c = sp.Symbol("c", positive=True)
    step = up.gamma * up.prev + (1 - up.gamma) * up.g**2
    scaled = up.gamma * c**2 * up.prev + (1 - up.gamma) * (c * up.g) ** 2
    return is_zero(scaled - c**2 * step)


def accumulated(update: sp.Expr, gradients: list) -> list[sp.Expr]:
    """``G_1 .. G_t`` of ``G_t = update(G_{t-1}, g_t)`` from ``G_0 = 0``."""
    out, total = [], sp.S.Zero
    for x in gradients:
        total = update.subs({up.prev: total, up.g: x})
        out.append(total)
    return out


def adagrad_step_limit(rate: sp.Expr | None) -> sp.Expr:
    """``lim_{t -> oo}`` of the step size ``eta / sqrt(G_t + eps)`` for a constant gradient
    ``g != 0``: ``G_t = t g^2`` (Adagrad, ``rate`` None) gives 0; the running average
    ``G_t = (1 - rate^t) g^2`` gives ``eta / sqrt(g^2 + eps)``. Symbolic t."""
    size = sp.Symbol("g", positive=True)  # |g| (the sign plays no part)
    average = size**2 * up.T if rate is None else (1 - rate**up.T) * size**2
    step = up.eta / sp.sqrt(average + up.eps)
    return sp.limit(step, up.T, sp.oo)


#: Adadelta's witness point: (gamma = rho, eps, the gradients).
ADADELTA_POINT = (sp.Rational(1, 2), sp.S.One, (1, 1))


def adadelta_ratio() -> tuple[sp.Expr, sp.Expr]:
    """(Definition 11, Adadelta): the second step over the first at :data:`ADADELTA_POINT`
    (``gamma = rho = 1/2``, ``eps = 1``, ``g = (1, 1)``): ``sqrt(6/7)`` against
    ``sqrt(8/7)``. A step size (eta, lr) scales both steps alike, so no step size makes the
    two updates agree."""
    rate, eps, gradients = ADADELTA_POINT
    rms = up.rms_steps(list(gradients), rate, eps)
    delta = up.adadelta_steps(list(gradients), rate, eps)
    return sp.nsimplify(sp.radsimp(rms[1] / rms[0])), sp.nsimplify(sp.radsimp(delta[1] / delta[0]))


def adam_v_witness() -> tuple[sp.Expr, sp.Expr]:
    """``v_2`` as Definition 16 prints it and as B.29 (and Adam) has it, at PyTorch's
    betas and ``g = (1, 1)``."""
    betas = (sp.Rational(9, 10), sp.Rational(999, 1000))
    return up.adam_moments([1, 1], *betas, printed16=True)[1], up.adam_moments([1, 1], *betas)[1]


def step_at(point: sp.Expr) -> sp.Expr:
    """``w_1`` of ``w_1 = w_0 - alpha grad L(point)`` for ``L(w) = w^2/2`` (``grad L(w) =
    w``), ``w_0 = 1``, ``alpha = 1``, no momentum and no decay, ``point`` either ``w_t``
    (the new weight, line 3 as printed: an implicit equation, solved) or ``w_prev`` (the
    weight before the step)."""
    (solution,) = sp.solve(sp.Eq(up.w_t, 1 - point.subs(up.w_prev, 1)), up.w_t)
    return solution


def momentum_iterates(point: sp.Expr, steps: int = 2) -> list[sp.Expr]:
    """``w_1 .. w_steps`` of ``v_t = mu v_{t-1} - eps grad f(point)``, ``w_t = w_{t-1} + v_t``
    on ``f(w) = w^2/2`` from ``w_0 = 1``, ``v_0 = 0``, ``mu = 1/2``, a symbolic step eps;
    ``point`` in ``w_prev`` and ``v_prev`` (``w_prev``: heavy ball, Algorithm 1 up to its lr;
    :data:`derive.definitions.updates.NESTEROV_POINT`: Nesterov)."""
    step = sp.Symbol("epsilon_s", positive=True)
    w, v, out = sp.S.One, sp.S.Zero, []
    for _ in range(steps):
        at = point.subs({up.w_prev: w, up.velocity: v, up.mu_m: sp.Rational(1, 2)})
        v = sp.Rational(1, 2) * v - step * at  # grad f(x) = x
        w = sp.expand(w + v)
        out.append(w)
    return out


def coupled_decay_witness() -> tuple[list, list]:
    """Weights of two steps of Algorithm 1 (decoupled decay) and of PyTorch's SGD with its
    coupled ``weight_decay``, from ``w_0 = 1`` with zero gradients, ``alpha = 1``, ``beta =
    1/2``, ``lambda = 1``; PyTorch's ``lr = alpha (1 - beta)`` and its decay chosen to match
    the first step (2)."""
    beta, alpha, decay = sp.Rational(1, 2), sp.S.One, sp.S.One
    w, v, ours = sp.S.One, sp.S.Zero, []
    for _ in range(2):
        v = beta * v + (1 - beta) * 0
        w = w - alpha * v - alpha * decay * w
        ours.append(w)
    lr, coupled = alpha * (1 - beta), sp.Integer(2)
    w, buffer, theirs = sp.S.One, None, []
    for _ in range(2):
        gradient = 0 + coupled * w
        buffer = gradient if buffer is None else beta * buffer + gradient
        w = w - lr * buffer
        theirs.append(w)
    return ours, theirs


def varying_schedule_witness() -> tuple[list, list]:
    """The steps of Algorithm 1 (``alpha_t v_t``: the current rate times the average) and of
    Loshchilov and Hutter's SGDW (``m_t = beta m_{t-1} + eta_t alpha g_t``: each gradient
    keeps the rate of its own step) at ``beta = 1/2``, ``g = (1, 0)``, rates ``(1, 1/2)``,
    SGDW's ``alpha`` matched on the first step."""
    beta, rates, gradients = sp.Rational(1, 2), (1, sp.Rational(1, 2)), (1, 0)
    ours = [a * v for a, v in zip(rates, up.ema(gradients, beta), strict=True)]
    scale = ours[0] / (rates[0] * gradients[0])
    m, theirs = sp.S.Zero, []
    for rate, x in zip(rates, gradients, strict=True):
        m = beta * m + rate * scale * x
        theirs.append(m)
    return ours, theirs


def rounds_to(value: sp.Expr, printed: str) -> bool:
    """Whether ``value`` lies in the half-unit interval of the last digit of ``printed``
    (a decimal, or ``mantissa e exponent``), i.e. rounds to it."""
    digits = Decimal(printed)
    half = sp.Rational(1, 2) * sp.Rational(10) ** digits.as_tuple().exponent
    centre = sp.Rational(str(digits))
    return bool(centre - half <= value) and bool(value < centre + half)


def eq38_cases() -> dict[str, list[int]]:
    """Every binary16 bit pattern by exponent field, where Eq. 38 gives the IEEE value and
    where it does not, and where the exact IEEE value differs from NumPy's float16 (none):
    ``{"agree": [...], "differ": [...], "numpy": [...]}``."""
    patterns = np.arange(2**16, dtype=np.uint16)
    decoded = patterns.view(np.float16).astype(np.float64)
    agree, differ, numpy = [], [], []
    for bits in range(2**16):
        ieee = up.binary16_value(bits)
        if ieee is None:
            if np.isfinite(decoded[bits]):
                numpy.append(bits)
            differ.append(bits)
            continue
        if Fraction(float(decoded[bits])) != ieee:
            numpy.append(bits)
        (agree if up.eq38_value(bits) == ieee else differ).append(bits)
    return {"agree": agree, "differ": differ, "numpy": numpy}


# --- Concept 12: sparse coordinates get larger steps --------------------------------------


def sparse_ratio(period: sp.Expr, rate: sp.Expr = up.gamma) -> sp.Expr:
    """``G_dense / G_sparse`` at a step where both coordinates see the gradient g: the
    dense one sees g at every step, the sparse one at every ``period``-th step only (0
    between), both from ``G_0 = 0``; after n periods (symbolic n) the ratio is the same for
    every n: ``sum_{i < period} rate^i``."""
    n, i = sp.Symbol("n", integer=True, positive=True), sp.Symbol("i", integer=True)
    g2 = sp.Symbol("g2", positive=True)
    dense = g2 * (1 - rate ** (n * period))  # the running average of a constant, nk steps
    periods = sp.Sum(rate ** (i * period), (i, 0, n - 1)).doit()
    # 0 < rate < 1, so rate^period != 1: the geometric sum's general branch
    periods = periods.subs(sp.Eq(rate**period, 1), False)
    sparse = (1 - rate) * g2 * periods
    return sp.simplify(sp.factor(dense / sparse))


def sparse_ratio_checks() -> dict[str, bool]:
    """The ratio for a symbolic period k: ``(1 - gamma^k)/(1 - gamma)``, independent of the
    number of periods. It is ``sum_{i<k} gamma^i``, below ``1/(1 - gamma)``, and above 1
    from k = 2 on (``above_one``: the excess is ``gamma (1 - gamma^(k - 1))/(1 - gamma)``, a
    product of positive factors for 0 < gamma < 1). The two recursions, unrolled at k = 3
    over two periods, give the same ratio."""
    k = sp.Symbol("k", integer=True, positive=True)
    i = sp.Symbol("i", integer=True, nonnegative=True)
    ratio = sparse_ratio(k)
    closed = (1 - up.gamma**k) / (1 - up.gamma)
    series = sp.Sum(up.gamma**i, (i, 0, k - 1)).doit().subs(sp.Eq(up.gamma, 1), False)
    dense = up.ema([1] * 6)[-1]
    sparse = up.ema([0, 0, 1, 0, 0, 1])[-1]
    # ratio - 1 = gamma (1 - gamma^(k-1))/(1 - gamma): each factor positive for k >= 2
    above_one = up.gamma * (1 - up.gamma ** (k - 1)) / (1 - up.gamma)
    return {
        "closed": is_zero(ratio - closed),
        "series": is_zero(sp.simplify(series - closed)),
        "above_one": is_zero(sp.simplify(ratio - 1 - above_one)),
        "unrolled": is_zero(sp.simplify(dense / sparse - closed.subs(k, 3))),
    }


def adam_combines_checks() -> dict[str, bool]:
    """B.28 is Definition 7's running average with gamma = B_1, B.29 Definition 11's G with
    gamma = B_2, one step from a symbolic previous state each (so every t, by induction from
    zero starts); so B.30's step ``eta m_t / sqrt(v_t + eps)`` is Definition 11's step size
    applied to momentum's average. Unrolled at t = 1..3, the same for symbolic gradients."""
    m_prev, v_prev = up.m_prev, up.v_prev
    b28 = up.beta1 * m_prev + (1 - up.beta1) * up.g
    b29 = up.beta2 * v_prev + (1 - up.beta2) * up.g**2
    momentum = up.RUNNING_AVERAGE.subs({up.gamma: up.beta1, up.prev: m_prev})
    squares = up.RUNNING_AVERAGE.subs({up.gamma: up.beta2, up.prev: v_prev, up.g: up.g**2})
    gradients = sp.symbols("g1:4", real=True)
    unrolled = True
    for t in (1, 2, 3):
        m, v = up.adam_moments(gradients[:t])
        average = up.ema(gradients[:t], up.beta1)[-1]
        squared = up.ema([x**2 for x in gradients[:t]], up.beta2)[-1]
        step = up.eta / sp.sqrt(squared + up.eps) * average
        unrolled = unrolled and is_zero(up.eta * m / sp.sqrt(v + up.eps) - step)
    return {
        "momentum": is_zero(b28 - momentum),
        "squares": is_zero(b29 - squares),
        "unrolled": unrolled,
    }
