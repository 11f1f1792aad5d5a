"""``liptable envelope`` (``derive/envelope/modules.py``, ``derive/envelope/core.py``) checked by
independent means, for the modules of ``derive.envelope.modules.MODELS``.

1. Boundaries. For every module with a witness, over a few configurations each, the kernel
   (``derive.envelope.modules.kernel_dx``, float16 mixed mode) at ``g = inside * s`` is finite
   everywhere and every entry agrees with the module's mpmath reference VJP (50 digits,
   ``derive/reference_*.py``) within the tolerance of that module's own tests:

   ==========================  ===========================================================
   module                      tolerance (and where it is derived)
   ==========================  ===========================================================
   layernorm, rmsnorm,         ``NORM_ULPS ulp + (NORM_ROUNDINGS + n) 2^-53 S``
   centernorm, weightnorm      (``tests/kernels/test_norms.py``: ``check_all``, ``row_scales``,
                               ``weight_scales``; ``tests/helpers/tolerances.py``)
   batchnorm                   the same table with BatchNorm's scales
                               (``tests/kernels/test_batchnorm.py``: ``check_all``, ``scales``)
   linear                      ``round(exact -+ gamma_n S)`` (``tests/kernels/test_linear.py``)
   residual,                   the stage-by-stage error model of ``tests/kernels/test_residual.py``
   weighted_residual           (``Arithmetic``) for the branch ``Linear(W)``: see
                               :func:`residual_bound`
   gelu, gelu_tanh,            ``FLOAT16_ULPS`` of ``g f'(x)`` (``tests/helpers/tolerances.py``, as
   gelu_sigmoid, swish         ``test_float16_vjp_overflow_boundary`` of test_activations)
   ==========================  ===========================================================

   At ``g = outside * s`` the kernel gives inf at ``witness.point.index`` and the
   reference value there is at least the overflow threshold (65520), so the exact result
   overflows whatever the envelope's own arb arithmetic says. float32 and bfloat16
   witnesses (safe sizes near 1e34..3e38) are checked more lightly: the exact values on
   either side of the threshold (``2^128 - 2^103``, ``2^128 - 2^119``), finite kernel
   results at ``inside``, inf at ``outside``.

2. Safe sizes, recomputed. The supremum of the max-norm gain is evaluated in mpmath at 50
   digits from the derivations in the docstrings of ``derive/envelope/modules.py`` (written again
   here, not called: :func:`layernorm_k`, :func:`rmsnorm_k`), or by maximizing ``|f'|``
   with ``mpmath.findroot`` for the activations; the largest float16 (float32) ``g`` with
   ``g * sup < threshold`` is then found by walking ``numpy.nextafter`` from
   ``threshold / sup`` and must equal ``envelope(...).safe``. The gain ``G`` of the
   witness is the reference's ``dx[index] / inside``; the smallest format value ``g`` with
   ``g G >= threshold`` must be ``witness.outside``, and ``witness.steps`` must equal the
   number of format values in ``(safe, outside]``, found with ``nextafter`` -- which is
   1 wherever ``G`` equals the supremum (the sup attained in the format; this is
   computed per configuration, not listed).

3. The gains are suprema -- evidence by sampling, not a proof. For LayerNorm and RMSNorm at
   D = 2..8, 64, 100 the float64 Jacobian kernels are evaluated at hypothesis-drawn inputs
   and at inputs hill-climbed from them and from the witness: ``max_j sum_i |J_ij|`` never
   exceeds the envelope's max-norm gain, nor ``sigma_max(J)`` its 2-norm gain, by more
   than a derived float64 error bound (:func:`column_sum_slack`, :func:`sigma_slack`);
   the witness comes within ``REACH`` of the max-norm gain, ``x = 0`` of the 2-norm gain.

4. Number formats: ``FORMATS`` against ``numpy.finfo``, the midpoint overflow rule,
   ``Format.round`` against NumPy's conversions (ties included) and the neighbour
   functions against ``numpy.nextafter``; bfloat16 against ``ml_dtypes`` where installed.

5. The command line: text and JSON output, bad input, and its speed.

6. Huge sizes. LayerNorm's maximizing k (found from the signs of a cubic, not by a scan)
   against every k in arb, across the switch-over and at the report's sizes; the proof of
   the bracket (``proofs.envelope.layernorm_peak_proof``) up to D = 10^9; a witness past
   ``WITNESS_ENTRIES`` keeps every value but its arrays; ``liptable envelope`` at
   ``--dim 1000000000`` in a child process under a time and memory limit; the drift checks
   between the models, the catalog and the command line's options.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
import typing
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any

import ml_dtypes
import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kernels
from derive import cli
from derive.catalog import envelope_keys
from derive.definitions.activations import elementwise
from derive.definitions.activations import x as symbol_x
from derive.envelope import core as envelope_core
from derive.envelope import modules as env
from derive.envelope.core import DIGITS, FORMATS, Config
from derive.envelope.modules import MODELS, Envelope, envelope, kernel_dx, models
from derive.reference import batchnorm as reference_batchnorm
from derive.reference import linear as reference_linear
from derive.reference import norms as reference_norms
from derive.reference import residual as reference_res
from derive.reference.core import evaluate, round_to_dtype, ulp_error
from derive.reference.softmax_pool import avgpool_vjp, maxpool_vjp, softmax_jacobian
from proofs import envelope as envelope_proofs
from tests.helpers import cli_subprocess
from tests.helpers.norms import mp
from tests.helpers.tolerances import FLOAT16_ULPS, NORM_ROUNDINGS, UNIT_FLOAT64
from tests.kernels import test_batchnorm as bn
from tests.kernels import test_norms as tn
from tests.kernels.test_linear import assert_within
from tests.kernels.test_residual import Arithmetic, magnitudes
from tests.kernels.test_residual import assert_within as assert_within_residual

HALF, SINGLE = np.dtype(np.float16), np.dtype(np.float32)
BFLOAT = np.dtype(ml_dtypes.bfloat16)
#: numpy dtype of each format name with kernels.
NUMPY_DTYPE = {"float16": HALF, "bfloat16": BFLOAT, "float32": SINGLE}
#: Digits of the references and of every exact comparison here (SPEC: >= 50).
DPS = 50
#: Two mpmath values "are equal" (a supremum attained, a closed form re-derived) when they
#: agree to this relative precision: 50-digit evaluations of the same real number differ
#: by ~1e-49, different numbers here by far more than 1e-40.
SAME = mpmath.mpf(10) ** -40
#: The relative precision of the envelope's printed enclosures (DIGITS significant digits).
PRINTED = mpmath.mpf(10) ** -(DIGITS - 2)
#: The relative distance within which the float16 witness must reach the max-norm gain
#: (rounding its entries to half costs ~1e-7 at a smooth maximum: quadratic in 2^-11).
REACH = 1e-6
#: Wall-clock budget of ``liptable envelope layernorm --dim 4096`` after the imports.
CLI_SECONDS = 2.0
#: Hill-climbing: steps per start, and the first step relative to the input's scale.
CLIMB_STEPS, CLIMB_STEP = 60, 0.3
#: Activations: envelope name -> catalog key of derive.definitions.activations.
ACTIVATIONS = {
    "gelu": "gelu_none",
    "gelu_tanh": "gelu_tanh",
    "gelu_sigmoid": "gelu_sigmoid",
    "swish": "swish",
}


def threshold(dtype: np.dtype) -> mpmath.mpf:
    """The overflow threshold from NumPy's limits: the midpoint between the largest finite
    value and the next power of two, ``max + spacing / 2`` (exact in mpmath), with the
    spacing of the top binade taken below ``max`` (``max`` is not a power of two)."""
    top = ml_dtypes.finfo(dtype).max
    return mp(top) + (mp(top) - mp(np.nextafter(top, dtype.type(0)))) / 2


# --------------------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One module and configuration (the keywords of ``envelope``)."""

    module: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def id(self) -> str:
        parts = [f"{k}{v:g}" if isinstance(v, float) else f"{k}{v}" for k, v in self.options]
        return "-".join([self.module, *parts])

    def envelope(self, dtype: str = "float16") -> Envelope:
        return _envelope(self.module, dtype, self.options)


