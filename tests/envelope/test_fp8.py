"""The FP8 formats of ``liptable envelope`` (E5M2, E4M3), checked against ml_dtypes."""

from __future__ import annotations

import itertools
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from derive.cli import main
from derive.envelope.core import FORMATS, Real, safe_gradient
from derive.envelope.modules import envelope, kernel_dx
from derive.envelope.scaling import Recipe, growth_limit, growth_witness, overflows

FP8 = {"float8_e5m2": ml_dtypes.float8_e5m2, "float8_e4m3fn": ml_dtypes.float8_e4m3fn}


def _values(fmt) -> list[Fraction]:
    """Every nonnegative finite value of the format, by stepping up from 0."""
    out, v = [Fraction(0)], Fraction(0)
    while (v := fmt.next_up(v)) is not None:
        out.append(v)
    return out


@pytest.mark.parametrize("name", FP8)
def test_fp8_formats_are_ml_dtypes(name):
    """The same finite values (all 256 bit patterns), the same largest and smallest values,
    the same rounding of every midpoint (ties to even) and the same overflow: E5M2 to inf
    from 61440 on, E4M3 to NaN above 464 (464 itself rounds to 448). ml_dtypes rounds a
    float64 to FP8 through float32, so float64 values within float32's spacing of the
    threshold round twice there; the threshold is checked from float32 values."""
    fmt, dtype = FORMATS[name], FP8[name]
    info = ml_dtypes.finfo(dtype)
    bits = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
    theirs = sorted({float(v) for v in bits if np.isfinite(v) and v >= 0})
    mine = [float(v) for v in _values(fmt)]
    assert mine == theirs
    assert float(fmt.max_finite) == float(info.max)
    assert float(fmt.smallest_normal) == float(info.smallest_normal)
    assert float(fmt.smallest_subnormal) == float(info.smallest_subnormal)
    values = _values(fmt)
    for low, high in itertools.pairwise(values):
        middle = (low + high) / 2
        expected = float(np.array([float(middle)]).astype(dtype).astype(np.float64)[0])
        assert float(fmt.round(middle)) == expected, (name, low, high)
    # from float32: ml_dtypes casts float64 through float32 (a second rounding), so a float64
    # just below 61440 becomes inf in E5M2 and one just above 464 becomes 448 in E4M3
    top = np.float32(fmt.overflow)
    near = [top, np.nextafter(top, np.float32(0)), np.nextafter(top, np.float32(np.inf))]
    cast = np.array(near, dtype=np.float32).astype(dtype)
    at, below, above = cast.astype(np.float64)
    assert below == float(info.max)
    if fmt.strict_overflow:  # no infinity: the midpoint rounds to the largest value (even)
        assert at == float(info.max) and np.isnan(above)
    else:
        assert np.isinf(at) and np.isinf(above)


def test_strict_overflow_decides_the_exact_midpoint():
    """A gain that puts g * gain exactly on the threshold: safe in E4M3 (464 rounds to 448),
    an overflow in float16 (65520 rounds to inf), as ml_dtypes and NumPy round."""
    e4m3, half = FORMATS["float8_e4m3fn"], FORMATS["float16"]
    gain = Real.rational(Fraction(464, 416))  # 416 is an E4M3 value: 416 * gain = 464
    assert safe_gradient(gain, e4m3) == 416
    assert np.isfinite(np.array([464.0]).astype(ml_dtypes.float8_e4m3fn).astype(float))[0]
    assert np.isnan(np.array([448 * 464 / 416]).astype(ml_dtypes.float8_e4m3fn).astype(float))[0]
    gain = Real.rational(Fraction(65520, 32768))  # 32768 * gain = 65520 exactly
    assert safe_gradient(gain, half) == 32752
    with np.errstate(over="ignore"):
        assert np.isinf(np.float16(65520.0))


@pytest.mark.parametrize("name", FP8)
@pytest.mark.parametrize("module", ["gelu", "swish", "relu", "layernorm"])
def test_fp8_envelope_is_tight_against_ml_dtypes(name, module):
    """At the witness the exact dx at the safe size rounds to a finite FP8 value and at the
    next value overflows (inf, or NaN for E4M3), as ml_dtypes rounds those exact values."""
    e = envelope(module, name, dim=64, eps=1e-5)
    w = e.witness
    if w is None:  # never overflows: every finite g is safe
        assert e.safe is None and module == "relu"
        return
    inside = float(w.inside_dx[1])
    outside = float(w.outside_dx[0])
    dtype = FP8[name]
    assert np.isfinite(np.array([inside]).astype(dtype).astype(float))[0], (inside, w)
    assert not np.isfinite(np.array([outside]).astype(dtype).astype(float))[0], (outside, w)
    assert w.steps == 1 and e.safe == w.inside


