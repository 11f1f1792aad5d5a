"""The glue kernels (``kernels.cast``): the cast to float16, bfloat16 and the FP8 formats and
the add, against an exact reference written here with fractions (every finite value of the
format listed, the nearest taken, ties to the even significand), at every value, every
midpoint and its float64 neighbours, random float64 inputs of every magnitude, and every
pair of FP8 values for the add."""

from __future__ import annotations

import bisect
import functools
import itertools
from fractions import Fraction

import ml_dtypes
import numba
import numpy as np
import pytest

import kernels.cast as cast_module
from kernels._f16 import (
    float32_to_half_bits,
    half_bits_to_float64,
    narrow_float32_to_half_array,
    narrow_to_half_array,
    reinterpret,
)
from kernels._grain import GRAIN, one_thread
from kernels.cast import FORMATS, add, cast, widen
from tests.helpers.assertions import assert_same_bits

NAMES = tuple(FORMATS)


def _all(fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Every bit pattern of the format and its value as float64 (NaNs quiet)."""
    dtype = FORMATS[fmt][0]
    bits = np.arange(1 << (8 * dtype.itemsize), dtype=f"u{dtype.itemsize}")
    with np.errstate(invalid="ignore"):  # signaling NaN patterns become quiet NaNs
        return bits, bits.view(dtype).astype(np.float32).astype(np.float64)


def _values(fmt: str) -> list[tuple[Fraction, int]]:
    """(value, bit pattern) of every finite nonnegative value of the format, ascending."""
    bits, values = _all(fmt)
    finite = np.isfinite(values) & (values >= 0) & ~np.signbit(values)
    pairs = zip(values[finite], bits[finite], strict=True)
    return sorted((Fraction(float(v)), int(b)) for v, b in pairs)


_TABLES = {name: _values(name) for name in NAMES}
_VALUES = {name: [v for v, _ in table] for name, table in _TABLES.items()}


def _reference(fmt: str, x: float) -> float:
    """x rounded to nearest, ties to even, with the format's overflow rule."""
    _, _, _, _, threshold, no_infinity = FORMATS[fmt]
    if x != x:
        return float("nan")
    a = Fraction(abs(x)) if abs(x) != float("inf") else None
    if a is None or a > threshold or (a == threshold and not no_infinity):
        return float("nan") if no_infinity else float(np.copysign(np.inf, x))
    table, values = _TABLES[fmt], _VALUES[fmt]
    k = bisect.bisect_left(values, a)
    if k < len(values) and values[k] == a:
        chosen = values[k]
    elif k == len(values):  # above the largest value, below the overflow threshold
        chosen = values[-1]
    else:
        (low, low_bits), (high, _) = table[k - 1], table[k]
        if a - low != high - a:
            chosen = low if a - low < high - a else high
        else:  # the tie goes to the even significand: the even bit pattern
            chosen = low if low_bits % 2 == 0 else high
    return float(np.copysign(float(chosen), x))


def _same(got: np.ndarray, expected: list[float]) -> None:
    want = np.array(expected)
    got64 = got.astype(np.float64)
    both_nan = np.isnan(got64) & np.isnan(want)
    equal = (got64 == want) & (np.signbit(got64) == np.signbit(want))
    bad = np.flatnonzero(~(both_nan | equal))
    assert bad.size == 0, [(i, got64[i], want[i]) for i in bad[:5]]


def _midpoints(fmt: str) -> np.ndarray:
    """Every midpoint between neighbouring values, the midpoint above the largest, and the
    float64 numbers on either side of each, with both signs."""
    values = [float(v) for v, _ in _TABLES[fmt]]
    mids = [(a + b) / 2 for a, b in itertools.pairwise(values)]
    mids.append(FORMATS[fmt][4])
    points = np.array(mids)
    around = np.concatenate([points, np.nextafter(points, 0), np.nextafter(points, np.inf)])
    return np.concatenate([around, -around])


@pytest.mark.parametrize("fmt", NAMES)
def test_every_value_is_kept(fmt):
    bits, wide = _all(fmt)
    got = cast(wide, fmt)
    finite = np.isfinite(wide)
    assert np.array_equal(got.view(bits.dtype)[finite], bits[finite])
    assert np.isnan(got.astype(np.float64)[np.isnan(wide)]).all()


@pytest.mark.parametrize("fmt", NAMES)
def test_midpoints_and_their_neighbours_round_to_nearest_even(fmt):
    points = _midpoints(fmt)
    _same(cast(points, fmt), [_reference(fmt, float(p)) for p in points])


@pytest.mark.parametrize("fmt", NAMES)
def test_random_float64_of_every_magnitude(fmt):
    rng = np.random.default_rng(17)
    x = rng.uniform(1, 2, 4000) * 2.0 ** rng.integers(-150, 140, 4000)
    x *= rng.choice((-1.0, 1.0), 4000)
    x = np.concatenate([x, [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324]])
    _same(cast(x, fmt), [_reference(fmt, float(v)) for v in x])


@pytest.mark.parametrize("fmt", ["bfloat16", "float8_e5m2", "float8_e4m3fn"])
def test_the_double_rounding_of_astype_is_avoided(fmt):
    """Through float32 (what ml_dtypes' astype does), a float64 just below a midpoint can
    become the midpoint and then go to even, away from the nearest value; cast does not.
    (NumPy's own float64 -> float16 cast rounds once: the two agree there.)"""
    dtype, precision = FORMATS[fmt][0], FORMATS[fmt][1]
    values = [float(v) for v, _ in _TABLES[fmt]]
    k = next(i for i in range(1, len(values) - 1) if (_TABLES[fmt][i][1] % 2) == 1)
    low, high = values[k], values[k + 1]  # low odd: the midpoint ties to high
    x = np.nextafter((low + high) / 2, 0)  # below the midpoint: nearest is low
    assert float(np.float32(x)) == (low + high) / 2  # float32 lands on the midpoint
    assert float(np.array([x]).astype(dtype).astype(np.float64)[0]) == high
    assert float(cast(np.array([x]), fmt).astype(np.float64)[0]) == low
    assert precision < 24
    halves = np.linspace(-70000, 70000, 100001)
    with np.errstate(over="ignore"):  # beyond 65520 both give inf
        numpy_halves = halves.astype(np.float16)
    assert np.array_equal(cast(halves, "float16"), numpy_halves)


@pytest.mark.parametrize("fmt", ["float8_e5m2", "float8_e4m3fn"])
def test_add_of_every_fp8_pair_is_the_rounded_exact_sum(fmt):
    dtype = FORMATS[fmt][0]
    bits = np.arange(256, dtype=np.uint8)
    a, b = np.meshgrid(bits, bits)
    a, b = a.ravel().view(dtype), b.ravel().view(dtype)
    got = add(a, b)
    wa, wb = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):
        exact = wa + wb  # exact in float64 for FP8 values
    _same(got, [_reference(fmt, float(v)) for v in exact])