@cache
def _envelope(module: str, dtype: str, options: tuple[tuple[str, Any], ...]) -> Envelope:
    return envelope(module, dtype, **dict(options))


def case(module: str, **options: Any) -> Case:
    return Case(module, tuple(options.items()))


#: LayerNorm/BatchNorm/RMSNorm sizes around LayerNorm's switch from constant rows to
#: non-constant ones (D = 57 -> 58) and typical widths; eps as in PyTorch and tiny (the
#: witness entries are then float16 subnormals); gamma bounds 1 and 0.5.
NORM_DIMS = (2, 3, 57, 58, 64, 768, 4096)
NORM_EPS = (1e-5, 1e-12)
GAMMAS = (1.0, 0.5)
NORM_CASES = [
    case(module, dim=dim, eps=eps, gamma_max=gamma)
    for module in ("layernorm", "batchnorm", "rmsnorm")
    for dim in NORM_DIMS
    for eps in NORM_EPS
    for gamma in GAMMAS
]
#: Parameters not representable in half (3.3, 0.1, 1/3, 0.07, 0.3): the witness rounds
#: them down.
OTHER_CASES = [
    *(case("centernorm", dim=d, gamma_max=gm) for d in (2, 3, 64, 768) for gm in (1.0, 3.3)),
    case("weightnorm", dim=8, out_dim=4, eps=0.0),
    case("weightnorm", dim=8, out_dim=4, eps=1e-5),
    case("weightnorm", dim=16, out_dim=64, eps=0.0, gamma_max=0.5),
    case("weightnorm", dim=16, out_dim=64, eps=1e-3, gamma_max=0.1),
    case("weightnorm", dim=4, out_dim=1000, eps=1e-12),
    case("linear", dim=4, out_dim=64, weight_max=0.1),
    case("linear", dim=8, out_dim=100, weight_max=1 / 3),
    case("linear", dim=3, out_dim=1000, weight_max=1.0),
    case("linear", dim=16, out_dim=300, weight_max=0.07),
    case("residual", dim=8, weight_max=0.1),
    case("residual", dim=64, weight_max=0.1),
    case("residual", dim=100, weight_max=1 / 3),
    case("residual", dim=3, weight_max=2.0),
    case("weighted_residual", dim=8, weight_max=0.1, nu_max=0.5),
    case("weighted_residual", dim=64, weight_max=0.1, nu_max=0.3),
    case("weighted_residual", dim=100, weight_max=1 / 3, nu_max=2.0),
    *(case(name) for name in ACTIVATIONS),
]
HALF_CASES = NORM_CASES + OTHER_CASES
#: float32 witnesses: one or two configurations per module.
SINGLE_CASES = [
    case("layernorm", dim=64, eps=1e-5),
    case("layernorm", dim=768, eps=1e-12),
    case("layernorm", dim=4096, eps=1e-5),
    case("batchnorm", dim=58, eps=1e-5),
    case("rmsnorm", dim=64, eps=1e-5),
    case("rmsnorm", dim=3, eps=1e-12, gamma_max=0.5),
    case("centernorm", dim=64, gamma_max=3.3),
    case("weightnorm", dim=8, out_dim=4, eps=1e-5),
    case("linear", dim=4, out_dim=64, weight_max=0.1),
    case("residual", dim=8, weight_max=0.1),
    case("weighted_residual", dim=8, weight_max=0.1, nu_max=0.5),
    *(case(name) for name in ACTIVATIONS),
]
#: Modules whose gain times the largest finite value stays below the threshold: no witness.
NO_WITNESS = ("sigmoid", "softmax", "relu", "maxpool", "avgpool")


def test_every_module_is_covered():
    tested = {c.module for c in HALF_CASES} | set(NO_WITNESS)
    assert tested == set(MODELS), (
        f"untested: {set(MODELS) - tested}, unknown: {tested - set(MODELS)}"
    )


# --------------------------------------------------------------------------------------
# References and tolerances per module
# --------------------------------------------------------------------------------------

ROW_NORMS = {norm.name: norm for norm in tn.ROW_NORMS}


