"""kernels.optim: one Adam/AdamW (and SGD) step against an exact reference, with an error
budget derived from the number of roundings; the size bound of the ``optimizers`` topic
reached at its extremal gradients; and PyTorch's optimizers, within a derived budget.

The budget (:class:`Bounded`): running error analysis in the standard model. Every value
is carried as its exact value (mpmath at 80 digits, from the exact binary values of the
inputs and hyperparameters) and a bound on the distance of the computed value from it.
An operation on computed operands first propagates their bounds exactly (``|x~ y~ - x y|
<= |x| e_y + |y| e_x + e_x e_y``, and so on) and then adds its own rounding, ``u (|z| + e)
+ tiny`` (``u = 2^-53`` for float64 arithmetic, ``tiny`` the half spacing of the
subnormals). The operations are the ones the kernel's docstring lists, in its order; the
powers ``beta^t`` by binary exponentiation carry the relative bound ``(1 + u)^(t-1) - 1``
(each squaring doubles the relative error of its operand: ``beta^(2^j)`` carries ``2^j -
1`` roundings, and the products over the set bits add theirs). Nothing is fitted to the
observed errors. A float32 or float16 output is then one rounding of the float64 value:
it must equal the format's rounding of some real within the bound of the exact value.

PyTorch (``torch.optim.Adam``/``AdamW`` with ``foreach=False``) computes float32 tensors
in float32 (its scalars rounded to float32 where a tensor operation takes them) and its
bias corrections with Python's ``beta ** step`` (libm ``pow``; glibc documents an error
below 1 ulp, the one assumption here). Its budget is the same analysis of its operation
sequence (``lerp_``, ``mul_``/``addcmul_``, ``sqrt``, ``/``, ``add_``, ``addcdiv_``). The
two results are not bit for bit the same: the kernel rounds once from float64 where
PyTorch rounds every operation (in float64 too, a different order: ``lerp`` against
``beta1 m + (1 - beta1) g``, ``pow`` against binary exponentiation); they differ by at
most the sum of the two budgets, which is what is checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import example, given
from hypothesis import strategies as st

from derive.definitions import theory as th
from kernels import optim

DIGITS = 80
FLOAT64 = np.dtype(np.float64)
#: Unit roundoff and half the smallest subnormal spacing of each arithmetic.
UNIT = {
    np.dtype(np.float64): (mpmath.mpf(2) ** -53, mpmath.mpf(2) ** -1075),
    np.dtype(np.float32): (mpmath.mpf(2) ** -24, mpmath.mpf(2) ** -150),
}
#: Output formats: (precision p, smallest exponent of a normal, largest finite value).
FORMATS = {
    np.dtype(np.float64): (53, -1022, float(np.finfo(np.float64).max)),
    np.dtype(np.float32): (24, -126, float(np.finfo(np.float32).max)),
    np.dtype(np.float16): (11, -14, 65504.0),
    np.dtype(ml_dtypes.bfloat16): (8, -126, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)),
}
BFLOAT16 = ml_dtypes.bfloat16
DTYPES = [np.float64, np.float32, np.float16, BFLOAT16]


def exact(x: float) -> mpmath.mpf:
    """The exact value of a binary float (float16/32/64 are all exact in mpf)."""
    return mpmath.mpf(float(x))


@dataclass(frozen=True)
class Bounded:
    """A computed value's exact counterpart and a bound on their distance."""

    value: mpmath.mpf
    err: mpmath.mpf
    arithmetic: np.dtype = FLOAT64

    @classmethod
    def of(cls, x: float, arithmetic=FLOAT64) -> Bounded:
        return cls(exact(x), mpmath.mpf(0), np.dtype(arithmetic))

    def _rounded(self, value: mpmath.mpf, err: mpmath.mpf) -> Bounded:
        unit, tiny = UNIT[self.arithmetic]
        return Bounded(value, err + unit * (abs(value) + err) + tiny, self.arithmetic)

    def _other(self, other) -> Bounded:
        return other if isinstance(other, Bounded) else Bounded.of(other, self.arithmetic)

    def __add__(self, other) -> Bounded:
        other = self._other(other)
        return self._rounded(self.value + other.value, self.err + other.err)

    def __sub__(self, other) -> Bounded:
        other = self._other(other)
        return self._rounded(self.value - other.value, self.err + other.err)

    def __mul__(self, other) -> Bounded:
        other = self._other(other)
        err = abs(self.value) * other.err + abs(other.value) * self.err + self.err * other.err
        return self._rounded(self.value * other.value, err)

    def __truediv__(self, other) -> Bounded:
        other = self._other(other)
        if abs(other.value) <= other.err:
            raise ValueError("a divisor's bound reaches 0: no bound on the quotient")
        quotient = self.value / other.value
        err = (self.err + abs(quotient) * other.err) / (abs(other.value) - other.err)
        return self._rounded(quotient, err)

    def sqrt(self) -> Bounded:
        root = mpmath.sqrt(self.value)
        err = mpmath.sqrt(self.err) if root == 0 else min(self.err / root, mpmath.sqrt(self.err))
        return self._rounded(root, err)

    def to(self, arithmetic) -> Bounded:
        """Converted (rounded once) to another arithmetic's format."""
        return Bounded(self.value, self.err, np.dtype(arithmetic))._rounded(self.value, self.err)


