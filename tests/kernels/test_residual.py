"""Residual blocks: ``kernels.residual``, ``kernels.weighted_residual`` and ``kernels.compose``
against the mpmath references of ``derive/reference/residual.py`` (FFN branch, Eq. 26).

Modes: float64, float32, float16 ("mixed") and float16 with ``strict_fp16=True``; blocks:
the residual (``nu`` absent), and the weighted residual with a scalar or per-feature ``nu``.

1. Exact regime (``test_exact_regime``). Integers in [-2, 2] for x, g, W1, b1, W2, b2,
   ``nu`` in {0, +-1/2, +-1, +-2}, D, H <= 3, N <= 2. Then every intermediate quantity is a
   multiple of 1/2 of magnitude below 1024 (|h| <= 14, |f| <= 86, |y| <= 174, |nu g| <= 4,
   |a_bar| <= 24, |dx| <= 146, |dW1| <= 96, |dW2| <= 112, |dnu| <= 1032 and an integer,
   |J| <= 25), so every float16/32/64 operation, strict or not, is exact, and the kernels
   must equal the exact reference bit for bit. ReLU kinks (a pre-activation exactly 0) are
   frequent there, so this checks ``relu'(0) = 0`` through the whole block, and
   ``vjp == J^T g`` exactly.

2. General floats (``test_against_reference_with_derived_bounds``), judged by a derived
   error bound per output element. Why a bound, and not the reference "evaluated on the
   same rounded intermediates": that would assume each stage returns the correct rounding
   of its exact value, which ``kernels.linear`` does not promise (it rounds a float64 value
   within gamma_n S of the exact one, so near a rounding boundary it may pick the other
   neighbour, and every later stage would then differ). The bound needs only each stage's
   documented arithmetic:

   * an accumulation of n terms (products included) with magnitudes summing to S, in the
     accumulation arithmetic (float64, or half in strict mode, unit roundoff u_acc and
     underflow unit eta_acc), errs by at most ``red(n, S) = gamma_n S + 4 n eta_acc``
     (Higham, Accuracy and Stability, Eq. 3.5 with the underflow term of section 2.1),
     whatever the summation order (BLAS, double-double or sequential half steps);
   * the final rounding of a value of magnitude <= m to x's dtype (mixed float32/float16
     only) adds ``rnd(m) = u_t m + eta_t``;
   * the residual sum ``x + nu f`` (two operations at most) adds
     ``2 gamma_1 (|x| + |nu f|) + 2 eta_acc``; ``nu g`` stored in x's dtype adds ``rnd``;
   * an input error propagates through a linear stage by ``|W|`` times it, through ReLU
     unchanged (1-Lipschitz), and through a product ``u v`` by ``e_u |v| + |u| e_v``.

   So, with exact intermediate magnitudes from the reference (``steps``), for the FFN
   ``e_h = red(D+1, S_h) + rnd(|h| + red)``, ``e_f = |W2| e_h + red(H+1, S_f) + rnd(...)``,
   ``e_y = |nu| e_f + combine + rnd(...)``, and the backward likewise (``_vjp_bound``).
   ReLU's indicator is where rounding could change a gradient discontinuously: where the
   kernel's pre-activation may lie on the other side of 0 (``|h| <= e_h``, h not exactly
   a 0 that every arithmetic computes exactly), the bound takes both sides,
   ``|a_bar| + e_a_bar``. Bounds are evaluated in float64 from non-negative terms and
   multiplied by ``1 + 2^-30``, far above their own rounding errors.

3. Gradients against mpmath finite differences of the reference (a point away from kinks),
   the reference's forward-mode Jacobian against them, Eq. 27 exactly, ReZero's nu = 0 and
   a zero branch, compositions with LayerNorm and GeLU against the stages chained by
   hand, float16 overflow between stages, NaN/inf, and bad input.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import mpmath
import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from derive.catalog import CATALOG
from derive.reference import residual as ref
from derive.reference.norms import directional_derivative
from kernels import (
    compose,
    gelu,
    layernorm,
    linear,
    maxpool,
    relu,
    residual,
    softmax,
    weighted_residual,
)
from tests.helpers.norms import assert_same_values, mp

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BF16 = np.dtype(ml_dtypes.bfloat16)

#: (dtype, strict_fp16) of every path.
MODES = [(F64, False), (F32, False), (F16, False), (F16, True)]
MODE_IDS = ["float64", "float32", "float16", "float16-strict"]
#: The blocks: residual (no nu), weighted residual with a scalar or a per-feature nu.
NU_KINDS = ["residual", "scalar", "vector"]

#: Unit roundoff and the underflow unit (the smallest subnormal; RNE errs by half of it).
UNIT = {F64: 2.0**-53, F32: 2.0**-24, F16: 2.0**-11}
UNDERFLOW = {F64: 2.0**-1074, F32: 2.0**-150, F16: 2.0**-25}
#: Slack for evaluating the (non-negative) bounds in float64.
BOUND_SAFETY = 1 + 2.0**-30
#: FD check: digits of the directional derivative, and the agreement demanded.
FD_DPS = 60
FD_RELATIVE = mpmath.mpf(10) ** -25

WIDTH = {F64: 64, F32: 32, F16: 16}
#: The smallest nonzero float64 magnitude drawn (see ``_signed``).
FLOAT64_SMALLEST = 1e-30
#: Examples per hypothesis test: half the profile's (each example runs ~10 kernel calls
#: and an mpmath reference; 32 such tests).
EXAMPLES = max(10, settings.default.max_examples // 2)


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    dtype: np.dtype
    strict: bool
    kind: str
    x: np.ndarray
    g: np.ndarray
    W1: np.ndarray
    b1: np.ndarray | None
    W2: np.ndarray
    b2: np.ndarray | None
    nu: Any  # None (residual), a 0-d array or a (D,) array of the dtype

    @property
    def branch(self) -> compose.Sequential:
        return compose.ffn(self.W1, self.b1, self.W2, self.b2)

    def forward(self) -> np.ndarray:
        if self.nu is None:
            return residual.forward(self.x, self.branch, strict_fp16=self.strict)
        return weighted_residual.forward(self.x, self.branch, self.nu, strict_fp16=self.strict)

    def vjp(self) -> dict[str, np.ndarray | None]:
        if self.nu is None:
            dx, grads = residual.vjp(self.x, self.g, self.branch, strict_fp16=self.strict)
            dnu = None
        else:
            dx, grads, dnu = weighted_residual.vjp(
                self.x, self.g, self.branch, self.nu, strict_fp16=self.strict
            )
        return {"dx": dx, **_named_grads(self, grads), "dnu": dnu}

    def jacobian(self, row: int) -> np.ndarray:
        if self.nu is None:
            return residual.jacobian(self.x[row], self.branch, strict_fp16=self.strict)
        return weighted_residual.jacobian(
            self.x[row], self.branch, self.nu, strict_fp16=self.strict
        )

    def reference_forward(self) -> list:
        if self.nu is None:
            return ref.residual_forward(self.x, self.W1, self.b1, self.W2, self.b2)
        return ref.weighted_residual_forward(self.x, self.W1, self.b1, self.W2, self.b2, self.nu)

    def reference_vjp(self) -> dict[str, Any]:
        args = (self.x, self.g, self.W1, self.b1, self.W2, self.b2)
        if self.nu is None:
            dx, dW1, db1, dW2, db2 = ref.residual_vjp(*args)
            dnu = None
        else:
            dx, dW1, db1, dW2, db2, dnu = ref.weighted_residual_vjp(*args, self.nu)
        return {"dx": dx, "dW1": dW1, "db1": db1, "dW2": dW2, "db2": db2, "dnu": dnu}

    def reference_jacobian(self, row: int) -> list:
        if self.nu is None:
            return ref.residual_jacobian(self.x[row], self.W1, self.b1, self.W2, self.b2)
        return ref.weighted_residual_jacobian(
            self.x[row], self.W1, self.b1, self.W2, self.b2, self.nu
        )

    def nu_vector(self) -> np.ndarray:
        """nu as float64 of shape (D,) (ones for the plain residual)."""
        size = self.x.shape[1]
        if self.nu is None:
            return np.ones(size)
        return np.broadcast_to(np.asarray(self.nu, dtype=np.float64), (size,)).copy()


def _named_grads(case: Case, grads: tuple) -> dict[str, np.ndarray | None]:
    names = ["dW1"] + (["db1"] if case.b1 is not None else []) + ["dW2"]
    names += ["db2"] if case.b2 is not None else []
    assert len(grads) == len(names), f"expected gradients {names}, got {len(grads)}"
    named = dict(zip(names, grads, strict=True))
    return {key: named.get(key) for key in ("dW1", "db1", "dW2", "db2")}


def _signed(dtype: np.dtype, largest: float) -> st.SearchStrategy[float]:
    """Values of the dtype in [-largest, largest]; float64 ones are 0 or at least 1e-30 in
    magnitude, so that no product in a block (of at most four factors) underflows and the
    bounds, evaluated in float64, see every term. float32 and float16 take every value:
    their products are exact in float64."""
    if dtype != F64:
        return st.floats(-largest, largest, width=WIDTH[dtype])
    magnitudes = st.one_of(st.just(0.0), st.floats(FLOAT64_SMALLEST, largest))
    return st.builds(lambda sign, m: sign * m, st.sampled_from([1.0, -1.0]), magnitudes)


@st.composite
def cases(draw, dtype: np.dtype, strict: bool, kind: str, exact: bool) -> Case:
    rows = draw(st.integers(1, 2 if exact else 3))
    size = draw(st.integers(1, 3 if exact else 4))
    hidden = draw(st.integers(1, 3 if exact else 5))
    if exact:
        values = st.integers(-2, 2).map(float)
        upstream = values
        weights = st.sampled_from([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0])
    else:
        values, upstream = _signed(dtype, 4.0), _signed(dtype, 2.0)
        weights = upstream

    def draw_array(shape, elements=values):
        return draw(arrays(dtype, shape, elements=elements))

    x = draw_array((rows, size))
    g = draw_array((rows, size), upstream)
    W1 = draw_array((hidden, size))
    b1 = draw_array((hidden,)) if draw(st.booleans()) else None
    W2 = draw_array((size, hidden))
    b2 = draw_array((size,)) if draw(st.booleans()) else None
    if kind == "residual":
        nu = None
    elif kind == "scalar":
        nu = np.asarray(draw(weights), dtype=dtype)
    else:
        nu = draw_array((size,), weights)
    return Case(dtype, strict, kind, x, g, W1, b1, W2, b2, nu)


def _mode_and_kind():
    return pytest.mark.parametrize(
        ("mode", "kind"),
        [(m, k) for m in MODES for k in NU_KINDS],
        ids=[f"{i}-{k}" for i in MODE_IDS for k in NU_KINDS],
    )


def _floats(values: Any) -> np.ndarray:
    """Nested mpf (or None) as a float64 array, each value rounded to nearest."""
    return np.array(values, dtype=np.float64)


# --------------------------------------------------------------------------------------
# 1. Exact regime
# --------------------------------------------------------------------------------------


def _assert_exact(what: str, actual: np.ndarray | None, expected: Any, dtype: np.dtype) -> None:
    if expected is None:
        assert actual is None, f"{what}: expected None, got {actual!r}"
        return
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype}, expected {dtype}"
    expected = _floats(expected)
    assert actual.shape == expected.shape, (
        f"{what}: shape {actual.shape}, expected {expected.shape}"
    )
    assert_same_values(what, actual.astype(np.float64), expected)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("kind", NU_KINDS)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_exact_regime(mode, kind, data):
    dtype, strict = mode
    case = data.draw(cases(dtype, strict, kind, exact=True))
    _assert_exact("y", case.forward(), case.reference_forward(), dtype)
    actual, expected = case.vjp(), case.reference_vjp()
    for name, value in expected.items():
        if name == "dnu" and case.nu is not None:
            assert actual[name].shape == np.shape(case.nu)
        _assert_exact(name, actual[name], value, dtype)
    for row in range(case.x.shape[0]):
        jac = case.jacobian(row)
        _assert_exact(f"J(x[{row}])", jac, case.reference_jacobian(row), dtype)
        # the chain rule both ways: dx = J^T g (all values exact, so exactly)
        transposed = jac.astype(np.float64).T @ case.g[row].astype(np.float64)
        assert_same_values(f"J^T g vs dx[{row}]", actual["dx"][row].astype(np.float64), transposed)


# --------------------------------------------------------------------------------------
# 2. General floats, derived bounds
# --------------------------------------------------------------------------------------


def _gamma(n: int | np.ndarray, unit: float) -> np.ndarray:
    return n * unit / (1 - n * unit)


@dataclass(frozen=True)
class Arithmetic:
    """The error model of one path (see the module docstring)."""

    dtype: np.dtype
    strict: bool

    @property
    def _acc(self) -> np.dtype:
        return F16 if self.strict else F64

    def red(self, n: int, total: np.ndarray) -> np.ndarray:
        """An accumulation of n terms whose magnitudes sum to ``total``."""
        unit, eta = UNIT[self._acc], UNDERFLOW[self._acc]
        return _gamma(n, unit) * total + 4 * n * eta * (total > 0)

    def rnd(self, magnitude: np.ndarray) -> np.ndarray:
        """The final rounding to x's dtype (float64 and strict paths have none)."""
        if self.strict or self.dtype == F64:
            return np.zeros_like(magnitude)
        return UNIT[self.dtype] * magnitude + UNDERFLOW[self.dtype] * (magnitude > 0)

    def store(self, magnitude: np.ndarray) -> np.ndarray:
        """A product (nu g) rounded to x's dtype, in every path."""
        return UNIT[self.dtype] * magnitude + UNDERFLOW[self.dtype] * (magnitude > 0)

    def combine(self, magnitude: np.ndarray) -> np.ndarray:
        """``base + nu f``: two operations of the accumulation arithmetic at most."""
        unit, eta = UNIT[self._acc], UNDERFLOW[self._acc]
        return 2 * _gamma(1, unit) * (1 + unit) * magnitude + 2 * eta * (magnitude > 0)

    def stage(self, propagated, n, total, exact_magnitude):
        """Error of one accumulating stage: input errors, accumulation, final rounding."""
        before = propagated + self.red(n, total)
        return before + self.rnd(exact_magnitude + before)