def test_add_of_far_apart_bfloat16_values():
    """bfloat16 sums are not always exact in float64 (exponents 2^-133..2^127), yet the
    float64 sum rounds to the correctly rounded one (module docstring)."""
    rng = np.random.default_rng(3)
    big = (rng.uniform(1, 2, 2000) * 2.0 ** rng.integers(-20, 120, 2000)).astype(np.float32)
    small = (rng.uniform(-2, 2, 2000) * 2.0 ** rng.integers(-133, -60, 2000)).astype(np.float32)
    a = cast(big, "bfloat16")
    b = cast(small, "bfloat16")
    got = add(a, b)
    expected = [
        _reference("bfloat16", float(Fraction(float(x)) + Fraction(float(y))))
        for x, y in zip(a.astype(np.float64), b.astype(np.float64), strict=True)
    ]
    _same(got, expected)
    assert np.array_equal(got.view(np.uint16), a.view(np.uint16))  # the small one vanishes


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_the_shape_is_kept_zero_dimensional_included(fmt):
    """A 0-d input gives a 0-d result (np.ascontiguousarray, on the way, makes it 1-d)."""
    for x in (
        np.float64(1.5),
        np.float32(-2.5),
        np.array(-2.0),
        np.ones((2, 0, 3)),
        np.ones((3, 4), np.float32).T,
    ):
        got = cast(x, fmt)
        assert got.shape == np.shape(x) and got.dtype == FORMATS[fmt][0]
        assert np.array_equal(got.astype(np.float64), np.asarray(x))


def test_argument_checks():
    with pytest.raises(ValueError, match="fmt: expected one of"):
        cast(np.ones(2), "float8_e4m3")
    with pytest.raises(TypeError, match="two arrays of one of"):
        add(np.ones(2, np.float16), np.ones(2, np.float32))
    with pytest.raises(TypeError, match="float array"):
        cast(np.ones(2, np.int64), "float16")
    assert ml_dtypes.finfo(FORMATS["float8_e4m3fn"][0]).max == 448