def binary_power(beta: float, t: int) -> Bounded:
    """``beta^t`` computed by binary exponentiation in float64: relative bound
    ``(1 + u)^(t - 1) - 1`` (see the module docstring)."""
    unit, tiny = UNIT[np.dtype(np.float64)]
    value = exact(beta) ** t
    return Bounded(value, value * ((1 + unit) ** (t - 1) - 1) + t * tiny)


def libm_power(beta: float, t: int, arithmetic=FLOAT64) -> Bounded:
    """Python's ``beta ** t``: within 1 ulp (2u relative) of the exact power (glibc's
    documented bound)."""
    unit, tiny = UNIT[np.dtype(np.float64)]
    value = exact(beta) ** t
    return Bounded(value, 2 * unit * value + tiny, np.dtype(arithmetic))


@dataclass(frozen=True)
class Hyper:
    step: int
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled: bool = False

    def kwargs(self) -> dict:
        return dict(self.__dict__)


def kernel_bound(p, g, m, v, h: Hyper) -> tuple[Bounded, Bounded, Bounded]:
    """The kernel's float64 computation of ``(p', m', v')``, as its docstring lists it."""
    one = Bounded.of(1.0)
    c1, c2 = one - h.beta1, one - h.beta2
    correction1 = one - binary_power(h.beta1, h.step)
    correction2 = (one - binary_power(h.beta2, h.step)).sqrt()
    step_size = Bounded.of(h.lr) / correction1
    p, g, m, v = (Bounded.of(a) for a in (p, g, m, v))
    if h.weight_decay != 0 and not h.decoupled:
        g = g + Bounded.of(h.weight_decay) * p
    m_new = Bounded.of(h.beta1) * m + c1 * g
    v_new = Bounded.of(h.beta2) * v + c2 * g * g
    denominator = v_new.sqrt() / correction2 + h.eps
    update = step_size * m_new / denominator
    if h.decoupled:
        p = p * (one - Bounded.of(h.lr) * h.weight_decay)
    return p - update, m_new, v_new