def magnitudes(values: Any) -> np.ndarray:
    """Upper bounds of |v| for nested mpf (0 stays 0: an exact zero is known exactly)."""
    approx = np.abs(_floats(values))
    return np.where(approx == 0, 0.0, approx * (1 + 2.0**-50) + 2.0**-1074)


@dataclass(frozen=True)
class ForwardBound:
    e_h: np.ndarray
    e_f: np.ndarray
    f_up: np.ndarray
    a_up: np.ndarray
    e_y: np.ndarray
    h: np.ndarray  # exact pre-activations (rounded to float64; signs and zeros exact)
    definite: np.ndarray  # the kernel's indicator 1(h > 0) is certainly the exact one


def _forward_bound(case: Case, arith: Arithmetic, steps: list[ref.Steps]) -> ForwardBound:
    x, W1, W2 = (np.abs(v.astype(np.float64)) for v in (case.x, case.W1, case.W2))
    b1 = 0.0 if case.b1 is None else np.abs(case.b1.astype(np.float64))
    b2 = 0.0 if case.b2 is None else np.abs(case.b2.astype(np.float64))
    nu = np.abs(case.nu_vector())
    h = _floats([s.h for s in steps])
    h_mag = magnitudes([s.h for s in steps])
    a_mag = magnitudes([s.a for s in steps])
    f_mag = magnitudes([s.f for s in steps])
    y_mag = magnitudes([s.y for s in steps])
    size, hidden = case.x.shape[1], case.W1.shape[0]
    e_h = arith.stage(0.0, size + (case.b1 is not None), x @ W1.T + b1, h_mag)
    a_up = a_mag + e_h  # relu is exact and 1-Lipschitz: e_a = e_h
    e_f = arith.stage(e_h @ W2.T, hidden + (case.b2 is not None), a_up @ W2.T + b2, f_mag)
    f_up = f_mag + e_f
    combined = arith.combine(x + nu * f_up)
    before = nu * e_f + combined
    e_y = before + arith.rnd(y_mag + before)
    definite = (np.abs(h) > e_h * BOUND_SAFETY) | ((h == 0) & (e_h == 0))
    return ForwardBound(e_h, e_f, f_up, a_up, e_y, h, definite)