def inputs(
    e: Envelope, dtype: np.dtype, size: Fraction
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The witness's kernel inputs and ``g = size * signs`` in ``dtype`` (exact: format
    values), as ``kernel_dx`` builds them."""
    point = e.witness.point
    arrays = {k: v.astype(dtype) for k, v in point.arrays.items()}
    assert all(np.array_equal(arrays[k], v) for k, v in point.arrays.items()), (
        f"{e.module}: the witness arrays are not {dtype} values"
    )
    return arrays, (float(size) * point.signs).astype(dtype)


def _branch(size: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """``W1 = I``, ``b1 = 1``: the reference FFN ``W relu(x + 1)`` is the branch ``W x`` up
    to a constant near x = 0 (every pre-activation is 1 > 0), so its VJP is that of the
    Linear branch."""
    return np.eye(size, dtype=dtype), np.ones(size, dtype=dtype)


@cache
def reference(c: Case, fmt: str, size: Fraction) -> np.ndarray:
    """The exact ``dx`` at the witness for ``g = size * signs`` (object array of mpf)."""
    e, dtype = c.envelope(fmt), NUMPY_DTYPE[fmt]
    a, g = inputs(e, dtype, size)
    if dtype == BFLOAT:  # the references take NumPy's float dtypes; float64 holds these exactly
        dtype = np.dtype(np.float64)
        a, g = {k: v.astype(dtype) for k, v in a.items()}, g.astype(dtype)
    eps = e.witness.point.options.get("eps")
    if c.module in ROW_NORMS:
        norm = ROW_NORMS[c.module]
        exact = norm.reference("vjp")(a["x"], g, a["gamma"], a["beta"], *norm.tail(eps))[0]
    elif c.module == "batchnorm":
        exact = reference_batchnorm.batchnorm_vjp(a["x"], g, a["gamma"], a["beta"], eps)[0]
    elif c.module == "weightnorm":
        exact = reference_norms.weightnorm_vjp(a["x"], g, a["v"], a["gamma"], eps)[0]
    elif c.module == "linear":
        exact = reference_linear.linear_vjp(a["x"], g, a["W"], dps=DPS)[0]
    elif c.module == "residual":
        exact = reference_res.residual_vjp(a["x"], g, *_branch(g.shape[1], dtype), a["W"], None)[0]
    elif c.module == "weighted_residual":
        W1, b1 = _branch(g.shape[1], dtype)
        exact = reference_res.weighted_residual_vjp(a["x"], g, W1, b1, a["W"], None, a["nu"])[0]
    else:
        derivative = elementwise(ACTIVATIONS[c.module]).derivative
        with mpmath.workdps(DPS):
            exact = [mp(g[0]) * evaluate(derivative, float(a["x"][0]), DPS)]
    return np.array(exact, dtype=object)


def residual_bound(a: dict[str, np.ndarray], g: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """The error bound of ``tests/kernels/test_residual.py`` (its ``_vjp_bound``) for the branch
    ``Linear(W)`` in float16 mixed mode: ``nu g`` stored in half (weighted only), the
    branch's ``(nu g) W`` (D terms in float64, then rounded to half between the stages),
    ``g + branch`` formed exactly and rounded once::

        e_branch = red(D, |nu g| |W|) + e_nu_g |W| + rnd(|branch| + ...)
        bound    = e_branch + combine(|g| + |branch| + e_branch) + rnd(|dx| + ...)
    """
    arith = Arithmetic(HALF, strict=False)
    W, g_abs = np.abs(a["W"].astype(np.float64)), np.abs(g.astype(np.float64))
    nu = np.abs(a["nu"].astype(np.float64)) if "nu" in a else np.ones(g.shape[1])
    gz = nu * g_abs
    e_gz = arith.store(gz) if "nu" in a else np.zeros_like(gz)
    gz_up = gz + e_gz
    with mpmath.workdps(DPS):
        branch = magnitudes((exact - np.array(g.astype(np.float64), dtype=object)).tolist())
    e_branch = arith.stage(e_gz @ W, g.shape[1], gz_up @ W, branch)
    before = e_branch + arith.combine(g_abs + branch + e_branch)
    return before + arith.rnd(magnitudes(exact.tolist()) + before)


def check_half(c: Case, size: Fraction, dx: np.ndarray) -> None:
    """Every entry of the float16 mixed ``dx`` within the module's tolerance of the exact
    value (module docstring, table of section 1); non-finite results where the tolerance's
    interval rounds to inf."""
    e = c.envelope()
    a, g = inputs(e, HALF, size)
    exact = reference(c, "float16", size)
    what = f"{c.id}: kernel dx at g = {float(size)!r} * signs"
    assert dx.shape == exact.shape, f"{what}: shape {dx.shape}, expected {exact.shape}"
    eps = e.witness.point.options.get("eps", 0.0)
    if c.module in ROW_NORMS:
        norm = ROW_NORMS[c.module]
        rows, dim = a["x"].shape
        scales = tn.row_scales(norm, a["x"], g, a["gamma"], a["beta"], eps).dx
        n = tn.plain_length(HALF, "dx", rows, dim)
        tn.check_all(what, dx, exact.tolist(), HALF, n, scales)
    elif c.module == "batchnorm":
        values = {"x": a["x"], "g": g, "gamma": a["gamma"], "beta": a["beta"], "eps": eps}
        scales = bn.scales(values, "sqrt_var_eps", True).dx
        n = bn.plain_length(HALF, "dx", a["x"].shape[0], True)
        bn.check_all(what, dx, exact, HALF, n, scales)
    elif c.module == "weightnorm":
        rows, dim = a["x"].shape
        scales = tn.weight_scales(a["x"], g, a["v"], a["gamma"], eps)["dx"]
        n = tn.weight_plain_length("dx", rows, dim, a["v"].shape[0])
        tn.check_all(what, dx, exact.tolist(), HALF, n, scales)
    elif c.module == "linear":
        scales = reference_linear.linear_vjp(np.abs(a["x"]), np.abs(g), np.abs(a["W"]), dps=DPS)
        assert_within(what, dx, exact, scales[0], a["W"].shape[0], HALF)
    elif c.module in ("residual", "weighted_residual"):
        bound = residual_bound(a, g, exact)
        overflows = np.zeros(exact.shape, dtype=bool)
        with mpmath.workdps(DPS):
            for index in np.ndindex(exact.shape):
                # As in tests/kernels/test_norms.py: where the result or the correct rounding of
                # the exact value is inf, the result lies between the roundings of
                # exact -+ bound.
                if np.isinf(dx[index]) or np.isinf(round_to_dtype(exact[index], HALF)):
                    overflows[index] = True
                    low = round_to_dtype(exact[index] - bound[index], HALF)
                    high = round_to_dtype(exact[index] + bound[index], HALF)
                    assert low <= dx[index] <= high, (
                        f"{what} at index {index}: got {dx[index]!r}, expected "
                        f"{mpmath.nstr(exact[index], 20)} (within the bound {bound[index]:.5g} "
                        f"it rounds to [{low!r}, {high!r}])"
                    )
        finite = np.where(overflows, 0.0, dx)
        assert_within_residual(what, finite, np.where(overflows, mpmath.mpf(0), exact), bound)
    else:
        error = ulp_error(dx[0], exact[0], HALF)
        assert error <= FLOAT16_ULPS, (
            f"{what} at index (0,): got {dx[0]!r}, expected {mpmath.nstr(exact[0], 20)} "
            f"({error:.3g} ULP)"
        )


def assert_all_finite(what: str, dx: np.ndarray) -> None:
    bad = np.argwhere(~np.isfinite(dx))
    if bad.size:
        index = tuple(int(i) for i in bad[0])
        raise AssertionError(f"{what} at index {index}: got {dx[index]!r}, expected a finite value")


# --------------------------------------------------------------------------------------
# 1. Boundaries: the kernel and the exact value at the witness
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("c", HALF_CASES, ids=lambda c: c.id)
def test_float16_kernel_at_the_witness(c):
    """Inside: finite everywhere and within the module's tolerance of the exact dx.
    Outside: inf at the witness's index, whose exact value reaches 65520."""
    e = c.envelope()
    w = e.witness
    assert w is not None and e.safe is not None and e.safe > 0, f"{c.id}: no witness"
    index = w.point.index
    inside = kernel_dx(e, w.inside)
    assert inside.dtype == HALF, f"{c.id}: dtype {inside.dtype}"
    assert_all_finite(f"{c.id}: kernel dx at the safe size {float(w.inside)!r}", inside)
    check_half(c, w.inside, inside)
    outside = kernel_dx(e, w.outside)
    assert outside[index] == np.inf, (
        f"{c.id}: kernel dx at g = {float(w.outside)!r} * signs, index {index}: got "
        f"{outside[index]!r}, expected inf"
    )
    exact = reference(c, "float16", w.outside)[index]
    with mpmath.workdps(DPS):
        assert exact >= threshold(HALF), (
            f"{c.id}: exact dx at g = {float(w.outside)!r} * signs, index {index}: "
            f"{mpmath.nstr(exact, 20)}, expected >= 65520"
        )
    check_half(c, w.outside, outside)


@pytest.mark.parametrize("fmt", ["float32", "bfloat16"])
@pytest.mark.parametrize("c", SINGLE_CASES, ids=lambda c: c.id)
def test_wide_range_kernel_at_the_witness(c, fmt):
    """float32 and bfloat16 (float32's exponent range): the exact dx is below the format's
    overflow threshold (``2^128 - 2^103``, ``2^128 - 2^119``) everywhere at ``inside`` and
    at least that at ``outside``, where the kernel gives inf; finite at ``inside``."""
    e = c.envelope(fmt)
    w = e.witness
    dtype = NUMPY_DTYPE[fmt]
    index, limit = w.point.index, threshold(dtype)
    inside, outside = kernel_dx(e, w.inside), kernel_dx(e, w.outside)
    assert inside.dtype == dtype and outside.dtype == dtype, f"{c.id}: dtype"
    assert_all_finite(f"{c.id}: {fmt} kernel dx at {float(w.inside)!r}", inside)
    assert outside[index] == np.inf, (
        f"{c.id}: {fmt} kernel dx at {float(w.outside)!r}, index {index}: got "
        f"{outside[index]!r}, expected inf"
    )
    below = reference(c, fmt, w.inside)
    with mpmath.workdps(DPS):
        for where in np.ndindex(below.shape):
            assert abs(below[where]) < limit, (
                f"{c.id}: exact {fmt} dx at {float(w.inside)!r}, index {where}: "
                f"{mpmath.nstr(below[where], 20)} is past the threshold"
            )
        above = reference(c, fmt, w.outside)[index]
        assert above >= limit, (
            f"{c.id}: exact {fmt} dx at {float(w.outside)!r}, index {index}: "
            f"{mpmath.nstr(above, 20)} < {mpmath.nstr(limit, 20)}"
        )