def torch_bound(p, g, m, v, h: Hyper, dtype) -> tuple[Bounded, Bounded, Bounded]:
    """PyTorch's ``_single_tensor_adam`` on tensors of ``dtype`` (scalars: float64 Python
    arithmetic, rounded to ``dtype`` where a tensor operation takes them)."""
    dtype = np.dtype(dtype)

    def scalar(x) -> Bounded:  # a float64 Python scalar entering a tensor operation
        return (x if isinstance(x, Bounded) else Bounded.of(x)).to(dtype)

    one = Bounded.of(1.0)
    p, g, m, v = (Bounded.of(a, dtype) for a in (p, g, m, v))
    if h.weight_decay != 0:
        if h.decoupled:
            p = p * scalar(one - Bounded.of(h.lr) * h.weight_decay)
        else:
            g = g + p * scalar(h.weight_decay)
    weight = scalar(one - h.beta1)
    if weight.value < 0.5:
        m_new = m + weight * (g - m)
    else:
        m_new = g - (g - m) * (Bounded.of(1.0, dtype) - weight)
    v_new = v * scalar(h.beta2) + scalar(one - h.beta2) * g * g
    correction1 = one - libm_power(h.beta1, h.step)
    correction2 = one - libm_power(h.beta2, h.step)
    step_size = Bounded.of(h.lr) / correction1
    root2 = Bounded(correction2.value, correction2.err).sqrt()
    root2 = Bounded(root2.value, root2.err + 2 * UNIT[np.dtype(np.float64)][0] * root2.value)
    denominator = v_new.sqrt() / scalar(root2) + scalar(h.eps)
    minus_step = scalar(Bounded(-step_size.value, step_size.err))
    return p + minus_step * m_new / denominator, m_new, v_new


def _fraction(x: mpmath.mpf) -> Fraction:
    """The exact value of an mpf (``man_exp`` gives the magnitude's mantissa)."""
    mantissa, exponent = mpmath.mpf(x).man_exp
    magnitude = Fraction(int(mantissa)) * Fraction(2) ** int(exponent)
    return -magnitude if x < 0 else magnitude


def round_to(x: mpmath.mpf, dtype) -> float:
    """``x`` rounded to nearest even in ``dtype`` (subnormals and overflow included), as a
    float."""
    precision, emin, largest = FORMATS[np.dtype(dtype)]
    exact_value = _fraction(x)
    if exact_value == 0:
        return 0.0
    magnitude = abs(exact_value)
    exponent = max(math.floor(mpmath.log(abs(x), 2)), emin)
    while Fraction(2) ** exponent > magnitude and exponent > emin:
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= magnitude:
        exponent += 1
    quantum = Fraction(2) ** (exponent - precision + 1)
    rounded = round(magnitude / quantum) * quantum
    result = math.inf if rounded > largest else float(rounded)
    return result if exact_value > 0 else -result


def assert_within(actual, bound: Bounded, dtype, what: str) -> None:
    """``actual`` (of ``dtype``) is the rounding to ``dtype`` of a real within the bound
    (float64: the computed value itself is within it)."""
    with mpmath.workdps(DIGITS):
        low, high = bound.value - bound.err, bound.value + bound.err
        if np.dtype(dtype) == np.float64:
            ok = low <= exact(actual) <= high
        else:
            ok = round_to(low, dtype) <= float(actual) <= round_to(high, dtype)
        assert ok, f"{what}: {float(actual)!r} outside [{low}, {high}] (exact {bound.value})"


# --- the inputs: random elements and the extremal ones ------------------------------------


def _elements(dtype, rng) -> list[tuple[float, float, float, float]]:
    """(p, g, m, v): a few hundred random elements (magnitudes across many binades, v
    consistent with being an average of squares or not) and the extremal ones."""
    dtype = np.dtype(dtype)
    large = {np.float64: 1e150, np.float32: 1e30, np.float16: 6e4, BFLOAT16: 1e30}[dtype.type]
    info = ml_dtypes.finfo(dtype)
    tiny = float(info.smallest_subnormal)
    rows = []
    for _ in range(300):
        scale = 10.0 ** rng.uniform(-6, 4)
        p, g, m = rng.standard_normal(3) * scale
        v = abs(rng.standard_normal()) * scale**2 * rng.choice([0.0, 1e-3, 1.0, 10.0])
        limit = float(info.max) / 10  # inputs in range; outputs may overflow
        rows.append(tuple(np.clip((p, g, m, v), -limit, limit)))
    rows += [
        (1.0, 0.0, 0.0, 0.0),  # g = 0 at t = 1: update 0 over eps
        (1.0, 0.0, 0.5, 1e-12),  # g = 0, momentum left
        (-2.0, large, 0.0, 0.0),  # huge gradient
        (0.5, -large, large / 10, min(large * large / 1e3, float(info.max) / 10)),
        (1.0, 1.0, 0.0, tiny),  # tiny v
        (tiny, tiny, tiny, tiny),  # subnormals everywhere
        (0.0, 1e-3, -1e-3, 1e-6),  # cancelling momentum
    ]
    return [tuple(float(dtype.type(x)) for x in row) for row in rows]