def _vjp_bound(case: Case, arith: Arithmetic, steps, fb: ForwardBound, expected) -> dict:
    x, W1, W2, g = (np.abs(v.astype(np.float64)) for v in (case.x, case.W1, case.W2, case.g))
    nu = np.abs(case.nu_vector())
    rows, size = case.x.shape
    hidden = case.W1.shape[0]
    gz = nu * g  # |nu g|, exact: the products of two floats of the dtype, magnitudes only
    e_gz = np.zeros_like(gz) if case.nu is None else arith.store(gz)
    gz_up = gz + e_gz
    a_bar = magnitudes([s.a_bar for s in steps])
    exact = {k: None if v is None else magnitudes(v) for k, v in expected.items()}
    bounds = {}
    # Linear(W2).vjp(a, nu g): a_bar = gz W2, dW2 = gz^T a, db2 = sum gz
    e_da = arith.stage(e_gz @ W2, size, gz_up @ W2, a_bar)
    # a product u v of perturbed factors errs by e_u |v| + |u| e_v (e_a = e_h)
    propagated = e_gz.T @ fb.a_up + gz.T @ fb.e_h
    bounds["dW2"] = arith.stage(propagated, rows, gz_up.T @ fb.a_up, exact["dW2"])
    if case.b2 is not None:
        bounds["db2"] = arith.stage(e_gz.sum(0), rows, gz_up.sum(0), exact["db2"])
    # relu.vjp(h, a_bar): a_bar 1(h > 0), exact given the indicator; else either side
    on = fb.h > 0
    e_dh = np.where(fb.definite, np.where(on, e_da, 0.0), a_bar + e_da)
    dh_up = np.where(fb.definite & ~on, 0.0, a_bar + e_da)
    # Linear(W1).vjp(x, h_bar): J_f^T part of dx = h_bar W1, dW1 = h_bar^T x, db1 = sum h_bar
    branch_dx = magnitudes(
        [
            [dx_j - g_j for dx_j, g_j in zip(s.x_bar, g_row, strict=True)]
            for s, g_row in zip(steps, case.g.tolist(), strict=True)
        ]
    )
    e_branch_dx = arith.stage(e_dh @ W1, hidden, dh_up @ W1, branch_dx)
    bounds["dW1"] = arith.stage(e_dh.T @ x, rows, dh_up.T @ x, exact["dW1"])
    if case.b1 is not None:
        bounds["db1"] = arith.stage(e_dh.sum(0), rows, dh_up.sum(0), exact["db1"])
    # dx = g + J_f^T (nu g)
    combined = arith.combine(g + branch_dx + e_branch_dx)
    before = e_branch_dx + combined
    bounds["dx"] = before + arith.rnd(exact["dx"] + before)
    if case.nu is not None:  # dnu = sum over rows (and features, for a scalar) of g f
        propagated, total = (g * fb.e_f).sum(0), (g * fb.f_up).sum(0)
        count = rows
        if np.ndim(case.nu) == 0:
            propagated, total, count = propagated.sum(), total.sum(), rows * size
        bounds["dnu"] = arith.stage(propagated, count, total, exact["dnu"])
    return bounds


def _jacobian_bound(case: Case, arith: Arithmetic, fb: ForwardBound, row: int, expected):
    W1, W2 = np.abs(case.W1.astype(np.float64)), np.abs(case.W2.astype(np.float64))
    nu = np.abs(case.nu_vector())
    on, definite = fb.h[row] > 0, fb.definite[row]
    ambiguous = W2 @ np.diag((~definite).astype(float)) @ W1
    total = W2 @ np.diag((on | ~definite).astype(float)) @ W1
    hidden = case.W1.shape[0]
    e_branch = ambiguous + arith.red(hidden, total)  # kept wide: no rounding yet
    combined = arith.combine(np.eye(len(nu)) + nu[:, None] * (total + e_branch))
    before = nu[:, None] * e_branch + combined
    return before + arith.rnd(magnitudes(expected) + before)


def assert_within(what: str, actual: np.ndarray, expected: Any, bound: np.ndarray) -> None:
    expected_flat = np.asarray(expected, dtype=object).reshape(-1)
    actual_flat = np.asarray(actual, dtype=np.float64).reshape(-1)
    bound_flat = np.broadcast_to(bound, np.shape(actual)).reshape(-1) * BOUND_SAFETY
    with mpmath.workdps(ref.DEFAULT_DPS):
        for index, (a, e, b) in enumerate(zip(actual_flat, expected_flat, bound_flat, strict=True)):
            error = abs(mp(a) - e)
            if not error <= b:
                where = np.unravel_index(index, np.shape(actual))
                raise AssertionError(
                    f"{what} at index {tuple(int(i) for i in where)}: got {a!r}, expected "
                    f"{mpmath.nstr(e, 20)}; error {mpmath.nstr(error, 5)} > bound {b:.5g}"
                )


@_mode_and_kind()
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_against_reference_with_derived_bounds(mode, kind, data):
    dtype, strict = mode
    _check_within_bounds(data.draw(cases(dtype, strict, kind, exact=False)))


def _check_within_bounds(case: Case) -> None:
    dtype = case.dtype
    arith = Arithmetic(dtype, case.strict)
    steps = ref.steps(case.x, case.W1, case.b1, case.W2, case.b2, case.nu, case.g)
    fb = _forward_bound(case, arith, steps)
    y = case.forward()
    assert y.dtype == dtype and y.shape == case.x.shape
    assert_within("y", y, case.reference_forward(), fb.e_y)
    expected = case.reference_vjp()
    bounds = _vjp_bound(case, arith, steps, fb, expected)
    actual = case.vjp()
    for name, value in expected.items():
        if value is None:
            assert actual[name] is None, f"{name}: expected None"
            continue
        assert actual[name].dtype == dtype, f"{name}: dtype {actual[name].dtype}"
        assert actual[name].shape == np.shape(_floats(value)), f"{name}: shape"
        assert_within(name, actual[name], value, bounds[name])
    for row in range(case.x.shape[0]):
        expected_j = case.reference_jacobian(row)
        bound = _jacobian_bound(case, arith, fb, row, expected_j)
        assert_within(f"J(x[{row}])", case.jacobian(row), expected_j, bound)


def _pinned(dtype, strict, x, W1, b1, W2, b2, nu, g=None) -> Case:
    def arr(v):
        return None if v is None else np.asarray(v, dtype)

    x = arr(x)
    return Case(
        np.dtype(dtype),
        strict,
        "residual" if nu is None else "pinned",
        x,
        arr(g) if g is not None else np.ones_like(x),
        arr(W1),
        arr(b1),
        arr(W2),
        arr(b2),
        arr(nu),
    )