# --------------------------------------------------------------------------------------
# 2. The safe size and the witness's steps, recomputed
# --------------------------------------------------------------------------------------


@cache
def layernorm_k(size: int) -> mpmath.mpf:
    """K(D) of the docstring of ``derive.envelope.modules.layernorm_k``, evaluated afresh:
    ``max_k max_{0 < l <= 1} l (A (1 + l^2) + B (1 - l^2)) / D`` with ``A = k``,
    ``B = sqrt((D-1) k (D - k))``, k = 1..D-1. The inner function has the derivative
    ``(A (1 + 3 l^2) + B (1 - 3 l^2)) / D``, zero at ``l^2 = (A + B) / (3 (B - A))``
    (B > A), increasing before it: its maximum on (0, 1] is there or at l = 1."""
    n = size - 1
    best = mpmath.mpf(0)
    with mpmath.workdps(DPS):
        for k in range(1, n + 1):
            a, b = mpmath.mpf(k), mpmath.sqrt(mpmath.mpf(n) * k * (size - k))
            lam = mpmath.mpf(1)
            if b > a:
                lam = min(lam, mpmath.sqrt((a + b) / (3 * (b - a))))
            best = max(best, lam * (a * (1 + lam**2) + b * (1 - lam**2)) / size)
    return best


def rmsnorm_k(size: int) -> mpmath.mpf:
    """K(D) of ``derive.envelope.modules.rmsnorm_k``'s docstring: ``max_{0 < l <= 1} l (1 + c (1 -
    l^2))``, ``c = (sqrt(D) - 1)/2``; the derivative ``1 + c - 3 c l^2`` vanishes at
    ``l^2 = (1 + c) / (3 c)``, inside (0, 1] only when c > 1/2."""
    with mpmath.workdps(DPS):
        c = (mpmath.sqrt(size) - 1) / 2
        lam = mpmath.mpf(1) if c <= 0 else min(mpmath.mpf(1), mpmath.sqrt((1 + c) / (3 * c)))
        return lam * (1 + c * (1 - lam**2))


@cache
def activation_sup(name: str) -> mpmath.mpf:
    """``sup |f'|`` by a float64 grid scan for the maximizer and ``mpmath.findroot`` of
    ``f''`` from there, at DPS digits (the envelope's own comes from proofs/activations)."""
    module = elementwise(ACTIVATIONS[name])
    slope = sp.lambdify(symbol_x, module.derivative, "math")
    grid = [k / 1000 for k in range(-8000, 8001)]
    scan = [abs(slope(v)) for v in grid]
    start = grid[int(np.argmax(scan))]
    second = sp.lambdify(symbol_x, module.second_derivative, "mpmath")
    first = sp.lambdify(symbol_x, module.derivative, "mpmath")
    with mpmath.workdps(DPS):
        root = mpmath.findroot(second, mpmath.mpf(start))
        value = abs(first(root))
    assert value >= max(scan) * (1 - 1e-12), f"{name}: {value} at {root} is not the maximum"
    return value


def gain_sup(c: Case) -> mpmath.mpf:
    """The supremum of the max-norm gain (call inside ``workdps(DPS)``), from the closed
    forms of the envelope's docstrings, the parameters taken as their exact doubles."""
    cfg = c.envelope().config
    size, gamma = cfg.dim, mp(cfg.gamma_max)
    if c.module in ("layernorm", "batchnorm"):
        return gamma * layernorm_k(size) / mpmath.sqrt(mp(cfg.eps))
    if c.module == "rmsnorm":
        return gamma * rmsnorm_k(size) / mpmath.sqrt(mp(cfg.eps))
    if c.module == "centernorm":
        # J = D/(D-1) gamma (I - 11^T/D): a column sums |1 - 1/D| + (D - 1)/D, times that.
        return (
            mpmath.mpf(size)
            / (size - 1)
            * gamma
            * (1 - mpmath.mpf(1) / size + mpmath.mpf(size - 1) / size)
        )
    if c.module == "weightnorm":
        # |W_ij| = |gamma_i v_ij| / sqrt(|v_i|^2 + eps) <= |gamma_i|: O of them per column.
        return cfg.outputs * gamma
    if c.module == "linear":
        return cfg.outputs * mp(cfg.weight_max)
    if c.module == "residual":
        return 1 + size * mp(cfg.weight_max)
    if c.module == "weighted_residual":
        return 1 + size * mp(cfg.nu_max) * mp(cfg.weight_max)
    return activation_sup(c.module)


def largest_below(gain: mpmath.mpf, dtype: np.dtype) -> np.floating | None:
    """The largest finite ``g`` of ``dtype`` with ``g * gain < threshold``, by walking
    ``nextafter`` from ``threshold / gain``; None if the largest finite value is."""
    limit, top = threshold(dtype), np.finfo(dtype).max
    if mp(top) * gain < limit:
        return None
    g = dtype.type(min(float(limit / gain), float(top)))
    while mp(g) * gain >= limit:
        g = np.nextafter(g, dtype.type(0))
    while True:
        up = np.nextafter(g, dtype.type(np.inf))
        if not np.isfinite(up) or mp(up) * gain >= limit:
            return g
        g = up


def values_between(low: np.floating, high: np.floating) -> int:
    """How many values of the dtype lie in ``(low, high]``."""
    count, value = 0, low
    while value < high:
        value = np.nextafter(value, type(low)(np.inf))
        count += 1
    return count


@pytest.mark.parametrize(
    ("c", "fmt"),
    [(c, "float16") for c in HALF_CASES] + [(c, "float32") for c in SINGLE_CASES],
    ids=lambda v: v.id if isinstance(v, Case) else v,
)
def test_safe_size_and_steps_recomputed(c, fmt):
    """``safe`` is the largest format value below ``threshold / sup``; ``outside`` the
    smallest one at or past ``threshold / G`` (G the witness's exact gain, at most sup);
    ``steps`` the format values in between, 1 where G is the sup itself."""
    e, dtype = c.envelope(fmt), NUMPY_DTYPE[fmt]
    w = e.witness
    with mpmath.workdps(DPS):
        sup = gain_sup(c)
        low, high = (mpmath.mpf(v) for v in e.model.gain_max.value.enclosure())
        assert low * (1 - PRINTED) <= sup <= high * (1 + PRINTED), (
            f"{c.id}: the max-norm gain recomputed is {mpmath.nstr(sup, 30)}, the envelope's "
            f"enclosure [{mpmath.nstr(low, 30)}, {mpmath.nstr(high, 30)}]"
        )
        safe = largest_below(sup, dtype)
        assert safe is not None, f"{c.id}: every {fmt} g is safe, yet there is a witness"
        assert e.safe == Fraction(float(safe)), (
            f"{c.id} ({fmt}): safe upstream gradient {float(e.safe)!r}, expected {safe!r} "
            f"(sup = {mpmath.nstr(sup, 20)})"
        )
        gain = reference(c, fmt, w.inside)[w.point.index] / mp(float(w.inside))
        assert gain <= sup * (1 + SAME), (
            f"{c.id} ({fmt}): the witness's gain {mpmath.nstr(gain, 30)} exceeds the "
            f"supremum {mpmath.nstr(sup, 30)}"
        )
        below = largest_below(gain, dtype)
        assert below is not None, f"{c.id} ({fmt}): the witness's gain never overflows"
        outside = np.nextafter(below, dtype.type(np.inf))
        assert w.outside == Fraction(float(outside)), (
            f"{c.id} ({fmt}): witness.outside {float(w.outside)!r}, expected {outside!r} "
            f"(the witness's gain {mpmath.nstr(gain, 20)})"
        )
        steps = values_between(safe, outside)
        assert w.steps == steps, f"{c.id} ({fmt}): witness.steps {w.steps}, expected {steps}"
        if abs(gain - sup) <= SAME * sup:  # the sup is attained by a format input
            assert steps == 1, f"{c.id} ({fmt}): sup attained, yet {steps} steps"