HYPERS = (
    Hyper(step=1),
    Hyper(step=1, lr=0.1, weight_decay=0.1),
    Hyper(step=7, lr=3e-4, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.01, decoupled=True),
    Hyper(step=1000, lr=1e-2, beta1=0.3, beta2=0.95, weight_decay=0.5),
    Hyper(step=12345, lr=1.0, beta1=0.0, beta2=0.0, eps=1e-3, weight_decay=0.2, decoupled=True),
)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", HYPERS, ids=lambda h: f"t{h.step}-wd{h.weight_decay}-{h.decoupled}")
def test_one_step_against_the_exact_reference(dtype, h):
    """Every output within the derived budget of the exact step (mpmath, exact inputs)."""
    rng = np.random.default_rng(h.step)
    rows = _elements(dtype, rng)
    p, g, m, v = (np.array(column, dtype) for column in zip(*rows, strict=True))
    outputs = optim.adam(p, g, m, v, **h.kwargs())
    assert all(o.dtype == np.dtype(dtype) and o.shape == p.shape for o in outputs)
    with mpmath.workdps(DIGITS):
        for i, row in enumerate(rows):
            bounds = kernel_bound(*row, h)
            for name, out, bound in zip(("p'", "m'", "v'"), outputs, bounds, strict=True):
                assert_within(out[i], bound, dtype, f"{name} at {i} {row}")


_FINITE = st.floats(-1e100, 1e100, allow_subnormal=True)


@given(
    p=_FINITE,
    g=_FINITE,
    m=_FINITE,
    v=st.floats(0, 1e200, allow_subnormal=True),
    step=st.integers(1, 10**4),
    lr=st.floats(0, 10),
    beta1=st.floats(0, 0.9999),
    beta2=st.floats(0, 0.9999),
    eps=st.floats(1e-12, 1),
    weight_decay=st.floats(0, 1),
    decoupled=st.booleans(),
    dtype=st.sampled_from(DTYPES),
)
@example(1.0, 0.0, 0.0, 0.0, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, False, np.float64)  # g = 0, t = 1
@example(-2.0, 1e100, 0.0, 0.0, 1, 1e-3, 0.9, 0.999, 1e-8, 0.1, True, np.float64)  # huge g
@example(1.0, 1.0, 0.5, 5e-324, 3, 0.1, 0.9, 0.999, 1e-12, 0.0, False, np.float64)  # tiny v
@example(1.0, 65504.0, 0.0, 0.0, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, False, np.float16)
def test_any_step_against_the_exact_reference(
    p, g, m, v, step, lr, beta1, beta2, eps, weight_decay, decoupled, dtype
):
    """Hypothesis over every argument: one element, the budget of the exact step."""
    limit = float(ml_dtypes.finfo(dtype).max) / 10
    row = tuple(float(np.array(np.clip(x, -limit, limit)).astype(dtype)) for x in (p, g, m, v))
    h = Hyper(step, lr, beta1, beta2, eps, weight_decay, decoupled)
    outputs = optim.adam(*(np.array([x], dtype) for x in row), **h.kwargs())
    with mpmath.workdps(DIGITS):
        for name, out, bound in zip(
            ("p'", "m'", "v'"), outputs, kernel_bound(*row, h), strict=True
        ):
            assert_within(out[0], bound, dtype, f"{name} {row} {h}")