TINY = 2.0**-24  # the smallest half subnormal
PINNED = {
    # a pre-activation that cancels to exactly 0 (h = 2^-24 - 2^-24): an ambiguous kink
    "f16-cancelling-kink": _pinned(
        F16, False, [[TINY, -TINY]], [[1.0, 1.0]], None, [[3.0], [-1.0]], [0.5, 0.0], [0.5, -2.0]
    ),
    "f16s-cancelling-kink": _pinned(
        F16, True, [[TINY, -TINY]], [[1.0, 1.0]], None, [[3.0], [-1.0]], [0.5, 0.0], 0.5
    ),
    # products at and below the half subnormal threshold (2^-24, 2^-25 -> 0 in strict mode)
    "f16s-subnormal-products": _pinned(
        F16, True, [[2.0**-14, 2.0**-15]], [[2.0**-10, 2.0**-10]], [0.0], [[1.0], [1.0]], None, None
    ),
    "f16-subnormal-products": _pinned(
        F16,
        False,
        [[2.0**-14, 2.0**-15]],
        [[2.0**-10, 2.0**-10]],
        [0.0],
        [[1.0], [1.0]],
        None,
        None,
    ),
    # a branch output that cancels exactly (f = 3 - 3) and a block output that does (x = -nu f)
    "f32-cancelling-output": _pinned(
        F32,
        False,
        [[1.0, 2.0]],
        [[1.0, 1.0], [1.0, 1.0]],
        None,
        [[1.0, -1.0], [1.0, 1.0]],
        None,
        [1.0, -1.0 / 6.0],
    ),
    # float64 at the drawn extremes: 1e-30 against 4
    "f64-extremes": _pinned(
        F64,
        False,
        [[1e-30, 4.0, -1e-30]],
        [[4.0, 1e-30, -4.0]],
        [1e-30],
        [[-4.0], [1e-30], [4.0]],
        [4.0, -1e-30, 1e-30],
        [1e-30, -2.0, 2.0],
    ),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_pinned_cases_within_bounds(name):
    _check_within_bounds(PINNED[name])


def _round_once(values: Any, dtype: np.dtype) -> np.ndarray:
    """Nested mpf -> float64 (round to nearest) -> dtype: the "float64, rounded once" path."""
    with np.errstate(over="ignore"):
        return _floats(values).astype(dtype)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("kind", ["scalar", "vector"])
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_block_sums_are_formed_exactly_and_rounded_once(mode, kind, data):
    """The blocks' own arithmetic, given the branch's results (the kernels' f, J_f^T(nu g),
    float64 J_f): ``y = RN_t(RN_64(x + nu f))``, ``dx = RN_t(RN_64(g + J_f^T RN_t(nu g)))``,
    ``J = RN_t(RN_64(I + diag(nu) J_f))``, each exact sum evaluated here in mpmath; strict
    mode: ``h(x + h(nu f))`` etc. (for halves, h(nu f) is nu f rounded once, and a sum of
    two halves is exact in float64). This catches a second rounding (e.g. of ``nu f`` to
    the dtype in mixed mode) that the bounds above leave room for."""
    dtype, strict = mode
    case = data.draw(cases(dtype, strict, kind, exact=False))
    kw = {"strict_fp16": strict}
    x, g, branch, nu = case.x, case.g, case.branch, case.nu
    f = branch.forward(x, **kw).astype(np.float64)
    nu64 = case.nu_vector()
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    weighted_g = (nu64 * g64).astype(dtype)  # exact product for halves/float32; RN64 for float64
    branch_dx = branch.vjp(x, weighted_g, **kw)[0].astype(np.float64)
    j_f = compose.wide_jacobian(branch, x[0], **kw)
    eye = np.eye(x.shape[1])
    with mpmath.workdps(ref.DEFAULT_DPS):
        if strict:
            y = (x64 + (nu64 * f).astype(dtype)).astype(dtype)
            dx = (g64 + branch_dx).astype(dtype)
            jac = (eye + (nu64[:, None] * j_f).astype(dtype)).astype(dtype)
        else:
            y = _round_once(
                [
                    [mp(a) + mp(n) * mp(b) for a, n, b in zip(ra, nu64, rb, strict=True)]
                    for ra, rb in zip(x64, f, strict=True)
                ],
                dtype,
            )
            dx = _round_once(
                [
                    [mp(a) + mp(b) for a, b in zip(ra, rb, strict=True)]
                    for ra, rb in zip(g64, branch_dx, strict=True)
                ],
                dtype,
            )
            jac = _round_once(
                [
                    [mp(eye[i, j]) + mp(nu64[i]) * mp(j_f[i, j]) for j in range(len(eye))]
                    for i in range(len(eye))
                ],
                dtype,
            )
    got_dx, _, _ = weighted_residual.vjp(x, g, branch, nu, **kw)
    assert_same_values("y", weighted_residual.forward(x, branch, nu, **kw), y)
    assert_same_values("dx", got_dx, dx)
    assert_same_values("J", weighted_residual.jacobian(x[0], branch, nu, **kw), jac)


# --------------------------------------------------------------------------------------
# 3. Finite differences, Eq. 27, special blocks
# --------------------------------------------------------------------------------------


def _away_from_kinks(seed: int, rows: int, size: int, hidden: int, margin: float = 0.05):
    """A float64 FFN case whose pre-activations all satisfy |h| >= margin."""
    rng = np.random.default_rng(seed)
    while True:
        x = rng.standard_normal((rows, size))
        W1 = rng.standard_normal((hidden, size))
        b1 = rng.standard_normal(hidden)
        if np.all(np.abs(x @ W1.T + b1) >= margin):
            break
    W2, b2 = rng.standard_normal((size, hidden)), rng.standard_normal(size)
    g, nu = rng.standard_normal((rows, size)), rng.standard_normal(size)
    return x, g, W1, b1, W2, b2, nu


def _flat(values: Any) -> list:
    if isinstance(values, list):
        return [v for item in values for v in _flat(item)]
    return [values]


@pytest.mark.parametrize("nu_kind", ["vector", "scalar"])
@pytest.mark.parametrize("seed", [1, 2])
def test_gradients_against_finite_differences(seed, nu_kind):
    """<grad, v> = d/dt <g, y(p + t v)> for every input p (x, W1, b1, W2, b2, nu), for the
    reference's hand-written reverse mode (to 25 digits) and for the float64 kernel (within
    its derived bound); and the forward-mode Jacobian's columns against d/dt y(x + t e_j).
    No kink within 0.05 of the point: relu is linear along every path the stencil samples."""
    x, g, W1, b1, W2, b2, nu = _away_from_kinks(seed, rows=2, size=3, hidden=4)
    if nu_kind == "scalar":
        nu = np.asarray(nu[0])
    inputs = {"x": x, "W1": W1, "b1": b1, "W2": W2, "b2": b2, "nu": nu}
    reference = dict(
        zip(
            ["dx", "dW1", "db1", "dW2", "db2", "dnu"],
            ref.weighted_residual_vjp(x, g, W1, b1, W2, b2, nu),
            strict=True,
        )
    )
    case = Case(F64, False, nu_kind, x, g, W1, b1, W2, b2, nu)
    kernel = case.vjp()
    arith = Arithmetic(F64, False)
    steps = ref.steps(x, W1, b1, W2, b2, nu, g)
    bounds = _vjp_bound(case, arith, steps, _forward_bound(case, arith, steps), reference)
    rng = np.random.default_rng(seed + 100)
    for name, value in inputs.items():
        direction = rng.standard_normal(np.shape(value))

        def loss(point, name=name):
            args = {**inputs, name: point}
            y = ref.weighted_residual_forward(
                args["x"],
                args["W1"],
                args["b1"],
                args["W2"],
                args["b2"],
                args["nu"],
                dps=mpmath.mp.dps,
            )
            return mpmath.fdot(_flat(y), [mp(v) for v in g.reshape(-1)])

        fd = directional_derivative(loss, value, direction, dps=FD_DPS)
        grad = "d" + name
        with mpmath.workdps(ref.DEFAULT_DPS):
            weights = [mp(v) for v in direction.reshape(-1)]
            from_reference = mpmath.fdot(_flat(reference[grad]), weights)
            from_kernel = mpmath.fdot([mp(v) for v in np.reshape(kernel[grad], -1)], weights)
            scale = mpmath.fdot([abs(v) for v in _flat(reference[grad])], [abs(w) for w in weights])
            assert abs(from_reference - fd) <= FD_RELATIVE * scale, (grad, from_reference, fd)
            kernel_bound = float(np.abs(direction).reshape(-1) @ bounds[grad].reshape(-1))
            assert abs(from_kernel - fd) <= kernel_bound * BOUND_SAFETY + FD_RELATIVE * scale, (
                grad,
                from_kernel,
                fd,
                kernel_bound,
            )
    jac = ref.weighted_residual_jacobian(x[0], W1, b1, W2, b2, nu)
    for j in range(x.shape[1]):
        column = directional_derivative(
            lambda p: ref.weighted_residual_forward(p, W1, b1, W2, b2, nu, dps=mpmath.mp.dps)[0],
            x[0],
            np.eye(x.shape[1])[j],
            dps=FD_DPS,
        )
        for i, value in enumerate(column):
            assert abs(jac[i][j] - value) <= FD_RELATIVE * (1 + abs(value)), (i, j)


def test_eq27_jacobian_exactly_on_integer_weights():
    """residual.jacobian of an FFN equals I + W2 diag(1(W1 x + b1 > 0)) W1 exactly: Eq. 27
    transposed (the paper's denominator layout prints I + W1^T diag(.) W2^T). Unit 1's
    pre-activation is exactly 0 at the point: relu'(0) = 0 switches it off."""
    W1 = np.array([[1.0, -2.0, 0.0], [2.0, 1.0, -1.0], [0.0, 3.0, 1.0], [-1.0, 0.0, 2.0]])
    b1 = np.array([0.0, -1.0, 1.0, -3.0])
    W2 = np.array([[1.0, 2.0, -1.0, 3.0], [0.0, -2.0, 1.0, 1.0], [2.0, 1.0, 0.0, -1.0]])
    b2 = np.array([0.5, 0.0, -0.5])
    x = np.array([1.0, 0.0, 1.0])
    pre = W1 @ x + b1
    assert pre.tolist() == [1.0, 0.0, 2.0, -2.0]  # unit 1 on the kink, unit 3 off
    indicator = np.diag((pre > 0).astype(float))
    expected = np.eye(3) + W2 @ indicator @ W1
    branch = compose.ffn(W1, b1, W2, b2)
    assert_same_values("J", residual.jacobian(x, branch), expected)
    assert_same_values(
        "J^T (paper)", residual.jacobian(x, branch).T, np.eye(3) + W1.T @ indicator @ W2.T
    )
    assert_same_values(
        "J reference",
        residual.jacobian(x, branch),
        _floats(ref.residual_jacobian(x, W1, b1, W2, b2)),
    )
    nu = np.array([0.5, -1.0, 2.0])
    expected_weighted = np.eye(3) + np.diag(nu) @ W2 @ indicator @ W1
    assert_same_values("J weighted", weighted_residual.jacobian(x, branch, nu), expected_weighted)
    # and the kink really is a kink: one step off it to the active side switches unit 1 on
    x_on = x + np.array([0.0, 0.5, 0.0])  # pre-activation of unit 1 becomes 0.5
    on = np.diag((W1 @ x_on + b1 > 0).astype(float))
    assert on[1, 1] == 1.0
    assert_same_values("J active side", residual.jacobian(x_on, branch), np.eye(3) + W2 @ on @ W1)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_zero_branch_and_rezero_are_the_identity(mode):
    dtype, strict = mode
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 4)).astype(dtype)
    g = rng.standard_normal((3, 4)).astype(dtype)
    W1 = rng.standard_normal((5, 4)).astype(dtype)
    b1 = rng.standard_normal(5).astype(dtype)
    W2 = rng.standard_normal((4, 5)).astype(dtype)
    b2 = rng.standard_normal(4).astype(dtype)
    zero = compose.ffn(W1, b1, np.zeros_like(W2), np.zeros_like(b2))
    assert_same_values("y", residual.forward(x, zero, strict_fp16=strict), x)
    dx, grads = residual.vjp(x, g, zero, strict_fp16=strict)
    assert_same_values("dx", dx, g)
    assert_same_values("dW1", grads[0], np.zeros_like(W1))
    assert_same_values("J", residual.jacobian(x[0], zero, strict_fp16=strict), np.eye(4))
    # ReZero (Eq. 55 with nu = 0): the identity whatever the branch, but dnu = sum g f
    branch = compose.ffn(W1, b1, W2, b2)
    for nu in (np.zeros(4, dtype), np.zeros((), dtype), 0.0):
        assert_same_values("y", weighted_residual.forward(x, branch, nu, strict_fp16=strict), x)
        dx, grads, dnu = weighted_residual.vjp(x, g, branch, nu, strict_fp16=strict)
        assert_same_values("dx", dx, g)
        assert all(np.all(grad == 0) for grad in grads)
        assert dnu.shape == np.shape(nu) and dnu.dtype == dtype
        # dnu's value is checked against the reference in the bound tests (nu = 0 drawn)
        assert np.all(np.isfinite(dnu))
        assert_same_values(
            "J", weighted_residual.jacobian(x[0], branch, nu, strict_fp16=strict), np.eye(4)
        )