#: The row norms small enough for an mpmath Jacobian (D^2 entries).
SIGN_CASES = [
    c
    for c in HALF_CASES
    if c.module in ("layernorm", "batchnorm", "rmsnorm", "centernorm")
    and dict(c.options)["dim"] <= 64
]


@pytest.mark.parametrize("c", SIGN_CASES, ids=lambda c: c.id)
def test_witness_signs_are_the_column_signs(c):
    """The witness's sign pattern is that of its column of the exact Jacobian (mpmath,
    forward mode), so ``dx[index] / size`` at ``g = size * signs`` is the column's
    absolute sum, the witness's gain used above."""
    e = c.envelope()
    point = e.witness.point
    a, _ = inputs(e, HALF, e.witness.inside)
    eps = point.options.get("eps", 0.0)
    if c.module == "batchnorm":
        block = reference_batchnorm.batchnorm_jacobian(a["x"], a["gamma"], a["beta"], eps)[0]
        column = [row[0] for row in block]
    else:
        norm = ROW_NORMS[c.module]
        jac = norm.reference("jacobian")(a["x"][0], a["gamma"], a["beta"], *norm.tail(eps))
        column = [row[0] for row in jac]
    signs = point.signs.ravel()
    with mpmath.workdps(DPS):
        for i, value in enumerate(column):
            expected = np.sign(float(value))
            assert signs[i] == expected, (
                f"{c.id}: sign at index {i}: got {signs[i]!r}, expected {expected!r} "
                f"(J_i0 = {mpmath.nstr(value, 12)})"
            )
        total = mpmath.fsum(abs(v) for v in column)
        size = e.witness.inside
        gain = reference(c, "float16", size)[point.index] / mp(float(size))
        assert abs(total - gain) <= SAME * total, (
            f"{c.id}: column sum {mpmath.nstr(total, 20)}, dx[index] / size {mpmath.nstr(gain, 20)}"
        )


@pytest.mark.parametrize("module", NO_WITNESS)
def test_modules_without_witness_never_overflow(module):
    """sup gain * 65504 < 65520: every float16 g is safe. The sups, from the references:
    sigmoid'(0) = 1/4, relu' = 1, softmax at (0, 0): column sum 2 y (1 - y) = 1/2,
    maxpool 1 (dx = g at the argmax), avgpool 1/D."""
    e = envelope(module, dim=4)
    assert e.safe is None and e.witness is None, f"{module}: safe {e.safe}, witness {e.witness}"
    with mpmath.workdps(DPS):
        if module == "sigmoid":
            gain = evaluate(elementwise("sigmoid").derivative, 0.0, DPS)
        elif module == "relu":
            gain = evaluate(elementwise("relu").derivative, 1.0, DPS)
        elif module == "softmax":
            jac = softmax_jacobian(np.zeros(2))
            gain = max(mpmath.fsum(abs(jac[i, j]) for i in range(2)) for j in range(2))
        elif module == "maxpool":
            gain = abs(maxpool_vjp(np.array([1.0, 0.0, 0.0, 0.0]), np.array(1.0))[0])
        else:
            gain = abs(avgpool_vjp(np.zeros(4), np.array(1.0))[0])
        assert abs(gain - mpmath.mpf(float(e.model.gain_max.value))) <= SAME, (
            f"{module}: gain {mpmath.nstr(gain, 20)}, envelope {float(e.model.gain_max.value)}"
        )
        assert largest_below(gain, HALF) is None, f"{module}: some float16 g overflows"


# --------------------------------------------------------------------------------------
# 3. The gains are suprema: sampling and hill climbing (evidence, not a proof)
# --------------------------------------------------------------------------------------

SAMPLED_DIMS = (2, 3, 4, 5, 6, 7, 8, 64, 100)
SAMPLED_EPS = 1e-5
JACOBIANS = {"layernorm": kernels.layernorm.jacobian, "rmsnorm": kernels.rmsnorm.jacobian}


def column_sum_slack(size: int) -> float:
    """Relative float64 error of ``max_j sum_i |J_ij|`` from the float64 kernel, derived:
    each entry errs by at most ``NORM_ROUNDINGS u S_ij`` (tests/helpers/tolerances.py, n = 0 for
    float64) with ``S_ij = |gamma_i| r (delta_ij + 1/D + |z_i z_j| / D)``; a column of
    S sums to ``|gamma| r (2 + |z_j| mean|z|) <= gain_2 (2 + sqrt(D))`` (``|z_j| <=
    sqrt(D)``, ``mean|z| <= 1``) and ``gain_2 <= gain_max`` (K(D) >= 1 for D >= 2). The
    column sum of D magnitudes adds ``(D - 1) u`` relative, the float of the gain ``u``:
    ``u (NORM_ROUNDINGS (2 + sqrt(D)) + D + 1)`` to first order, doubled for the
    second-order terms."""
    return 2 * UNIT_FLOAT64 * (NORM_ROUNDINGS * (2 + math.sqrt(size)) + size + 1)


def sigma_slack(size: int) -> float:
    """Relative float64 error of ``sigma_max(J)``: the entry errors above form a matrix of
    Frobenius norm ``<= NORM_ROUNDINGS u ||S||_F <= NORM_ROUNDINGS u gain_2 (sqrt(D) + 2)``
    (``||I||_F = sqrt(D)``, ``||11^T/D||_F = 1``, ``|| |z||z|^T / D ||_F = |z|^2/D <= 1``),
    which moves a singular value by at most that (Weyl); LAPACK's SVD is backward stable
    with a backward error ``p(D) u ||J||_2`` (LAPACK Users' Guide, section 4.9; p taken as
    D). Doubled for the second-order terms."""
    return 2 * UNIT_FLOAT64 * (NORM_ROUNDINGS * (math.sqrt(size) + 2) + size + 1)


def max_column_sum(module: str, x: np.ndarray) -> float:
    size = x.shape[0]
    jac = JACOBIANS[module](x, np.ones(size), np.zeros(size), eps=SAMPLED_EPS)
    return float(np.abs(jac).sum(axis=0).max())


def sigma_max(module: str, x: np.ndarray) -> float:
    size = x.shape[0]
    jac = JACOBIANS[module](x, np.ones(size), np.zeros(size), eps=SAMPLED_EPS)
    return float(np.linalg.svd(jac, compute_uv=False)[0])