@pytest.mark.parametrize("fmt", ["bfloat16", "float8_e5m2", "float8_e4m3fn"])
def test_from_float32_it_agrees_with_ml_dtypes(fmt):
    """From float32 ml_dtypes rounds once, so there the two must agree bit for bit: on
    every float32 midpoint of the format and its float32 neighbours, and on 200,000
    random float32 of every magnitude (NaNs compared as NaNs)."""
    dtype = FORMATS[fmt][0]
    points = _midpoints(fmt).astype(np.float32)  # midpoints are float32 numbers
    around = np.concatenate([points, np.nextafter(points, 0), np.nextafter(points, np.inf)])
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([around, bits.view(np.float32)])
    with np.errstate(over="ignore", invalid="ignore"):
        theirs = x.astype(dtype)
    ours = cast(x, fmt)
    with np.errstate(invalid="ignore"):
        nan = np.isnan(theirs.astype(np.float32)) & np.isnan(ours.astype(np.float32))
    same = ours.view(f"u{dtype.itemsize}") == theirs.view(f"u{dtype.itemsize}")
    bad = np.flatnonzero(~(same | nan))
    assert bad.size == 0, [(float(x[i]), ours[i], theirs[i]) for i in bad[:5]]


# --- widen, and the parallel loops behind widen and cast ------------------------------------


def _every_half_pattern(copies: int = 4) -> np.ndarray:
    """Every float16 bit pattern (signaling NaNs included), ``copies`` times: above
    ``kernels._grain.GRAIN``, so large enough for the parallel loops."""
    bits = np.tile(np.arange(1 << 16, dtype=np.uint16), copies)
    assert bits.size >= GRAIN
    return bits.view(np.float16)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_widen_gives_numpys_values_bit_for_bit(dtype):
    """Every half pattern, as a large array (the parallel loop), a strided view, a shaped
    one and a small one (NumPy's cast), widened exactly, with and without threads: the
    bits of NumPy's own cast, NaN payloads and signaling NaNs included."""
    halves = _every_half_pattern()
    ints = np.int32 if dtype == np.float32 else np.int64
    for x in (halves, halves[::3], halves.reshape(64, -1).T, halves[:1000], halves[5]):
        with np.errstate(invalid="ignore"):
            want = np.ascontiguousarray(x, dtype=dtype)
        for threads in (True, False):
            got = widen(x, dtype, threads=threads)
            assert got.dtype == dtype and got.shape == want.shape and got.flags.c_contiguous
            assert np.array_equal(got.view(ints), want.view(ints))
    with one_thread():  # the serial twin (kernels.compose between products)
        got = widen(halves, dtype)
    with np.errstate(invalid="ignore"):
        assert np.array_equal(got.view(ints), halves.astype(dtype).view(ints))
    loop = cast_module._widen_halves_to_float64
    if dtype == np.float32:
        loop = cast_module._widen_halves_to_float32
    out = np.empty(halves.size, dtype)
    loop(halves.view(np.uint16), out)
    with np.errstate(invalid="ignore"):
        assert np.array_equal(out.view(ints), halves.astype(dtype).view(ints))


def test_widen_takes_the_loop_for_large_halves_and_numpys_cast_for_small(monkeypatch):
    """A float16 array of GRAIN entries or more is widened by the loop, chosen by
    ``loop_for`` (its serial twin with ``threads=False``), on any number of Numba threads;
    a smaller one by NumPy's cast (no compile)."""
    chosen = []
    monkeypatch.setattr(
        cast_module, "loop_for", lambda loop, work: chosen.append(("loop_for", loop)) or loop
    )
    monkeypatch.setattr(cast_module, "serial", lambda loop: chosen.append(("serial", loop)) or loop)
    halves = _every_half_pattern()
    for threads, how in ((True, "loop_for"), (False, "serial")):
        for dtype, loop in (
            (np.float32, cast_module._widen_halves_to_float32),
            (np.float64, cast_module._widen_halves_to_float64),
        ):
            chosen.clear()
            with one_thread():
                widen(halves, dtype, threads=threads)
            widen(halves[: GRAIN - 1], dtype, threads=threads)
            assert chosen == [(how, loop)]


def test_widen_leaves_other_dtypes_to_numpy():
    """float32 and float64 input is returned as it is when it already has the dtype (no
    copy), converted by NumPy otherwise."""
    x = np.linspace(-3, 3, 50_000)
    assert widen(x) is x
    assert np.array_equal(widen(x, np.float32), x.astype(np.float32))
    assert widen(x.astype(np.float32), np.float64).dtype == np.float64