def test_float16_state_overflows_exactly_when_its_value_does():
    """v' = (1 - beta2) g^2 in float16: 8096^2/1000 = 65544.2 rounds to inf, 8000^2/1000 =
    64000 does not; p' stays finite (the float64 arithmetic never overflows)."""
    g = np.array([8096.0, 8000.0], np.float16)
    zeros = np.zeros(2, np.float16)
    p, m, v = optim.adam(np.ones(2, np.float16), g, zeros, zeros, step=1)
    assert np.isinf(v[0]) and v[1] == np.float16(64000.0)
    assert np.all(np.isfinite(p)) and np.all(np.isfinite(m))


def test_float64_overflow_of_v_and_zero_over_zero_follow_ieee():
    """A float64 gradient past ~4e155 makes v' = inf itself (as in PyTorch) and then p' = p;
    eps = 0 with m' = v' = 0 is 0/0 = NaN (as in PyTorch)."""
    p, _, v = optim.adam(np.array([1.0]), np.array([1e160]), np.zeros(1), np.zeros(1), step=1)
    assert np.isinf(v[0]) and p[0] == 1.0
    p, _, _ = optim.adam(np.ones(1), np.zeros(1), np.zeros(1), np.zeros(1), step=1, eps=0.0)
    assert np.isnan(p[0])
    for dtype in DTYPES:
        zeros = np.zeros(1, dtype)
        p, m, v = optim.adam(np.ones(1, dtype), np.full(1, np.inf, dtype), zeros, zeros, step=1)
        assert np.isnan(p[0]) and np.isinf(m[0]) and np.isinf(v[0]), dtype


def test_inputs_are_not_written_and_bad_input_is_refused():
    p, g = np.ones(3), np.full(3, 0.5)
    m, v = np.zeros(3), np.zeros(3)
    copies = [a.copy() for a in (p, g, m, v)]
    optim.adamw(p, g, m, v, step=2)
    assert all(np.array_equal(a, b) for a, b in zip((p, g, m, v), copies, strict=True))
    with pytest.raises(ValueError, match="beta2"):
        optim.adam(p, g, m, v, step=1, beta2=1.0)
    with pytest.raises(ValueError, match="step"):
        optim.adam(p, g, m, v, step=0)
    with pytest.raises(TypeError, match="exp_avg"):
        optim.adam(p, g, m.astype(np.float32), v, step=1)
    with pytest.raises(ValueError, match="grad"):
        optim.adam(p, g[:2], m, v, step=1)
    with pytest.raises(TypeError, match="param"):
        optim.adam(p.astype(int), g, m, v, step=1)


# --- (b) the size bound of the optimizers topic, reached ----------------------------------


def _chain_bound(t: int, beta1: float, beta2: float) -> mpmath.mpf:
    """Relative bound on the kernel's update at step t after t steps from zero state with
    positive gradients (no cancellation): m carries 4 roundings a step (c1, two products,
    the sum), v 5 (c2, three products, the sum), the rest once: sqrt (v's bound halved),
    the quotient by sqrt(1 - beta2^t), s m, the quotient; the corrections their own."""
    unit = UNIT[np.dtype(np.float64)][0]
    relative = []
    for beta in (beta1, beta2):
        power = binary_power(beta, t)
        correction = 1 - power.value
        relative.append(((power.err + unit) / correction) * (1 + unit))
    # per step: m 4, v 5 (sqrt halves v's); once: sqrt(v), sqrt(1 - beta2^t), the quotient
    # by it, lr/(1 - beta1^t), s m, the quotient by the denominator (eps = 0 adds exactly)
    growth = (1 + unit) ** (4 * t + mpmath.mpf(5 * t) / 2 + 6)
    return growth * (1 + relative[0]) / (1 - relative[0]) * (1 + relative[1]) - 1