# --------------------------------------------------------------------------------------
# Compositions: the chain rule's plumbing, with other stages
# --------------------------------------------------------------------------------------


def _deep_branch(dtype: np.dtype, size: int = 4, hidden: int = 6):
    """Linear -> LayerNorm -> GeLU(tanh) -> Linear (no bias), and its parameters."""
    rng = np.random.default_rng(11)
    W1 = rng.standard_normal((hidden, size)).astype(dtype)
    b1 = rng.standard_normal(hidden).astype(dtype)
    gamma = rng.uniform(0.5, 1.5, hidden).astype(dtype)
    beta = rng.standard_normal(hidden).astype(dtype)
    W2 = rng.standard_normal((size, hidden)).astype(dtype)
    stages = (
        compose.Linear(W1, b1),
        compose.LayerNorm(gamma, beta, eps=1e-3),
        compose.Activation(gelu, approximate="tanh"),
        compose.Linear(W2),
    )
    return compose.Sequential(stages), (W1, b1, gamma, beta, W2)


@pytest.mark.parametrize(
    "mode",
    [*MODES, (BF16, False), (BF16, True)],
    ids=[*MODE_IDS, "bfloat16", "bfloat16-strict"],
)
def test_sequential_is_the_stages_chained_by_hand(mode):
    """forward, vjp (reverse order, stage inputs from the forward) and jacobian (product of
    the stage Jacobians at the stage inputs) equal the kernels called one by one, bit for bit;
    the gradients come flat, in the order of ``parameters``. bfloat16 too, in both modes."""
    dtype, strict = mode
    branch, (W1, b1, gamma, beta, W2) = _deep_branch(dtype)
    kw = {"strict_fp16": strict}
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 4)).astype(dtype)
    g = rng.standard_normal((3, 4)).astype(dtype)
    h1 = linear.forward(x, W1, b1, **kw)
    h2 = layernorm.forward(h1, gamma, beta, 1e-3, **kw)
    h3 = gelu.forward(h2, "tanh", **kw)
    out = linear.forward(h3, W2, **kw)
    assert_same_values("forward", branch.forward(x, **kw), out)
    d3, dW2, _ = linear.vjp(h3, g, W2, **kw)
    d2 = gelu.vjp(h2, d3, "tanh", **kw)
    d1, dgamma, dbeta = layernorm.vjp(h1, d2, gamma, beta, 1e-3, **kw)
    d0, dW1, db1 = linear.vjp(x, d1, W1, b1, **kw)
    dx, grads = branch.vjp(x, g, **kw)
    assert_same_values("dx", dx, d0)
    assert [p.shape for p in branch.parameters] == [gr.shape for gr in grads]
    for name, got, want in zip(
        ["dW1", "db1", "dgamma", "dbeta", "dW2"], grads, [dW1, db1, dgamma, dbeta, dW2], strict=True
    ):
        assert_same_values(name, got, want)
    assert all(p is q for p, q in zip(branch.parameters, (W1, b1, gamma, beta, W2), strict=True))
    # Jacobian: J4 J3 J2 J1, each at its stage input, multiplied in float64 (or half steps)
    s = x[0]
    inputs = [s, linear.forward(s, W1, b1, **kw)]
    inputs.append(layernorm.forward(inputs[1], gamma, beta, 1e-3, **kw))
    inputs.append(gelu.forward(inputs[2], "tanh", **kw))
    factors = [
        linear.jacobian(inputs[0], W1, b1, **kw),
        layernorm.jacobian(inputs[1], gamma, beta, 1e-3, **kw),
        gelu.jacobian(inputs[2], "tanh", **kw),
        linear.jacobian(inputs[3], W2, **kw),
    ]
    product = factors[0].astype(np.float64)
    for factor in factors[1:]:
        product = compose._matmul(factor.astype(np.float64), product, strict, x.dtype)
    assert_same_values("jacobian", branch.jacobian(s, **kw), compose.finish(product, x.dtype))
    # ... and the residual blocks add the identity to that float64 product before rounding
    identity = np.eye(4)
    assert_same_values(
        "I + J",
        residual.jacobian(s, branch, **kw),
        compose.finish(
            compose.scaled_sum(identity, product, np.ones(4), strict, bf=x.dtype == BF16), x.dtype
        ),
    )