def test_parallel_narrowing_gives_the_serial_bits():
    """The parallel float64 and float32 loops of ``cast(x, "float16")`` give the bits of
    the serial ones (which ``threads=False`` takes at every size): every half midpoint and
    its neighbours, and random bit patterns of float64 and float32 (NaN payloads,
    signaling NaNs, subnormals, overflow)."""
    rng = np.random.default_rng(23)
    points = _midpoints("float16")
    wide = np.concatenate([points, rng.integers(0, 1 << 63, 200_000).view(np.float64)])
    single = np.concatenate(
        [
            points.astype(np.float32),
            rng.integers(0, 1 << 32, 200_000).astype(np.uint32).view(np.float32),
        ]
    )
    for values, serial, parallel in (
        (wide, narrow_to_half_array, cast_module._narrow_float64_to_halves),
        (single, narrow_float32_to_half_array, cast_module._narrow_float32_to_halves),
    ):
        out = np.empty(values.size, np.uint16)
        parallel(values, out)
        assert np.array_equal(out, serial(values))
        assert np.array_equal(cast(values, "float16").view(np.uint16), out)
        assert np.array_equal(cast(values, "float16", threads=False).view(np.uint16), out)


def _float32_around_half_midpoints(steps: int = 3) -> np.ndarray:
    """Every float32 within ``steps`` units in the last place of a half midpoint (the one
    above 65504, 65520, included), of every half value, and of the subnormal quantum's
    multiples, with both signs: where rounding to half turns."""
    points = np.concatenate([_midpoints("float16"), _all("float16")[1]])
    points = points[np.isfinite(points)].astype(np.float32)
    bits = np.abs(points).view(np.int32).astype(np.int64)
    near = (bits[:, None] + np.arange(-steps, steps + 1)[None, :]).ravel()
    near = np.unique(near[(near >= 0) & (near < 0x7F800000)]).astype(np.uint32)
    return np.concatenate([near, near | np.uint32(0x80000000)]).view(np.float32)


def test_float32_to_half_in_32_bit_lanes_gives_the_bits_of_f16():
    """``kernels.cast.float32_to_half`` (the parallel narrowing's) against
    ``_f16.float32_to_half_bits``: every float32 near a half midpoint or value, the
    specials (signed zeros, infinities, NaN payloads of both kinds, float32 subnormals) and
    random bit patterns; ``-m slow`` compares all 2^32."""
    rng = np.random.default_rng(29)
    special = np.array(
        [0, 0x80000000, 1, 0x807FFFFF, 0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00000,
         0xFFC02000, 0x7F801FFF, 0x7FBFE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x33000000,
         0x33000001, 0x337FFFFF, 0x387FFFFF, 0x38800000],
        dtype=np.uint32,
    )  # fmt: skip
    values = np.concatenate(
        [
            _float32_around_half_midpoints(),
            special.view(np.float32),
            rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32),
        ]
    )
    out = np.empty(values.size, np.uint16)
    cast_module._narrow_float32_to_halves(values, out)
    assert_same_bits("float32 -> half", out, narrow_float32_to_half_array(values), values)


@numba.njit(parallel=True)
def _mismatches(start, count):
    """How many of the float32 patterns start, ..., start + count - 1 the two narrowings
    round differently."""
    bad = 0
    for i in numba.prange(count):
        v = reinterpret(np.uint32(start + i), np.float32)
        bad += cast_module.float32_to_half(v) != float32_to_half_bits(v)
    return bad


@pytest.mark.slow
def test_float32_to_half_on_every_float32():
    """All 2^32 patterns, ``float32_to_half`` against ``_f16.float32_to_half_bits`` (4 s
    here on two cores)."""
    chunk = 1 << 28
    assert sum(_mismatches(start, chunk) for start in range(0, 1 << 32, chunk)) == 0


# --- the processor's half conversions ----------------------------------------------------
#
# Each conversion has two implementations, the half instructions (F16C) and 32-bit or 64-bit
# integers; kernels.cast picks one by the target. Both are compared here with ``_f16``'s
# integer functions (and NumPy), the hardware ones only where the processor has them.

HARDWARE = (
    pytest.param(True, marks=pytest.mark.skipif(
        not cast_module.HARDWARE_HALVES, reason="no half conversion instructions here"
    )),
    False,
)  # fmt: skip