@pytest.mark.parametrize("name", FP8)
@pytest.mark.parametrize("module", ["gelu", "swish", "layernorm", "rmsnorm", "batchnorm"])
def test_fp8_witness_through_the_kernels(name, module):
    """``kernel_dx`` in FP8 (the float64 kernel on the witness's FP8 values, dx rounded once
    to the format: mixed mode): every entry finite at the safe size, and the witness's entry
    inf (E5M2) or NaN (E4M3, which has no infinity) one format step past it."""
    e = envelope(module, name, dim=64, eps=1e-5)
    w = e.witness
    inside, outside = kernel_dx(e, w.inside), kernel_dx(e, w.outside)
    assert inside.dtype == outside.dtype == np.dtype(FP8[name])
    assert np.all(np.isfinite(inside.astype(np.float64))), (module, inside)
    past = float(outside[w.point.index])
    assert np.isinf(past) if name == "float8_e5m2" else np.isnan(past), (module, past)
    with pytest.raises(ValueError, match="strict"):
        kernel_dx(e, w.inside, strict_fp16=True)


@pytest.mark.parametrize("name", FP8)
def test_fp8_composite_blocks_are_not_checked(name):
    """Mixed mode would round a residual's branch output to FP8 before the sum; the float64
    kernel does not, so kernel_dx refuses rather than give another computation's result."""
    e = envelope("residual", name, dim=8, weight_max=0.1)
    with pytest.raises(ValueError, match="no kernels for residual"):
        kernel_dx(e, e.witness.inside)


@pytest.mark.parametrize(
    ("name", "limit"), [("float8_e4m3fn", (29, 28)), ("float8_e5m2", (15, 14))]
)
@pytest.mark.parametrize("margin", [0, 1, 3])
def test_delayed_scaling_growth_limit_is_exact(name, limit, margin):
    """R = 2^margin T / M (29/28 for E4M3, 15/14 for E5M2, times 2^margin). Exactly R is
    safe for E4M3 (the scaled amax lands on 464, which rounds to 448) and overflows E5M2
    (61440 rounds to inf); just past R overflows both; and no sequence whose every step
    grows by less than R (at most R for E4M3) overflows, whatever its dips and history."""
    fmt = FORMATS[name]
    R = Fraction(*limit) * 2**margin
    for history in (1, 4, 16):
        recipe = Recipe("delayed", history, margin)
        assert growth_limit(fmt, recipe) == R
        at = overflows(fmt, recipe, growth_witness(fmt, recipe, R))
        assert (at is None) == fmt.strict_overflow
        past = growth_witness(fmt, recipe, R * Fraction(1025, 1024))
        assert overflows(fmt, recipe, past) == history
        rng = np.random.default_rng(history + 10 * margin)
        for _ in range(50):
            steps = [Fraction(1)]
            for _ in range(40):  # growths up to the limit, and dips of up to 1/8
                u = Fraction(int(rng.integers(0, 1024)), 1024)
                cap = R if fmt.strict_overflow else R * Fraction(1023, 1024)
                steps.append(steps[-1] * (Fraction(1, 8) + u * (cap - Fraction(1, 8))))
            assert overflows(fmt, recipe, steps) is None
    current = Recipe("current", 1, margin)
    assert growth_limit(fmt, current) is None
    assert overflows(fmt, current, [Fraction(1), Fraction(10**6), Fraction(1, 10**6)]) is None


def test_scaling_recipe_from_the_command_line(capsys):
    args = ["envelope", "gelu", "--dtype", "float8_e4m3fn", "--scaling", "delayed"]
    assert main([*args, "--margin", "1", "--history", "4"]) == 0
    out = capsys.readouterr().out
    assert "at most 2^1 x 464/448 = 2.071428571 never overflows" in out
    assert "then amax 2.071428571: no overflow" in out and "overflows at that step." in out
    assert main([*args, "--history", "0"]) == 2
    assert "history: expected a positive integer" in capsys.readouterr().err