# --------------------------------------------------------------------------------------
# float16 between stages, NaN/inf, layouts, bad input
# --------------------------------------------------------------------------------------


def test_float16_branch_rounds_between_stages_and_can_overflow_there():
    """A half network stores its pre-activations in half: 300 * 300 = 90000 rounds to inf
    although the block's exact output, 300 + 90000/16 = 5925, is a half. float32 gets it."""
    for dtype, expected in ((F16, np.inf), (F32, 5925.0)):
        branch = compose.ffn(np.array([[300.0]], dtype), None, np.array([[1 / 16]], dtype), None)
        x = np.array([[300.0]], dtype)
        assert residual.forward(x, branch)[0, 0] == expected
        assert weighted_residual.forward(x, branch, np.ones(1, dtype))[0, 0] == expected


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_nonfinite_values_propagate_without_warnings(mode):
    """IEEE through the residual sums (warnings are errors in this suite): inf + finite,
    inf - inf = NaN, NaN; a half sum past 65520 is inf."""
    dtype, strict = mode
    kw = {"strict_fp16": strict}
    branch = compose.Sequential([compose.Activation(relu)])
    x = np.array([[np.inf, -np.inf, np.nan, 1.0]], dtype)
    g = np.array([[1.0, 1.0, 1.0, np.inf]], dtype)
    assert_same_values("y", residual.forward(x, branch, **kw), [[np.inf, -np.inf, np.nan, 2.0]])
    nu = np.array([-1.0, 1.0, 1.0, 0.0], dtype)
    y = weighted_residual.forward(x, branch, nu, **kw)
    assert_same_values("y", y, [[np.nan, -np.inf, np.nan, 1.0]])  # inf - 1 * inf = NaN
    dx, _, dnu = weighted_residual.vjp(x, g, branch, nu, **kw)
    # dx = g + relu'(x) (nu g): 1 + (-1)(1), 1 + 0, NaN (relu'(NaN) * 1), inf + 1 * 0 * inf
    assert_same_values("dx", dx, [[0.0, 1.0, np.nan, np.nan]])
    assert_same_values("dnu", dnu, [np.inf, 0.0, np.nan, np.inf])
    if dtype == F16:  # the half overflow threshold 65520 = 65504 + 16: RNE, ties to even
        top = np.array([[65504.0]], dtype)
        for shift, expected in ((8.0, 65504.0), (15.0, 65504.0), (16.0, np.inf)):
            constant = compose.Linear(np.zeros((1, 1), dtype), np.array([shift], dtype))
            assert residual.forward(top, constant, **kw)[0, 0] == expected, shift
            one = np.ones(1, dtype)
            assert weighted_residual.forward(top, constant, one, **kw)[0, 0] == expected, shift


def test_strided_inputs_work_and_are_not_written():
    rng = np.random.default_rng(21)
    x = rng.standard_normal((3, 8))[:, ::2]  # non-contiguous (3, 4)
    g = np.asfortranarray(rng.standard_normal((3, 4)))
    W1 = np.asfortranarray(rng.standard_normal((5, 4)))
    b1, W2, b2 = rng.standard_normal(5), rng.standard_normal((4, 5)), rng.standard_normal(4)
    nu = rng.standard_normal(8)[::2]
    before = [a.copy() for a in (x, g, W1, b1, W2, b2, nu)]
    branch = compose.ffn(W1, b1, W2, b2)
    contiguous = compose.ffn(*(np.ascontiguousarray(a) for a in (W1, b1, W2, b2)))
    xc, gc, nuc = (np.ascontiguousarray(a) for a in (x, g, nu))
    assert_same_values(
        "y",
        weighted_residual.forward(x, branch, nu),
        weighted_residual.forward(xc, contiguous, nuc),
    )
    got = weighted_residual.vjp(x, g, branch, nu)
    want = weighted_residual.vjp(xc, gc, contiguous, nuc)
    assert_same_values("dx", got[0], want[0])
    for a, b in zip(got[1], want[1], strict=True):
        assert_same_values("grad", a, b)
    assert_same_values("dnu", got[2], want[2])
    assert_same_values("J", residual.jacobian(x[1], branch), residual.jacobian(xc[1], contiguous))
    for original, now in zip(before, (x, g, W1, b1, W2, b2, nu), strict=True):
        assert_same_values("input", now, original)


