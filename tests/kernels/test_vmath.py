"""The error-bounded float64 arithmetic of ``kernels/_vmath.py`` and the fast float32 loops
built on it.

* the constants against their proofs (``proofs/vmath.py``, arb);
* ``exp_bounded`` and ``erfc_bounded`` against mpmath: the bound ``e`` holds for every
  argument within ``ea``;
* ``fma`` rounds once;
* ``decided_float32`` accepts only intervals that round to one float32 (never NaN, inf or
  an interval across zero);
* every bounded ``_fe`` function of the generated activations: ``|v - f(x)| <= e`` against
  mpmath, the derivatives' cancelling branches included;
* the fast float32 loops against the scalar float64 path they replace, bit for bit on a
  sweep over the float32 range: where the two differ, the fast one is the correctly
  rounded value; the mixed float16 loops the same, over every half input (forward and
  derivative) and 2^20 random (x, g) pairs (VJP).
"""

from __future__ import annotations

import importlib
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from flint import arb
from hypothesis import example, given
from hypothesis import strategies as st
from numba import njit

from derive.codegen import generate
from derive.definitions.activations import ELEMENTWISE, elementwise
from derive.reference.core import evaluate, round_to_dtype
from kernels import _vmath
from kernels._f16 import float64_to_half_bits, half_bits_to_float64
from kernels._vmath import decided_float32, erfc_bounded, exp_bounded, fma
from proofs import vmath as proof

BOUNDED = [m.key for m in ELEMENTWISE if generate.bounded(m)]


@njit
def _exp_pairs(a, ea):
    v = np.empty(a.size)
    e = np.empty(a.size)
    for i in range(a.size):
        v[i], e[i] = exp_bounded(a[i], ea[i])
    return v, e


@njit
def _fma(a, b, c):
    return fma(a, b, c)


@njit
def _decided(v, e):
    return decided_float32(v, e)


def test_constants_are_proven():
    assert proof.exp_bound_proven()
    # the coefficients are the float64 values nearest 1/i!
    for i, c in enumerate(_vmath.EXP_COEFFICIENTS):
        with mpmath.workprec(53):
            assert c == float(+(1 / mpmath.factorial(mpmath.mpf(i))))


def test_erfc_polynomials_are_proven():
    assert proof.erfc_bound_proven()


def test_erfc_proof_would_catch_a_bad_coefficient(monkeypatch):
    """The Taylor-model proof is not vacuous: a coefficient off by 2^-40 breaks it."""
    table = _vmath.ERFC_TABLE.copy()
    table[20, 3] += 2.0**-40
    monkeypatch.setattr(proof.erfc_table, "ERFC_TABLE", table)
    assert not proof.erfc_interval_error(20) < arb(_vmath.ERFC_REL_ERROR)
    assert proof.erfc_interval_error(21) < arb(_vmath.ERFC_REL_ERROR)


def test_exp_relative_error_would_catch_a_bad_polynomial(monkeypatch):
    """The proof is not vacuous: one degree fewer breaks the stated bound."""
    monkeypatch.setattr(_vmath, "EXP_DEGREE", _vmath.EXP_DEGREE - 1)
    monkeypatch.setattr(_vmath, "EXP_COEFFICIENTS", _vmath.EXP_COEFFICIENTS[:-1])
    assert not proof.exp_bound_proven()


EDGES = [
    0.0,
    -0.0,
    1e-300,
    -1e-300,
    0.5,
    -0.34657359,
    0.34657359,
    88.7,
    -87.3,
    -103.9,
    -708.39,
    -708.4,
    -744.4,
    -745.1,
    -745.13,
    -745.2,
    -745.3,
    -1000.0,
    708.9,
    709.0,
]


@given(
    st.lists(
        st.tuples(
            st.floats(-800, 720, allow_nan=False),
            st.sampled_from([0.0, 2.0**-60, 2.0**-45, 2.0**-20, 2.0**-11]),
        ),
        min_size=1,
        max_size=20,
    )
)
@example([(a, 0.0) for a in EDGES] + [(a, 2.0**-30) for a in EDGES])
def test_exp_bounded_encloses_exp(pairs):
    a = np.array([p[0] for p in pairs])
    ea = np.array([p[1] for p in pairs])
    v, e = _exp_pairs(a, ea)
    for ai, eai, vi, ei in zip(a.tolist(), ea.tolist(), v.tolist(), e.tolist(), strict=True):
        if ai > _vmath.EXP_HIGH:
            assert ei == np.inf
            continue
        assert ei >= 0
        with mpmath.workdps(60):
            for shift in (-eai, 0.0, eai):  # exp is monotone: the ends are the extremes
                exact = mpmath.exp(mpmath.mpf(ai) + mpmath.mpf(shift))
                assert abs(mpmath.mpf(vi) - exact) <= ei, (ai, eai, vi, ei)