@pytest.mark.parametrize(
    ("beta1", "beta2", "t"), [(0.9, 0.999, 30), (0.9, 0.95, 12), (0.5, 0.9, 5)]
)
def test_the_largest_update_is_reached_at_the_extremal_gradients(beta1, beta2, t):
    """``|p' - p| <= lr |mu_t| sqrt(1 - beta2^t)/(1 - beta1^t)`` with ``sup |mu_t| =
    (1 - beta1)/sqrt(1 - beta2) sqrt(sum_{k<t} (beta1^2/beta2)^k)`` (proofs/theory.py);
    the kernel (eps = 0, p = 0 at the last step, so p' is minus the update itself) reaches
    it at ``g_i = (beta1/beta2)^(t-i)`` within the chained rounding bound, and 200 random
    sequences stay below it."""
    with mpmath.workdps(DIGITS):
        b1, b2 = exact(beta1), exact(beta2)
        exact_betas = (sp.Rational(beta1), sp.Rational(beta2))  # the floats' exact values
        supremum = mpmath.mpf(str(sp.N(th.largest_update(t, *exact_betas).doit(), DIGITS)))
        bound = supremum * mpmath.sqrt(1 - b2**t) / (1 - b1**t)
        slack = _chain_bound(t, beta1, beta2) + 4 * UNIT[np.dtype(np.float64)][0] * t

        def last_update(gradients) -> float:
            p, m, v = np.zeros(1), np.zeros(1), np.zeros(1)
            for step, gradient in enumerate(gradients, start=1):
                p, m, v = optim.adam(
                    np.zeros(1),
                    np.array([gradient]),
                    m,
                    v,
                    step=step,
                    lr=1.0,
                    beta1=beta1,
                    beta2=beta2,
                    eps=0.0,
                )
            return abs(float(p[0]))

        extremal = [(beta1 / beta2) ** (t - i) for i in range(1, t + 1)]
        reached = exact(last_update(extremal))
        assert abs(reached / bound - 1) <= slack, (reached, bound, slack)
        rng = np.random.default_rng(t)
        for _ in range(200):
            gradients = rng.standard_normal(t) * 10.0 ** rng.uniform(-3, 3)
            # with signs mixed, m's error is relative to the average of |g|, whose mu is
            # below the supremum too: one more factor (1 + u)^(4t)
            unit = UNIT[np.dtype(np.float64)][0]
            assert exact(last_update(gradients)) <= bound * (1 + slack) * (1 + unit) ** (4 * t)


# --- SGD -----------------------------------------------------------------------------------


def sgd_bound(p, g, b, lr, momentum, dampening, weight_decay, first, *, fused=False):
    """``(p', b')`` of one SGD step as the kernel computes it in float64 (``fused``:
    PyTorch's ``add_(x, alpha=a)``, possibly one fused multiply-add: the bound of the
    unfused product and sum covers it)."""
    p, g, b = (Bounded.of(a) for a in (p, g, b))
    if weight_decay:
        g = g + Bounded.of(weight_decay) * p
    damped = Bounded.of(1.0) - dampening
    b_new = g if first else Bounded.of(momentum) * b + damped * g
    return p - Bounded.of(lr) * b_new, b_new


@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_steps_against_the_exact_reference(dtype):
    """004's momentum through sgd(lr = eta (1 - gamma), momentum = gamma) (claim
    momentum.definition_004), five steps, and PyTorch-style decay and dampening: every step
    within the derived budget of the exact step from the kernel's own state."""
    rng = np.random.default_rng(2)
    eta, gamma = 0.1, 0.9
    cases = (
        dict(lr=eta * (1 - gamma), momentum=gamma, dampening=0.0, weight_decay=0.0),
        dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
    )
    for case in cases:
        p, b = np.array(rng.standard_normal(100), dtype), np.zeros(100, dtype)
        for step in range(5):
            g = np.array(rng.standard_normal(100) * 10.0 ** rng.uniform(-3, 3, 100), dtype)
            p_new, b_new = optim.sgd(p, g, b, first=step == 0, **case)
            with mpmath.workdps(DIGITS):
                for i in range(100):
                    bounds = sgd_bound(p[i], g[i], b[i], first=step == 0, **case)
                    for name, out, bound in zip(("p'", "b'"), (p_new, b_new), bounds, strict=True):
                        assert_within(out[i], bound, dtype, f"{name} step {step} at {i}")
            p, b = p_new, b_new