def hill_climb(
    objective: Callable[[np.ndarray], float], start: np.ndarray, seed: int
) -> tuple[np.ndarray, float]:
    """Random-perturbation ascent: keep a Gaussian step when it increases the objective,
    shrink the step when it does not."""
    rng = np.random.default_rng(seed)
    best, value = start, objective(start)
    step = CLIMB_STEP * (float(np.sqrt(np.mean(start**2))) + math.sqrt(SAMPLED_EPS))
    for _ in range(CLIMB_STEPS):
        candidate = best + rng.normal(0.0, step, best.shape)
        score = objective(candidate)
        if score > value:
            best, value = candidate, score
        else:
            step *= 0.93
    return best, value


def _row(values: np.ndarray, scale: float) -> np.ndarray:
    return values * scale * math.sqrt(SAMPLED_EPS)


@pytest.mark.parametrize("size", SAMPLED_DIMS)
@pytest.mark.parametrize("module", tuple(JACOBIANS))
@settings(max_examples=12)
@given(data=st.data())
@example(data=None)  # the witness and x = 0, climbed
def test_sampled_gains_never_exceed_the_envelope(module, size, data):
    """Sampling evidence (not a proof): drawn and hill-climbed rows never beat the
    envelope's gains by more than the float64 error; the witness reaches the max-norm
    gain within REACH, x = 0 the 2-norm gain."""
    e = envelope(module, dim=size, eps=SAMPLED_EPS)
    gain_max = float(e.model.gain_max.value)
    gain_2 = float(e.model.gain_2.value)
    column_limit = gain_max * (1 + column_sum_slack(size))
    sigma_limit = gain_2 * (1 + sigma_slack(size))
    witness = e.witness.point.arrays["x"][0].astype(np.float64)
    if data is None:
        reached = max_column_sum(module, witness)
        assert reached >= gain_max * (1 - REACH), (
            f"{module} D = {size}: the witness's column sum {reached!r} is more than {REACH} "
            f"below the gain {gain_max!r}"
        )
        at_zero = sigma_max(module, np.zeros(size))
        assert at_zero >= gain_2 * (1 - REACH), (
            f"{module} D = {size}: sigma_max(J(0)) = {at_zero!r} < {gain_2!r}"
        )
        starts = [witness, np.zeros(size)]
    else:
        values = data.draw(hnp.arrays(np.float64, size, elements=st.floats(-4.0, 4.0)), label="x")
        scale = data.draw(st.sampled_from((0.01, 0.3, 1.0, 3.0, 30.0)), label="scale")
        starts = [_row(values, scale)]
    for k, start in enumerate(starts):
        for objective, limit, name in (
            (lambda v: max_column_sum(module, v), column_limit, "max_j sum_i |J_ij|"),
            (lambda v: sigma_max(module, v), sigma_limit, "sigma_max(J)"),
        ):
            point, value = hill_climb(objective, start, seed=k + 17 * size)
            at_start = objective(start)
            for where, got in ((start, at_start), (point, value)):
                assert got <= limit, (
                    f"{module} D = {size}: {name} = {got!r} at x = {where.tolist()} exceeds the "
                    f"envelope's gain, allowed up to {limit!r}"
                )


# --------------------------------------------------------------------------------------
# 4. Number formats
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ("float16", "float32"))
def test_format_limits_are_numpys(name):
    fmt, info = FORMATS[name], np.finfo(NUMPY_DTYPE[name])
    for what, got, expected in (
        ("max_finite", fmt.max_finite, info.max),
        ("smallest_normal", fmt.smallest_normal, info.smallest_normal),
        ("smallest_subnormal", fmt.smallest_subnormal, info.smallest_subnormal),
    ):
        assert got == Fraction(float(expected)), f"{name}.{what}: got {got}, expected {expected!r}"
    # The midpoint rule: the threshold is halfway from the largest value to the next binade.
    spacing = Fraction(float(info.max)) - Fraction(float(np.nextafter(info.max, 0 * info.max)))
    midpoint = Fraction(float(info.max)) + spacing / 2
    assert fmt.overflow == midpoint, f"{name}.overflow: got {fmt.overflow}, expected {midpoint}"
    dtype = NUMPY_DTYPE[name]
    at = float(fmt.overflow)
    below = float(np.nextafter(at, 0.0))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "overflow encountered in cast", RuntimeWarning)
        assert np.isinf(np.array(at).astype(dtype)), f"{name}: {at!r} should round to inf"
    assert np.array(below).astype(dtype) == info.max, f"{name}: {below!r} should round to max"
    assert np.isinf(round_to_dtype(at, dtype)), f"{name}: round_to_dtype({at!r}) is finite"
    assert round_to_dtype(below, dtype) == info.max, f"{name}: round_to_dtype({below!r})"


def test_float16_threshold_by_example():
    assert np.float16(65519.99) == np.float16(65504.0), "65519.99 must round to 65504"
    assert np.isinf(round_to_dtype(65520, HALF)), "65520 must round to inf"
    assert FORMATS["float16"].overflow == 65520 and float(threshold(HALF)) == 65520.0