@njit
def _erfc_pairs(a, ea):
    v = np.empty(a.size)
    e = np.empty(a.size)
    for i in range(a.size):
        v[i], e[i] = erfc_bounded(a[i], ea[i])
    return v, e


ERFC_EDGES = [
    0.0,
    -0.0,
    0.25,
    0.5,
    -0.5,
    1.0,
    3.0,
    -3.0,
    5.9,
    10.0,
    26.0,
    26.15828,
    26.5,
    27.25,
    27.5,
    27.6,
    40.0,
    -40.0,
    1e4,
    -1e4,
]


@given(
    st.lists(
        st.tuples(
            st.floats(-30, 30, allow_nan=False),
            st.sampled_from([0.0, 2.0**-60, 2.0**-45, 2.0**-20, 2.0**-12]),
        ),
        min_size=1,
        max_size=20,
    )
)
@example([(a, 0.0) for a in ERFC_EDGES] + [(a, 2.0**-30) for a in ERFC_EDGES])
def test_erfc_bounded_encloses_erfc(pairs):
    a = np.array([p[0] for p in pairs])
    ea = np.array([p[1] for p in pairs])
    v, e = _erfc_pairs(a, ea)
    for ai, eai, vi, ei in zip(a.tolist(), ea.tolist(), v.tolist(), e.tolist(), strict=True):
        assert ei >= 0
        with mpmath.workdps(60):
            for shift in (-eai, 0.0, eai):  # erfc is monotone: the ends are the extremes
                exact = mpmath.erfc(mpmath.mpf(ai) + mpmath.mpf(shift))
                assert abs(mpmath.mpf(vi) - exact) <= ei, (ai, eai, vi, ei)
            exact = mpmath.erfc(mpmath.mpf(ai))
            if eai == 0:  # and the bound is useful: 2^-44 relative, or the absolute floor
                assert ei <= 2.0**-44 * exact + 2 * _vmath.TINY, (ai, ei / exact)
    _, e = _erfc_pairs(np.array([np.nan, np.inf, -np.inf]), np.zeros(3))
    assert not np.any(e < np.inf)


def test_exp_bounded_refuses_what_it_cannot_bound():
    a = np.array([np.nan, np.inf, -np.inf, 709.5, 1.0])
    ea = np.array([0.0, 0.0, 0.0, 0.0, 2.0**-9])
    _, e = _exp_pairs(a, ea)
    assert not np.any(e < np.inf)


@given(st.floats(-1e10, 1e10), st.floats(-1e10, 1e10), st.floats(-1e20, 1e20))
@example(1.0 + 2.0**-30, 1.0 - 2.0**-30, -1.0)  # a b + c = -2^-60: lost without the fusion
def test_fma_rounds_once(a, b, c):
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    with mpmath.workprec(53):
        wanted = float(+mpmath.mpf(exact.numerator) / exact.denominator)
    assert _fma(a, b, c) == wanted


def test_decided_float32():
    one = 1.0
    half_ulp = 2.0**-24  # the midpoint between 1 and the next float32 is 1 + 2^-24
    assert _decided(one, 2.0**-40) == (np.float32(1.0), True)
    assert not _decided(one + half_ulp, 0.0)[1]  # on the midpoint: e = 0 is widened
    assert not _decided(one + half_ulp - 2.0**-50, 2.0**-49)[1]  # straddles it
    assert _decided(one + half_ulp - 2.0**-50, 2.0**-53)[1]
    assert not _decided(0.0, 2.0**-1074)[1]  # -0.0 and +0.0: the sign is undecided
    assert _decided(2.0**-160, 2.0**-200)[1]  # rounds to +0.0 from both ends
    for e in (np.nan, np.inf):
        assert not _decided(one, e)[1]
    assert not _decided(np.nan, 0.0)[1]
    assert not _decided(np.inf, 0.0)[1]


def _fe_values(key: str, quantity: str, xs: np.ndarray):
    function = getattr(importlib.import_module(f"kernels._generated.{key}"), f"{quantity}_fe")

    @njit
    def run(xs):
        v = np.empty(xs.size)
        e = np.empty(xs.size)
        for i in range(xs.size):
            v[i], e[i] = function(xs[i])
        return v, e

    return run(xs)


SWEEP = np.concatenate(
    [
        np.linspace(-30, 30, 241),
        -np.geomspace(1e-30, 800, 60),
        np.geomspace(1e-30, 800, 60),
        [-1.2784645427610737, -0.7517916243895319, -2.399357280515467, -1.17, -1.18],
    ]
)