def test_sgd_against_torch_within_the_two_budgets():
    """PyTorch's SGD in float64 (``mul_``, ``add_`` with alpha, which ATen may fuse) against
    the kernel from the same state: within the sum of the two derived budgets."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    case = dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)
    p0 = rng.standard_normal(300)
    tp = torch.tensor(p0.copy(), requires_grad=True)
    opt = torch.optim.SGD([tp], foreach=False, **case)
    p, b = p0.copy(), np.zeros(300)
    for step in range(4):
        g = rng.standard_normal(300)
        tp.grad = torch.tensor(g)
        opt.step()
        theirs = (tp.detach().numpy().copy(), opt.state[tp]["momentum_buffer"].numpy().copy())
        ours = optim.sgd(p, g, b, first=step == 0, **case)
        with mpmath.workdps(DIGITS):
            for i in range(300):
                kb = sgd_bound(p[i], g[i], b[i], first=step == 0, **case)
                tb = sgd_bound(p[i], g[i], b[i], first=step == 0, fused=True, **case)
                for k in range(2):
                    gap = abs(exact(ours[k][i]) - exact(theirs[k][i]))
                    assert gap <= kb[k].err + tb[k].err, (step, i, k, gap)
        p, b = theirs


# --- (c) PyTorch ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("decoupled", [False, True])
def test_adam_against_torch_within_the_two_budgets(dtype, decoupled):
    """Several steps of torch.optim.Adam/AdamW; at each step the kernel starts from
    PyTorch's state, and every output differs from PyTorch's by at most the kernel's budget
    plus PyTorch's (both derived above; for float32 the kernel's includes its final
    rounding)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    n = 200
    h = Hyper(step=1, lr=1e-2, weight_decay=0.1, decoupled=decoupled)
    p0 = rng.standard_normal(n).astype(dtype)
    tp = torch.tensor(p0.copy(), requires_grad=True)
    kind = torch.optim.AdamW if decoupled else torch.optim.Adam
    opt = kind([tp], lr=h.lr, weight_decay=h.weight_decay, foreach=False)
    p, m, v = p0.copy(), np.zeros(n, dtype), np.zeros(n, dtype)
    for step in range(1, 5):
        g = (rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n)).astype(dtype)
        tp.grad = torch.tensor(g)
        opt.step()
        state = opt.state[tp]
        theirs = (tp.detach().numpy(), state["exp_avg"].numpy(), state["exp_avg_sq"].numpy())
        hs = Hyper(**{**h.kwargs(), "step": step})
        ours = optim.adam(p, g, m, v, **hs.kwargs())
        with mpmath.workdps(DIGITS):
            for i in range(n):
                row = (p[i], g[i], m[i], v[i])
                for k, (kb, tb) in enumerate(
                    zip(kernel_bound(*row, hs), torch_bound(*row, hs, dtype), strict=True)
                ):
                    final = UNIT[np.dtype(dtype)][0] * (abs(kb.value) + kb.err)
                    extra = final if np.dtype(dtype) != np.float64 else 0
                    gap = abs(exact(ours[k][i]) - exact(theirs[k][i]))
                    assert gap <= kb.err + tb.err + extra + UNIT[np.dtype(dtype)][1] * 2, (
                        step,
                        i,
                        k,
                        gap,
                        kb.err,
                        tb.err,
                    )
        p, m, v = (np.array(a, dtype) for a in theirs)