def _numpy_round(value: float, dtype: np.dtype) -> Fraction | None:
    """``value`` converted by NumPy (None where it overflows to inf)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "overflow encountered in cast", RuntimeWarning)
        rounded = np.array(value).astype(dtype)
    return None if np.isinf(rounded) else Fraction(float(rounded))


def _check_round(name: str, value: float, numpy_value: Fraction | None) -> None:
    fmt = FORMATS[name]
    if numpy_value is None:
        with pytest.raises(ValueError, match="overflows"):
            fmt.round(Fraction(value))
        return
    got = fmt.round(Fraction(value))
    assert got == numpy_value, (
        f"{name}.round({value!r}): got {float(got)!r}, expected {float(numpy_value)!r}"
    )


def _tie(bits: int, dtype: np.dtype) -> float:
    """The midpoint between the value with these bits and its successor (exact in float64)."""
    width = np.dtype(f"u{dtype.itemsize}")
    low = np.array(bits, dtype=width).view(dtype)[()]
    high = np.nextafter(low, dtype.type(np.inf))
    return (float(low) + float(high)) / 2


@pytest.mark.parametrize("name", ("float16", "float32"))
@settings(max_examples=300)
@given(data=st.data())
@example(data=None)
def test_round_agrees_with_numpy(name, data):
    """Random float64 values in and past the range, and exact ties between neighbours."""
    dtype = NUMPY_DTYPE[name]
    top = float(np.finfo(dtype).max)
    if data is None:
        values = [0.0, 65519.99, 65520.0, 65504.0, 2.0**-25, 3 * 2.0**-26, 2.0**-14 - 2.0**-25]
        values += [
            float(np.finfo(dtype).smallest_subnormal) / 2,
            top,
            float(FORMATS[name].overflow),
        ]
    else:
        values = [
            data.draw(st.floats(-2 * top, 2 * top, allow_nan=False), label="value"),
            data.draw(st.floats(-(2.0**-10), 2.0**-10, allow_nan=False), label="small"),
        ]
        last = 0x7BFF if dtype == HALF else 0x7F7FFFFF  # the largest finite value's bits
        bits = data.draw(st.integers(0, last - 1), label="bits")
        values += [_tie(bits, dtype), -_tie(bits, dtype)]
    for value in values:
        _check_round(name, value, _numpy_round(value, dtype))


@settings(max_examples=200)
@given(bits=st.integers(1, 0x7BFE), gap=st.integers(1, 40))
@example(bits=0x0400, gap=3)  # the smallest normal: the binade below is the subnormal one
@example(bits=0x7BFE, gap=1)
def test_neighbours_agree_with_nextafter(bits, gap):
    fmt = FORMATS["float16"]
    value = np.array(bits, dtype=np.uint16).view(HALF)[()]
    v = Fraction(float(value))
    up, down = np.nextafter(value, HALF.type(np.inf)), np.nextafter(value, HALF.type(0))
    assert fmt.next_up(v) == Fraction(float(up)), (
        f"next_up({value!r}): {fmt.next_up(v)}, expected {up!r}"
    )
    assert fmt.next_down(v) == Fraction(float(down)), f"next_down({value!r}), expected {down!r}"
    assert fmt.neighbour(-v, True) == -Fraction(float(down)), f"neighbour(-{value!r}, up)"
    assert fmt.neighbour(-v, False) == -Fraction(float(up)), f"neighbour(-{value!r}, down)"
    assert fmt.round_down(v + (Fraction(float(up)) - v) / 3) == v, f"round_down near {value!r}"
    high = value
    for _ in range(gap):
        if high == np.finfo(HALF).max:
            break
        high = np.nextafter(high, HALF.type(np.inf))
    assert fmt.steps(v, Fraction(float(high))) == values_between(value, high), (
        f"steps({value!r}, {high!r})"
    )


def test_bfloat16_against_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fmt, bf16 = FORMATS["bfloat16"], np.dtype(ml_dtypes.bfloat16)
    info = ml_dtypes.finfo(bf16)
    assert fmt.max_finite == Fraction(float(info.max)), f"bfloat16 max: {info.max!r}"
    assert fmt.smallest_normal == Fraction(float(info.smallest_normal))
    assert fmt.smallest_subnormal == Fraction(float(info.smallest_subnormal))
    at = np.float32(float(fmt.overflow))  # 2^128 - 2^119 is a float32
    assert Fraction(float(at)) == fmt.overflow, "the threshold is a float32 value"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "overflow encountered in cast", RuntimeWarning)
        assert np.isinf(float(at.astype(bf16))), "the threshold must round to inf"
    below = np.nextafter(at, np.float32(0))
    assert float(below.astype(bf16)) == float(info.max), "just below it: the largest value"
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 0x7F800000, 4000, dtype=np.uint32)
    ties = (bits & np.uint32(0xFFFF0000)) | np.uint32(0x8000)  # exactly halfway
    for value in np.concatenate([bits, ties]).view(np.float32):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "overflow encountered in cast", RuntimeWarning)
            rounded = float(value.astype(bf16))
        expected = None if math.isinf(rounded) else Fraction(rounded)
        _check_round("bfloat16", float(value), expected)


# --------------------------------------------------------------------------------------
# 5. The command line
# --------------------------------------------------------------------------------------

LAYERNORM_4096 = ["envelope", "layernorm", "--dim", "4096", "--eps", "1e-5"]


def test_cli_prints_the_safe_size_and_a_witness(capsys):
    e = envelope("layernorm", dim=4096, eps=1e-5)
    start = time.perf_counter()
    status = cli.main(LAYERNORM_4096)
    elapsed = time.perf_counter() - start
    out = capsys.readouterr().out
    assert status == 0, f"status {status}"
    safe = f"{float(e.safe):.8g}"
    assert f"max|g_i| <= {safe} " in out, f"safe size {safe} not printed:\n{out}"
    lines = out.splitlines()
    assert any(line.startswith("witness: ") for line in lines), f"no witness line:\n{out}"
    assert any(f"at size {safe}:" in line and "finite" in line for line in lines), out
    outside = f"{float(e.witness.outside):.8g}"
    assert any(f"at size {outside} " in line and "rounds to inf" in line for line in lines), out
    assert elapsed < CLI_SECONDS, f"liptable envelope layernorm --dim 4096 took {elapsed:.2f} s"


def test_cli_json(capsys):
    e = envelope("layernorm", dim=4096, eps=1e-5)
    assert cli.main([*LAYERNORM_4096, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["safe_upstream_gradient"] == float(e.safe), data["safe_upstream_gradient"]
    assert data["witness"]["outside"] == float(e.witness.outside), data["witness"]
    assert data["witness"]["steps"] == e.witness.steps


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["envelope", "nosuchmodule"], "module"),
        (["envelope", "layernorm", "--dtype", "int8"], "--dtype"),
        (["envelope", "layernorm", "--dim", "0"], "dim"),
        (["envelope", "layernorm", "--eps", "-1"], "eps"),
    ],
)
def test_cli_bad_input_names_the_argument(capsys, argv, name):
    try:
        status = cli.main(argv)
    except SystemExit as exit_:
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2, f"{argv}: status {status}"
    assert name in err, f"{argv}: the message does not name {name!r}: {err!r}"


# --------------------------------------------------------------------------------------
# 6. Huge sizes: LayerNorm's K(D) without a scan, witnesses too large to build
# --------------------------------------------------------------------------------------

#: Sizes at which the maximizing k of LayerNorm's K(D) is checked against every k (arb,
#: proofs.envelope._best_k): all D up to 400, across the switch from comparing every k to
#: the bracket of the cubic p (D = LAYERNORM_DIP_FROM), the report's sizes, and D = 262144,
#: where the float scan used before (a 1e-12 relative tie margin) chose k - 1, 5e-13 short.
EXHAUSTIVE_DIMS = (*range(2, 401), 768, 1024, 4096, 8192, 262144)


def test_layernorm_k_is_the_maximum_over_every_k():
    wrong = [size for size in EXHAUSTIVE_DIMS if not envelope_proofs._best_k(size)]
    assert not wrong, f"layernorm_k's k is not the best over every k at D = {wrong[:10]}"


def test_layernorm_dip_found_exactly_from_the_switch_over():
    """Below LAYERNORM_DIP_FROM every k is compared; from it on the bracket of p is used."""
    found = [size for size in range(2, 5000) if env.layernorm_dip(size) is not None]
    assert found == list(range(env.LAYERNORM_DIP_FROM, 5000)), (
        f"p has an integer dip first at D = {found[0]}, expected {env.LAYERNORM_DIP_FROM}"
    )


@pytest.mark.parametrize("size", range(env.LAYERNORM_DIP_FROM - 3, env.LAYERNORM_DIP_FROM + 300, 7))
def test_bracket_agrees_with_every_k_around_the_switch_over(size):
    """The two candidates of the bracket and every k give the same choice (the same arb
    comparisons), on both sides of LAYERNORM_DIP_FROM."""
    every = env._layernorm_best(size, range(1, size - 1))
    chosen = env.layernorm_k(size)
    assert chosen[1] == every[1], f"D = {size}: k = {chosen[1]}, every k gives {every[1]}"
    assert chosen[0].formula == every[0].formula


@pytest.mark.parametrize(
    "size", [40, 41, 57, 58, 64, 768, 8192, 262144, 10**6 + 3, 123456789, 10**9]
)
def test_layernorm_peak_proof_verifies(size):
    verification = envelope_proofs.layernorm_peak_proof(size).verify()
    assert verification.ok, verification.summary()


@pytest.mark.parametrize("size", [768, 10**9])
def test_layernorm_peak_proof_rejects_a_neighbouring_k(monkeypatch, size):
    _, k, _ = env.layernorm_k(size)
    wrong = env.k_value(size, k + 1)
    monkeypatch.setattr(envelope_proofs, "layernorm_k", lambda d: wrong)
    assert not envelope_proofs._peak_best(size), f"D = {size}: k + 1 = {k + 1} accepted"


#: One small configuration per module with a witness: each is built normally and with the
#: array limit lowered below its size; everything but the arrays must be the same.
UNBUILT_CASES = [
    case("layernorm", dim=768, eps=1e-5),
    case("layernorm", dim=8, eps=1e-5),
    case("batchnorm", dim=256, eps=1e-12),
    case("rmsnorm", dim=768, eps=1e-6),
    case("rmsnorm", dim=3, eps=1e-6),
    case("centernorm", dim=64, gamma_max=3.3),
    case("weightnorm", dim=16, out_dim=64, eps=1e-3, gamma_max=0.1),
    case("linear", dim=16, out_dim=300, weight_max=0.07),
    case("residual", dim=100, weight_max=1 / 3),
    case("weighted_residual", dim=64, weight_max=0.1, nu_max=0.3),
    case("conv2d", channels=3, out_dim=5, kernel=4, stride=2, weight_max=0.75),
    case("dp_attention", tokens=3, dim=4, out_dim=2, weight_max=0.5),
    case("dp_attention", tokens=1, dim=3),
    case("l2_attention", tokens=8, dim=16),
    case("scs_attention", tokens=4, dim=5),
    case("scs_attention", tokens=3, dim=2, eps=2**-7),
    case("scs_attention", tokens=4, dim=1, eps=2**-7),
]


@pytest.mark.parametrize("c", UNBUILT_CASES, ids=lambda c: c.id)
def test_a_witness_too_large_to_build_keeps_its_values(monkeypatch, c):
    """Past WITNESS_ENTRIES the witness has no arrays, says so in one line, and keeps the
    same column, gain, sizes and steps (they never depended on the arrays)."""
    built = envelope(c.module, **dict(c.options))
    entries = sum(v.size for v in built.witness.point.arrays.values())
    entries += built.witness.point.signs.size
    monkeypatch.setattr(envelope_core, "WITNESS_ENTRIES", entries - 1)
    e = envelope(c.module, **dict(c.options))
    w, b = e.witness, built.witness
    assert w.point.arrays is None and w.point.signs is None, f"{c.id}: arrays built"
    assert w.point.unbuilt.startswith("witness not built: "), w.point.unbuilt
    assert f"in all, more than {entries - 1})" in w.point.unbuilt, w.point.unbuilt
    for name in ("inside", "outside", "steps", "inside_dx", "outside_dx"):
        assert getattr(w, name) == getattr(b, name), (
            f"{c.id}: witness.{name} {getattr(w, name)!r}, built {getattr(b, name)!r}"
        )
    assert (w.point.index, w.point.description, w.point.options) == (
        b.point.index,
        b.point.description,
        b.point.options,
    )
    assert e.safe == built.safe
    extra = [line for line in e.lines() if line not in built.lines()]
    assert extra == [f"  {w.point.unbuilt}: the sizes above come from its exact column gain."], (
        f"{c.id}: the text differs by {extra}"
    )
    data = e.as_dict()["witness"]
    assert data["arrays"] is None and data["not_built"] == w.point.unbuilt, data
    with pytest.raises(ValueError, match="witness not built"):
        kernel_dx(e, w.inside)
    monkeypatch.setattr(envelope_core, "WITNESS_ENTRIES", entries)
    again = envelope(c.module, **dict(c.options)).witness.point
    assert again.arrays is not None and again.unbuilt == "", f"{c.id}: not built at the limit"


def test_huge_linear_and_layernorm_values():
    """At D = 10^9 the gains are the closed forms and the safe sizes the largest float16
    values below 65520 / gain (recomputed here with nextafter)."""
    e = envelope("linear", dim=10**9)
    assert e.model.gain_max.value.exact == 10**9
    with mpmath.workdps(DPS):
        assert e.safe == Fraction(float(largest_below(mpmath.mpf(10**9), HALF)))
    ln = envelope("layernorm", dim=10**9, eps=1e-5)
    k_real, k, _ = env.layernorm_k(10**9)
    assert k == 500031624
    with mpmath.workdps(DPS):
        a, b = mpmath.mpf(k), mpmath.sqrt(mpmath.mpf(10**9 - 1) * k * (10**9 - k))
        value = 2 * (a + b) / 3 * mpmath.sqrt((a + b) / (3 * (b - a))) / 10**9
        low, high = (mpmath.mpf(v) for v in k_real.enclosure())
        assert low * (1 - PRINTED) <= value <= high * (1 + PRINTED), (
            f"K(10^9) = {value}, enclosure [{low}, {high}]"
        )
        sup = value / mpmath.sqrt(mp(1e-5))
        assert ln.safe == Fraction(float(largest_below(sup, HALF)))
    assert ln.witness.point.arrays is None and "D = 1000000000" in ln.witness.point.unbuilt


#: The commands of the huge-size defects (hang, "Unable to allocate 6.94 EiB").
HUGE = "1000000000"
HUGE_COMMANDS = [
    *(
        [module, "--dim", HUGE, "--eps", "1e-5"]
        for module in ("layernorm", "rmsnorm", "batchnorm", "centernorm")
    ),
    *(
        [module, "--dim", HUGE]
        for module in ("linear", "weightnorm", "residual", "weighted_residual")
    ),
    ["linear", "--dim", "3", "--out-dim", HUGE],
    ["layernorm", "--dim", HUGE, "--eps", "1e-12", "--dtype", "float32", "--json"],
]


@pytest.mark.parametrize("argv", HUGE_COMMANDS, ids=" ".join)
def test_cli_answers_at_huge_sizes(argv):
    """Within SECONDS and MEMORY (tests/helpers/cli_subprocess.py): the envelope, with the
    witness described but not built."""
    outcome = cli_subprocess.run(["envelope", *argv])
    cli_subprocess.assert_answers_or_refuses(outcome)
    assert outcome.status == 0, outcome.describe()
    assert "witness not built: " in outcome.out, outcome.describe()


def test_models_are_the_catalog_envelopes():
    """The drift check: ``liptable envelope`` offers the catalog's names; they must be
    exactly the modules with a model."""
    keys = envelope_keys()
    assert len(keys) == len(set(keys)), f"duplicate envelope keys: {keys}"
    assert set(models()) == set(keys), (
        f"models without a catalog key: {set(models()) - set(keys)}, "
        f"catalog keys without a model: {set(keys) - set(models())}"
    )


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Config)])
def test_every_config_field_reaches_the_envelope(monkeypatch, capsys, name):
    """The drift check of the --tau-max defect: ``--<field>`` is an option of ``liptable
    envelope`` and its value arrives in ``envelope()``'s configuration."""
    kind = typing.get_type_hints(Config)[name]
    value = 3 if int in typing.get_args(kind) or kind is int else 0.375
    received: dict[str, Any] = {}

    def record(module: str, dtype: str = "float16", **config: Any) -> None:
        received.update(config)
        raise ValueError("recorded")

    monkeypatch.setattr(env, "envelope", record)
    option = "--" + name.replace("_", "-")
    status = cli.main(["envelope", "layernorm", option, str(value)])
    err = capsys.readouterr().err
    assert status == 2 and err.strip() == "liptable envelope: recorded", (
        f"{option}: status {status}, stderr {err!r}"
    )
    assert received.get(name) == value, f"{option} {value}: envelope() received {received}"


@pytest.mark.parametrize("module", ["layernorm", "rmsnorm", "batchnorm"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_witness_text_prints_the_values_its_arrays_hold(module, dtype):
    """The witness row is described by the format values the arrays hold (each printed so
    that it reads back exactly), not by the unrounded maximizer they were rounded from."""
    e = envelope(module, dtype, dim=4096, eps=1e-5)
    x = e.witness.point.arrays["x"]
    text = e.witness.point.description
    printed = text.split(" values next to")[0]
    numbers = [float(v) for v in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", printed)]
    assert len(numbers) >= 2, text
    assert set(numbers) == set(np.unique(x.astype(np.float64)).tolist()), text