@pytest.mark.parametrize("key", BOUNDED)
@pytest.mark.parametrize("quantity", ["forward", "derivative"])
def test_bounded_functions_enclose_the_exact_value(key, quantity):
    module = elementwise(key)
    expr = module.forward if quantity == "forward" else module.derivative
    v, e = _fe_values(key, quantity, SWEEP)
    decided = 0
    for xi, vi, ei in zip(SWEEP.tolist(), v.tolist(), e.tolist(), strict=True):
        if not ei < np.inf:
            continue
        decided += 1
        exact = evaluate(expr, xi)
        with mpmath.workdps(60):
            assert abs(mpmath.mpf(vi) - exact) <= ei, (key, quantity, xi, vi, ei)
            if abs(exact) > 1e-300:  # the bound is tight enough to be useful
                assert ei <= 2.0**-40 * max(abs(exact), 0.01) or abs(xi) > 20, (xi, ei)
    assert decided >= len(SWEEP) - 4


@njit
def _scalar_loop(function, xs):
    """The scalar float64 path every float32 element took before the fast loops."""
    out = np.empty(xs.size)
    for i in range(xs.size):
        out[i] = function(xs[i])
    return out


def _float32_sweep(step: int) -> np.ndarray:
    """Every ``step``-th float32 bit pattern (both signs), finite ones only."""
    bits = np.arange(0, 1 << 32, step, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    return values[np.isfinite(values)]


@pytest.mark.parametrize("key", BOUNDED)
def test_fast_float32_loops_agree_with_the_scalar_path(key):
    generated = importlib.import_module(f"kernels._generated.{key}")
    xs = _float32_sweep(4099)
    g = np.random.default_rng(7).standard_normal(xs.size).astype(np.float32) * 100
    wide = xs.astype(np.float64)
    for quantity in ("forward", "derivative", "vjp"):
        fast = np.empty_like(xs)
        if quantity == "vjp":
            generated.vjp_f32_loop(xs, g, fast)
            slow = (g * _scalar_loop(generated.derivative_f64, wide)).astype(np.float32)
        else:
            getattr(generated, f"{quantity}_f32_loop")(xs, fast)
            slow = _scalar_loop(getattr(generated, f"{quantity}_f64"), wide).astype(np.float32)
        # They differ where the scalar path rounds a float64 value that sits on (or a few
        # float64 steps off) a float32 midpoint the wrong way: the tiny x where
        # f(x) = x/2 + c2 x^2 evaluates to x/2, a subnormal midpoint, which the fast path
        # settles by the Taylor term (``{q}_offset``); elsewhere they agree but at one or
        # two inputs.
        differ = np.flatnonzero(fast.view(np.uint32) != slow.view(np.uint32))
        subnormal = np.abs(slow[differ]) <= np.finfo(np.float32).smallest_normal
        assert np.count_nonzero(~subnormal) <= 2, (key, quantity, xs[differ][~subnormal][:10])
        module = elementwise(key)
        expr = module.derivative if quantity != "forward" else module.forward
        for i in differ:  # the fast path is the correctly rounded one
            exact = evaluate(expr, float(xs[i]))
            if quantity == "vjp":
                exact *= mpmath.mpf(float(g[i]))
            assert fast[i] == round_to_dtype(exact, np.float32), (key, quantity, xs[i])


@njit
def _scalar_half_loop(function, bits):
    """The scalar path every mixed float16 element took before the fast loops."""
    out = np.empty(bits.size, dtype=np.uint16)
    for i in range(bits.size):
        out[i] = float64_to_half_bits(function(half_bits_to_float64(bits[i])))
    return out


@pytest.mark.parametrize("key", BOUNDED)
def test_fast_float16_loops_agree_with_the_scalar_path(key):
    """Every half input for forward and derivative, 2^20 random (x, g) pairs for the VJP."""
    generated = importlib.import_module(f"kernels._generated.{key}")
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    for quantity in ("forward", "derivative"):
        fast = np.empty_like(bits)
        getattr(generated, f"{quantity}_f16_loop")(bits, fast)
        slow = _scalar_half_loop(getattr(generated, f"{quantity}_f64"), bits)
        assert np.array_equal(fast, slow), (key, quantity, bits[fast != slow][:10])
    rng = np.random.default_rng(11)
    xs = rng.integers(0, 1 << 16, 1 << 20).astype(np.uint16)
    gs = rng.integers(0, 1 << 16, 1 << 20).astype(np.uint16)
    fast = np.empty_like(xs)
    generated.vjp_f16_loop(xs, gs, fast)
    slopes = _scalar_loop(generated.derivative_f64, xs.view(np.float16).astype(np.float64))
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 and the overflow to inf
        products = gs.view(np.float16).astype(np.float64) * slopes
        slow = products.astype(np.float16).view(np.uint16)  # NumPy rounds float64 once
    same = (fast == slow) | (np.isnan(fast.view(np.float16)) & np.isnan(slow.view(np.float16)))
    assert same.all(), (key, xs[~same][:5], gs[~same][:5])