def _ffn64(size=3, hidden=2, out=None):
    return compose.ffn(
        np.ones((hidden, size)), np.zeros(hidden), np.ones((out or size, hidden)), None
    )


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        # the branch must map (..., D) to (..., D), and be a stage
        (
            lambda: residual.forward(np.ones((2, 3)), _ffn64(out=4)),
            ValueError,
            r"branch: .*\(2, 3\).*\(2, 4\)",
        ),
        (lambda: residual.forward(np.ones((2, 5)), _ffn64()), ValueError, r"branch: .*\(2, 5\)"),
        (lambda: residual.forward(np.ones(3), np.eye(3)), TypeError, "branch: expected a stage"),
        (
            lambda: residual.jacobian(np.ones((1, 3)), _ffn64()),
            ValueError,
            "x: expected one sample",
        ),
        (
            lambda: residual.forward(np.ones(3, np.int64), _ffn64()),
            TypeError,
            "x: expected a bfloat16",
        ),
        (lambda: residual.forward(np.float64(1.0), _ffn64()), ValueError, "x: expected shape"),
        (lambda: residual.forward(np.ones((2, 0)), _ffn64()), ValueError, "D >= 1"),
        (
            lambda: residual.forward(np.ones(3, np.float32), _ffn64()),
            TypeError,
            "W: expected dtype",
        ),
        (lambda: residual.vjp(np.ones(3), np.ones(2), _ffn64()), ValueError, "g: expected shape"),
        (
            lambda: residual.vjp(np.ones(3), np.ones(3, np.float32), _ffn64()),
            TypeError,
            "g: expected dtype",
        ),
        (
            lambda: residual.forward(np.ones(3), _ffn64(), strict_fp16=True),
            ValueError,
            "strict_fp16",
        ),
        (
            lambda: residual.forward(np.ones(3), _ffn64(), strict_fp16="yes"),
            TypeError,
            "strict_fp16",
        ),
        # nu: shape () or (D,), x's dtype; Python numbers are real, not bool
        (
            lambda: weighted_residual.forward(np.ones(3), _ffn64(), np.ones(2)),
            ValueError,
            r"nu: expected a scalar \(shape \(\)\) or shape \(3,\)",
        ),
        (
            lambda: weighted_residual.forward(np.ones(3), _ffn64(), np.ones((1, 3))),
            ValueError,
            "nu:",
        ),
        (
            lambda: weighted_residual.forward(np.ones(3), _ffn64(), np.ones(3, np.float32)),
            TypeError,
            "nu: expected dtype float64",
        ),
        (lambda: weighted_residual.vjp(np.ones(3), np.ones(3), _ffn64(), True), TypeError, "nu:"),
        (lambda: weighted_residual.jacobian(np.ones(3), _ffn64(), 1j), TypeError, "nu:"),
        # stages
        (lambda: compose.Linear(np.ones(3)), ValueError, r"W: expected shape \(O, D\)"),
        (
            lambda: compose.Linear(np.ones((2, 3)), np.ones(3)),
            ValueError,
            r"b: expected shape \(2,\)",
        ),
        (
            lambda: compose.Linear(np.ones((2, 3)), np.ones(2, np.float32)),
            TypeError,
            "b: expected dtype",
        ),
        (lambda: compose.Linear(np.ones((2, 3), np.int32)), TypeError, "W: expected a bfloat16"),
        (lambda: compose.LayerNorm(np.ones(3), np.ones(2)), ValueError, "beta: expected shape"),
        (lambda: compose.LayerNorm(np.ones(3), np.ones(3), eps=-1.0), ValueError, "eps"),
        (lambda: compose.Activation(np), TypeError, "module: expected an elementwise kernel"),
        (lambda: compose.Sequential([]), ValueError, "stages: expected at least one stage"),
        (lambda: compose.Sequential([compose.Activation(relu), "relu"]), TypeError, r"stages\[1\]"),
        (
            lambda: compose.Sequential(
                [compose.Linear(np.ones((2, 3))), compose.Linear(np.ones((2, 3)))]
            ).forward(np.ones(3)),
            ValueError,
            r"stages\[1\]: Linear: expected input of shape \(\.\.\., 3\)",
        ),
        (
            lambda: compose.Sequential([compose.Activation(gelu, approximate="bad")]).forward(
                np.ones(2)
            ),
            ValueError,
            "approximate",
        ),
    ],
)
def test_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_python_number_nu_is_stored_in_the_dtype_first():
    """WRS initializes nu = 1/L: a Python float is rounded to x's dtype, as a stored
    parameter would be, and dnu is then a 0-d array of that dtype."""
    x = np.array([[1.0, 2.0]], np.float16)
    branch = compose.Sequential([compose.Linear(np.eye(2, dtype=np.float16))])
    third = np.float16(1 / 3)
    assert_same_values(
        "y",
        weighted_residual.forward(x, branch, 1 / 3),
        weighted_residual.forward(x, branch, np.asarray(third)),
    )
    _, _, dnu = weighted_residual.vjp(x, x, branch, 1 / 3)
    assert dnu.shape == () and dnu.dtype == np.float16 and dnu == 5.0


# --------------------------------------------------------------------------------------
# A branch's results are checked before the block's loops read them
# --------------------------------------------------------------------------------------


def test_activation_takes_exactly_the_catalogs_activations():
    """``compose.ELEMENTWISE`` is kept in kernels (no catalog import there); it must list
    the ``activations`` family of the catalog, in its order."""
    keys = [m.key for m in CATALOG if m.family == "activations"]
    assert [module.__name__ for module in compose.ELEMENTWISE] == [f"kernels.{k}" for k in keys]
    for module in compose.ELEMENTWISE:
        assert compose.Activation(module).module is module


@pytest.mark.parametrize("module", [maxpool, layernorm, softmax, linear, np])
def test_activation_refuses_other_modules_when_built(module):
    """maxpool drops the last axis and layernorm needs parameters: not elementwise, so
    refused when the stage is built, naming the module, not when a block runs."""
    with pytest.raises(
        TypeError, match=rf"module: expected an elementwise .*got {module.__name__}"
    ):
        compose.Activation(module)


@dataclass(frozen=True, eq=False)
class UserStage:
    """A stage made by the user, not from ``compose``: ``y = x * w`` with one parameter w of
    shape (D,). ``tamper`` maps a result (``"forward"``, ``"vjp"``, ``"dx"``, ``"grads"``,
    ``"jacobian"``) to a function that spoils it."""

    w: np.ndarray
    tamper: dict[str, Callable[[Any], Any]] = field(default_factory=dict)

    def _spoil(self, what: str, value: Any) -> Any:
        return self.tamper.get(what, lambda v: v)(value)

    @property
    def parameters(self) -> tuple[np.ndarray, ...]:
        return (self.w,)

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape)

    def forward(self, x, *, strict_fp16=False):
        return self._spoil("forward", x * self.w)

    def vjp(self, x, g, *, strict_fp16=False):
        dx = self._spoil("dx", g * self.w)
        grads = self._spoil("grads", ((g * x).reshape(-1, x.shape[-1]).sum(axis=0),))
        return self._spoil("vjp", (dx, grads))

    def jacobian(self, x, *, strict_fp16=False):
        return self._spoil("jacobian", np.diag(self.w))


@pytest.mark.parametrize("nested", [False, True], ids=["branch", "in-sequential"])
def test_a_correct_user_stage_passes_the_checks(nested):
    """The checks reject only what breaks the stage contract (small integers: exact)."""
    x = np.array([[1.0, -2.0, 3.0], [0.0, 2.0, -1.0]])
    g = np.array([[2.0, 1.0, -1.0], [1.0, -3.0, 2.0]])
    w = np.array([2.0, -1.0, 3.0])
    branch = UserStage(w)
    if nested:  # then the identity, a Linear stage: the same map
        branch = compose.Sequential([branch, compose.Linear(np.eye(3))])
    assert_same_values("y", residual.forward(x, branch), x + x * w)
    dx, grads = residual.vjp(x, g, branch)
    assert_same_values("dx", dx, g + g * w)
    assert_same_values("dw", grads[0], (g * x).sum(axis=0))
    assert len(grads) == (2 if nested else 1)
    assert_same_values("J", residual.jacobian(x[0], branch), np.eye(3) + np.diag(w))
    _, _, dnu = weighted_residual.vjp(x, g, branch, 0.5)
    assert_same_values("dnu", dnu, np.asarray((g * x * w).sum()))


@dataclass(frozen=True, eq=False)
class ThreadProbe(UserStage):
    """:class:`UserStage` that records Numba's thread count each time it runs."""

    seen: list[int] = field(default_factory=list)

    def forward(self, x, *, strict_fp16=False):
        self.seen.append(numba.get_num_threads())
        return super().forward(x, strict_fp16=strict_fp16)

    def vjp(self, x, g, *, strict_fp16=False):
        self.seen.append(numba.get_num_threads())
        return super().vjp(x, g, strict_fp16=strict_fp16)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two Numba threads")
def test_sequentials_with_products_run_their_loops_on_one_thread():
    """A Sequential with a Linear stage at any depth runs its stages on one Numba thread and
    restores the caller's count (also after an error); one without products leaves it."""
    x, g = np.ones((2, 3)), np.ones((2, 3))
    previous = numba.get_num_threads()
    numba.set_num_threads(2)
    try:
        for products, make in (
            (True, lambda p: compose.Sequential([p, compose.Linear(np.eye(3))])),
            (
                True,
                lambda p: compose.Sequential([p, compose.ffn(np.eye(3), None, np.eye(3), None)]),
            ),
            (False, lambda p: compose.Sequential([p, compose.Activation(relu)])),
        ):
            probe = ThreadProbe(np.ones(3))
            block = make(probe)
            assert block.has_products == products
            block.forward(x)
            block.vjp(x, g)
            block.forward_and_vjp(x, g)
            assert probe.seen == [1 if products else 2] * len(probe.seen) and probe.seen
            assert numba.get_num_threads() == 2
        broken = compose.Sequential(
            [ThreadProbe(np.ones(3), {"forward": lambda y: y[:1]}), compose.Linear(np.eye(3))]
        )
        with pytest.raises(ValueError, match="forward output has shape"):
            broken.forward(x)
        assert numba.get_num_threads() == 2
    finally:
        numba.set_num_threads(previous)