_IMPLEMENTATIONS = {
    True: (
        cast_module._half_to_float32_f16c,
        cast_module._half_to_float64_f16c,
        cast_module._float32_to_half_f16c,
    ),
    False: (
        cast_module.half_to_float32_integers,
        half_bits_to_float64,
        cast_module.float32_to_half_integers,
    ),
}


@functools.cache
def _elementwise(function):
    """A Numba loop applying ``function`` to every entry (as the kernels' loops do)."""

    @numba.njit
    def run(values, out):
        for i in range(values.size):
            out[i] = function(values[i])
        return out

    return run


def test_the_hardware_conversions_are_used_exactly_where_the_target_has_them():
    from llvmlite import binding
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features

    features = config.CPU_FEATURES
    if features is None:  # Numba's own rule: the user's features, else the host's
        features = get_host_cpu_features()
    x86 = binding.get_process_triple().startswith("x86_64")
    expected = x86 and "+f16c" in features.split(",")
    assert cast_module.HARDWARE_HALVES == expected
    chosen = (cast_module.half_to_float32, cast_module.half_to_float64)
    chosen += (cast_module.float32_to_half,)
    assert chosen == _IMPLEMENTATIONS[expected]


@pytest.mark.skipif(not cast_module.HARDWARE_HALVES, reason="no half conversion instructions")
def test_the_hardware_conversions_compile_to_the_instructions():
    """The loops the kernels run convert by VCVTPH2PS and VCVTPS2PH themselves, not by a
    call to a software routine (which LLVM emits for ``half`` without ``f16c``)."""
    cases = (
        (cast_module.half_to_float32, np.uint16, np.float32, "vcvtph2ps"),
        (cast_module.half_to_float64, np.uint16, np.float64, "vcvtph2ps"),
        (cast_module.float32_to_half, np.float32, np.uint16, "vcvtps2ph"),
    )
    for function, source, target, instruction in cases:
        loop = _elementwise(function)
        loop(np.zeros(8, source), np.empty(8, target))
        (assembly,) = loop.inspect_asm().values()
        assert instruction in assembly, f"{function.__name__}: no {instruction}"
        assert "__extendhfsf2" not in assembly and "__truncsfhf2" not in assembly


@pytest.mark.parametrize("hardware", HARDWARE)
def test_every_half_widens_exactly_signaling_nans_kept(hardware):
    """All 65,536 patterns, into float32 and float64, bit for bit as NumPy's casts (which
    keep a signaling NaN signaling: the instruction alone would set its quiet bit)."""
    to_float32, to_float64, _ = _IMPLEMENTATIONS[hardware]
    bits = np.arange(1 << 16, dtype=np.uint16)
    for function, dtype in ((to_float32, np.float32), (to_float64, np.float64)):
        got = _elementwise(function)(bits, np.empty(bits.size, dtype))
        assert_same_bits(f"{function.__name__}", got, bits.view(np.float16).astype(dtype), bits)


def _float32_specials() -> np.ndarray:
    """Zeros, infinities, NaNs of both kinds (payloads in the top 10 bits and only below
    them, which the half keeps as 1), the float32 subnormals, overflow and the half range's
    edges, with both signs."""
    nans = np.array(
        [0x7FC00000, 0x7F800001, 0x7F802000, 0x7FBFFFFF, 0x7FBFE000, 0x7F801FFF, 0x7FFFFFFF],
        dtype=np.uint32,
    ).view(np.float32)
    values = [0.0, np.inf, 2.0**-149, 2.0**-126, 2.0**-25, 2.0**-24, 65504.0, 65519.996, 65520.0]
    values += [3.4028235e38]
    magnitudes = np.ldexp(np.float32(1.5), np.arange(-149, 128)).astype(np.float32)
    positive = np.concatenate([nans, np.array(values, np.float32), magnitudes])
    return np.concatenate([positive, -positive])


@pytest.mark.parametrize("hardware", HARDWARE)
def test_narrowing_from_float32_rounds_once(hardware):
    """float32 to half against ``_f16``'s integers: every float32 within 3 ulps of a half
    midpoint or value, the specials (NaNs of both kinds, with payloads the top 10 bits keep
    and ones they lose), and random patterns."""
    _, _, to_half = _IMPLEMENTATIONS[hardware]
    rng = np.random.default_rng(37)
    values = np.concatenate(
        [
            _float32_around_half_midpoints(),
            _float32_specials(),
            rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32),
        ]
    )
    got = _elementwise(to_half)(values, np.empty(values.size, np.uint16))
    assert_same_bits("float32 -> half", got, narrow_float32_to_half_array(values), values)
