"""ReLU's float32 and mixed float16 and bfloat16 loops select (``derive/codegen/exact.py``).

Against an independent reference: the input widened exactly by NumPy (float16) or
ml_dtypes (bfloat16), the definition evaluated in float64 (``x if x > 0 else 0``, its
derivative ``1 if x > 0 else 0``, the VJP ``g`` times that; NaN gives NaN, and ``inf * 0`` is
NaN), and the result converted back, exactly, since each value is one the format holds.
Every one of the 65,536 inputs of each 16-bit format for the forward and the derivative;
for the VJP every x against gradients that take each path of the selection (signed zeros,
subnormals, the largest finite values, infinities and NaNs) and random ones. float32: the
same special values and 2^20 random bit patterns (``liptable certify relu --dtype float32``
checks the forward at every float32). Where the
reference is NaN the kernel's result must be a NaN (the payload of ``NaN * NaN`` is not
fixed by IEEE); everywhere else it must have the reference's bits, signed zeros included.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import sympy as sp

from derive.codegen import exact, generate
from derive.codegen.activations import StableForm, stable_form
from derive.codegen.generate import limits
from derive.definitions.activations import ELEMENTWISE, x
from kernels import relu
from tests.helpers.assertions import assert_same_bits

FORMATS = {
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
}

#: Gradient bits that reach each branch of the VJP's selection, per format: +-0, the
#: smallest subnormals, +-1, the largest finite values, +-inf, quiet and signaling NaNs of
#: both signs.
SPECIAL_GRADIENTS = {
    "float16": (0x0000, 0x8000, 0x0001, 0x8001, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF, 0x7C00,
                0xFC00, 0x7E00, 0xFE00, 0x7C01, 0xFD55),
    "bfloat16": (0x0000, 0x8000, 0x0001, 0x8001, 0x3F80, 0xBF80, 0x7F7F, 0xFF7F, 0x7F80,
                 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFFAA),
    "float32": (0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x3F800000, 0xBF800000,
                0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                0x7F800001, 0xFFAAAAAA),
}  # fmt: skip


def _bits_type(dtype: np.dtype) -> type:
    return np.uint32 if dtype.itemsize == 4 else np.uint16


def _every_value(dtype: np.dtype) -> np.ndarray:
    """Every value of a 16-bit format; for float32, the special gradients' values and 2^20
    random bit patterns."""
    if dtype.itemsize == 2:
        return np.arange(1 << 16, dtype=np.uint16).view(dtype)
    rng = np.random.default_rng(11)
    special = np.array(SPECIAL_GRADIENTS["float32"], dtype=np.uint32)
    patterns = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([special, patterns]).view(dtype)


def _wide(values: np.ndarray) -> np.ndarray:
    """Exactly to float64 (ml_dtypes warns of the NaNs it converts)."""
    with np.errstate(invalid="ignore"):
        return values.astype(np.float64)


def _round_back(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return values.astype(dtype)


def _reference(quantity: str, xs: np.ndarray, gs: np.ndarray | None = None) -> np.ndarray:
    wide = _wide(xs)
    positive = wide > 0
    if quantity == "forward":
        value = np.where(positive, wide, 0.0)
    else:
        value = np.where(positive, 1.0, 0.0)
        if gs is not None:
            with np.errstate(invalid="ignore"):
                value = _wide(gs) * value
    value = np.where(np.isnan(wide), np.nan, value)
    return _round_back(value, xs.dtype)


def _assert_matches(what: str, actual: np.ndarray, expected: np.ndarray, inputs) -> None:
    nan = np.isnan(_wide(expected))
    assert np.isnan(_wide(actual[nan])).all(), f"{what}: a NaN input gave a number"
    assert_same_bits(what, actual[~nan], expected[~nan], inputs[~nan])


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("quantity", ["forward", "derivative"])
def test_every_input_gives_the_float64_definition_exactly(name, quantity):
    xs = _every_value(FORMATS[name])
    actual = getattr(relu, quantity)(xs)
    _assert_matches(f"relu {quantity} {name}", actual, _reference(quantity, xs), xs)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_vjp_gives_g_times_the_derivative_exactly(name):
    dtype = FORMATS[name]
    xs = _every_value(dtype)
    bits_type = _bits_type(dtype)
    rng = np.random.default_rng(7)
    top = 1 << (8 * dtype.itemsize)
    gradients = [*SPECIAL_GRADIENTS[name], *rng.integers(0, top, 18, dtype=np.uint64)]
    for bits in gradients:
        gs = np.full(xs.shape, bits, dtype=bits_type).view(dtype)
        actual = relu.vjp(xs, gs)
        _assert_matches(
            f"relu vjp {name}, g bits {int(bits):#06x}", actual, _reference("vjp", xs, gs), xs
        )
    pairs = rng.integers(0, top, (2, 1 << 20), dtype=np.uint64).astype(bits_type).view(dtype)
    actual = relu.vjp(pairs[0], pairs[1])
    _assert_matches(f"relu vjp {name}, random pairs", actual, _reference("vjp", *pairs), pairs[0])


def test_only_forms_that_select_get_selecting_loops():
    """ReLU qualifies; every form that computes (exp, erfc, a quotient) does not, and those
    are the ones that take the error-bounded loops."""
    chosen = {m.key for m in ELEMENTWISE if generate.selects(m)}
    assert chosen == {"relu"}
    assert {m.key for m in ELEMENTWISE if generate.bounded(m)} == {
        m.key for m in ELEMENTWISE
    } - chosen


def test_a_branch_that_is_not_the_limit_at_infinity_is_refused():
    """At +-inf the selection returns the branch its condition picks; a form whose limit
    there is another value must keep the float64 path."""
    forward, derivative = stable_form("relu", "forward"), stable_form("relu", "derivative")
    assert exact.exact(forward, derivative, limits)

    def wrong_limits(form: StableForm):
        low, high = limits(form)
        return (low, high + 1) if form.quantity == "derivative" else (low, high)

    assert not exact.exact(forward, derivative, wrong_limits)


def test_constants_the_format_cannot_hold_are_refused():
    """A branch constant must be a value of both 16-bit formats (1/3 is not)."""
    third = StableForm(
        "relu", "derivative", sp.Piecewise((sp.Rational(1, 3), x > 0), (0, True)), ""
    )
    forward = stable_form("relu", "forward")
    assert not exact.exact(forward, third, lambda form: (0, sp.Rational(1, 3)))