#: (result, how it is spoiled, error, message): what a block must refuse from its branch.
SPOILED = [
    (
        "forward",
        lambda y: y[:1],
        ValueError,
        r"its forward output has shape \(1, 3\), expected \(2, 3\)",
    ),
    ("forward", lambda y: y[:, :2], ValueError, r"its forward output has shape \(2, 2\)"),
    (
        "forward",
        lambda y: y.astype(np.float32),
        TypeError,
        "its forward output has dtype float32, expected float64",
    ),
    (
        "forward",
        lambda y: y.tolist(),
        TypeError,
        "its forward output must be a NumPy array, got list",
    ),
    (
        "dx",
        lambda dx: dx[:1],
        ValueError,
        r"its vjp input gradient has shape \(1, 3\), expected \(2, 3\)",
    ),
    ("dx", lambda dx: dx.ravel(), ValueError, r"its vjp input gradient has shape \(6,\)"),
    ("dx", lambda dx: dx.astype(np.float16), TypeError, "its vjp input gradient has dtype float16"),
    (
        "grads",
        lambda grads: (),
        ValueError,
        "its vjp returned 0 parameter gradients for 1 parameters",
    ),
    (
        "grads",
        lambda grads: (grads[0][:2],),
        ValueError,
        r"its gradient of parameters\[0\] has shape \(2,\), expected \(3,\)",
    ),
    (
        "grads",
        lambda grads: (grads[0].astype(np.float32),),
        TypeError,
        r"its gradient of parameters\[0\] has dtype float32",
    ),
    (
        "grads",
        lambda grads: grads[0],
        TypeError,
        "its vjp must return its parameter gradients as a tuple, got ndarray",
    ),
    ("vjp", lambda pair: pair[0], TypeError, r"its vjp must return a pair \(dx, grads\)"),
    (
        "jacobian",
        lambda J: J[:2],
        ValueError,
        r"its Jacobian has shape \(2, 3\), expected \(3, 3\)",
    ),
    ("jacobian", lambda J: J.astype(np.float32), TypeError, "its Jacobian has dtype float32"),
]


def _block_calls(what: str, branch: Any, x: np.ndarray) -> list[Callable[[], Any]]:
    """Every block call that uses the spoiled result ``what`` of ``branch``."""
    if what == "forward":
        return [
            lambda: residual.forward(x, branch),
            lambda: weighted_residual.forward(x, branch, 0.5),
            lambda: weighted_residual.vjp(x, x, branch, 0.5),  # its dnu needs f(x)
        ]
    if what == "jacobian":
        return [
            lambda: residual.jacobian(x[0], branch),
            lambda: weighted_residual.jacobian(x[0], branch, np.full(3, 0.5)),
        ]
    return [lambda: residual.vjp(x, x, branch), lambda: weighted_residual.vjp(x, x, branch, 0.5)]


@pytest.mark.parametrize("nested", [False, True], ids=["branch", "in-sequential"])
@pytest.mark.parametrize(("what", "spoil", "error", "message"), SPOILED)
def test_what_a_branch_returns_is_checked(what, spoil, error, message, nested):
    """A branch's forward output, input gradient, parameter gradients and Jacobian must
    have the shape and dtype it promises: else an error naming the stage, before any loop
    reads them (the loops index by x's shape and would read past a smaller array)."""
    x = np.array([[1.0, -2.0, 3.0], [0.0, 2.0, -1.0]])
    branch = UserStage(np.array([2.0, -1.0, 3.0]), {what: spoil})
    name = "branch"
    if nested:  # the spoiled stage second in a Sequential: named by its index there
        branch = compose.Sequential([compose.Linear(np.eye(3)), branch])
        name = r"stages\[1\]"
    for call in _block_calls(what, branch, x):
        with pytest.raises(error, match=f"^{name}: {message}"):
            call()


def test_block_loops_refuse_operands_of_other_shapes():
    """The float64 loops' own guard: the second operand must have the first's shape."""
    with pytest.raises(ValueError, match=r"f: expected shape \(4, 2\)"):
        compose.scaled_sum(np.ones((4, 2)), np.ones((1, 2)), np.ones(2), False)
    with pytest.raises(ValueError, match=r"b: expected shape \(4, 2\)"):
        compose.column_dots(np.ones((4, 2)), np.ones((1, 2)), 2, False)


#: The crash reproductions, each run in a fresh interpreter: before the checks, the loops
#: read far past the branch's output (signal 11). Each prints the error it gets.
CRASHES = {
    "activation-maxpool": """
        x = np.arange(20000 * 50.0).reshape(20000, 50)
        residual.forward(x, compose.Activation(maxpool))
    """,
    "user-forward-one-row": """
        x = np.ones((2_000_000, 4))
        residual.forward(x, OneRow())
    """,
    "user-vjp-one-row": """
        x = np.ones((2_000_000, 4))
        weighted_residual.vjp(x, x, OneRow(), np.full(4, 0.5))
    """,
}
CRASH_PRELUDE = """
import numpy as np
from kernels import compose, maxpool, residual, weighted_residual

class OneRow:
    parameters = ()
    def output_shape(self, shape):
        return tuple(shape)
    def forward(self, x, *, strict_fp16=False):
        return np.ones((1, x.shape[-1]), x.dtype)
    def vjp(self, x, g, *, strict_fp16=False):
        return np.ones((1, x.shape[-1]), x.dtype), ()
    def jacobian(self, x, *, strict_fp16=False):
        return np.eye(x.shape[-1], dtype=x.dtype)

try:
{body}
except (TypeError, ValueError) as error:
    print(type(error).__name__, error)
else:
    print("no error")
"""
CRASH_ERRORS = {
    "activation-maxpool": r"^TypeError module: expected an elementwise .* got kernels\.maxpool$",
    "user-forward-one-row": (
        r"^ValueError branch: its forward output has shape \(1, 4\), expected \(2000000, 4\)$"
    ),
    "user-vjp-one-row": r"^ValueError branch: its vjp input gradient has shape \(1, 4\)",
}


@pytest.mark.parametrize("case", sorted(CRASHES))
def test_crash_reproductions_end_in_a_clean_error(case):
    body = textwrap.indent(textwrap.dedent(CRASHES[case]).strip(), "    ")
    code = CRASH_PRELUDE.format(body=body)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (
        f"{case}: the interpreter ended with {done.returncode} (negative: killed by that "
        f"signal)\n{done.stderr[-2000:]}"
    )
    assert re.search(CRASH_ERRORS[case], done.stdout.strip()), done.stdout


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_sequential_forward_and_vjp_is_forward_and_vjp_from_one_pass(dtype):
    """``weighted_residual.vjp`` takes ``f(x)`` and the branch's VJP from one pass through
    the stages: the same values, bit for bit, as the two calls."""
    rng = np.random.default_rng(21)
    x, g = (rng.normal(size=(7, 5)).astype(dtype) for _ in range(2))
    W1, W2 = rng.normal(size=(9, 5)).astype(dtype), rng.normal(size=(5, 9)).astype(dtype)
    branch = compose.ffn(W1, rng.normal(size=9).astype(dtype), W2, None)
    y, dx, grads = branch.forward_and_vjp(x, g)
    want_dx, want_grads = branch.vjp(x, g)
    for got, want in zip((y, dx, *grads), (branch.forward(x), want_dx, *want_grads), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()  # bit for bit, signs of zeros included
