"""The glue of a block in a narrow format: the cast to it and the residual add, correctly
rounded.

``cast(x, fmt)`` rounds every entry of ``x`` (any float array: float64, float32, float16,
bfloat16 or FP8, read exactly) once, to nearest with ties to even, into ``fmt``:
``"float16"``, ``"bfloat16"``, ``"float8_e5m2"`` or ``"float8_e4m3fn"`` (the ``ml_dtypes``
types). ``add(a, b)`` is ``cast(a + b)`` for two arrays of one such format: the exact sum
rounded once. ``widen(x, dtype)`` is the way back, to float32 or float64, exactly. Mixed
and strict arithmetic are the same here (one operation, one rounding); the functions take
no ``strict_fp16``.

Why not ``astype``: ``ml_dtypes`` converts float64 to its 16- and 8-bit types through
float32, so a float64 is rounded twice (NumPy's own float64 -> float16 cast rounds once).
Just below a midpoint of the narrow format, the first rounding can land on the midpoint and
the second then goes to even, away from the nearest value:
``np.array([np.nextafter(61440.0, 0)]).astype(float8_e5m2)`` is inf where the value rounds
to 57344 (``tests/kernels/test_cast.py`` shows such inputs for each of those formats).
Here float16 and bfloat16 use the kernels' own narrowing from float64 (``_f16``,
``_bf16``), and the FP8 formats a branch-free loop that rounds the exact quotient by the
binade's quantum once and writes the bits directly (:func:`_round`). The same module holds
the half conversions the other kernels' float16 loops read and write through
(:func:`half_to_float32`, :func:`half_to_float64`, :func:`float32_to_half`: the
processor's instructions where it has them, see "the processor's half conversions" below);
the activations keep ``_f16``'s, which their certificates cover.

Overflow follows each format: float16, bfloat16 and E5M2 give inf from the midpoint above
their largest value (65520, 2^128 - 2^119, 61440) on; E4M3 (``float8_e4m3fn``) has no
infinity: a magnitude above 464 becomes NaN and 464 itself rounds to 448 (ties to even).
NaN stays NaN; zeros keep their sign.

The sum of two values of these formats is exact in float64 unless their exponents differ by
more than 53 - p (p the narrow precision); then the smaller is below 2^-45 units in the last
place of the larger, so the exact sum and its float64 rounding both lie strictly between
the larger value and its neighbouring midpoints, and round to the larger: ``add`` rounds
the float64 sum once, and that is the correctly rounded exact sum.

>>> import numpy as np, ml_dtypes
>>> x = np.array([np.nextafter(61440.0, 0), 464.0, 465.0, -0.0])
>>> cast(x, "float8_e5m2")[:1], cast(x, "float8_e4m3fn")[1:]
(array([57344], dtype='float8_e5m2'), array([448, nan, -0], dtype='float8_e4m3fn'))
"""

from __future__ import annotations

import ml_dtypes
import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic
from numpy.typing import ArrayLike, DTypeLike

from kernels._bf16 import BFLOAT16, to_bfloat16
from kernels._f16 import (
    FLOAT32_EXPONENT_BIAS,
    FLOAT32_EXPONENT_SPECIAL,
    FLOAT32_FRACTION_BITS,
    FLOAT32_MAGNITUDE_MASK,
    FLOAT64_FRACTION_BITS,
    HALF_EXPONENT_BIAS,
    HALF_FRACTION_BITS,
    HALF_FRACTION_MASK,
    HALF_INF_BITS,
    HALF_MAX_EXPONENT,
    HALF_SIGN_MASK,
    HALF_SMALLEST_NORMAL,
    HALF_SUBNORMAL_EXPONENT,
    float64_to_half_bits,
    half_bits_to_float64,
    narrow_float32_to_half_array,
    narrow_to_half_array,
    reinterpret,
)
from kernels._grain import GRAIN, loop_for, serial
from kernels._threads import thread_safe

__all__ = ["FORMATS", "add", "cast", "widen"]

#: ``name: (dtype, precision p, emin, emax, threshold, no_infinity)``: ``threshold`` is the
#: magnitude from which (above which, without infinity) the format overflows.
FORMATS: dict[str, tuple[np.dtype, int, int, int, float, bool]] = {
    "float16": (np.dtype(np.float16), 11, -14, 15, 65520.0, False),
    "bfloat16": (BFLOAT16, 8, -126, 127, 2.0**128 - 2.0**119, False),
    "float8_e5m2": (np.dtype(ml_dtypes.float8_e5m2), 3, -14, 15, 61440.0, False),
    "float8_e4m3fn": (np.dtype(ml_dtypes.float8_e4m3fn), 4, -6, 8, 464.0, True),
}


#: Adding and subtracting it rounds a float below 2^51 to an integer, ties to even.
_ROUND_SHIFT = 6755399441055744.0  # 1.5 2^52


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _round(x, precision, emin, threshold, no_infinity, beyond, nan, out):
    """out[i] = the FP8 bits of x[i] rounded to nearest, ties to even.

    Branch-free, so the loop vectorizes. ``E = max(floor(log2 |x|), emin)`` (from the
    float64 exponent field) is the binade and ``2^(E - p + 1)`` its quantum; the quotient
    by it is exact (a power of two) and below 2^p + 1, and adding and subtracting 1.5 2^52
    rounds it to an integer ``n``, half to even. The bits are then ``(E - emin) 2^(p-1) +
    n``: the exponent field ``E + bias`` (``bias = 1 - emin``) above the fraction
    ``n - 2^(p-1)``; in the subnormal binade the field is 0 and the bits are ``n``; a carry
    of ``n`` to ``2^p`` moves to the next binade by itself. ``beyond`` and ``nan`` are the
    bits of an overflow (inf, or NaN for E4M3) and of NaN; the sign bit is x's."""
    for i in prange(x.size):
        v = x[i]
        a = abs(v)
        exponent = (reinterpret(a, np.int64) >> 52) - 1023  # floor(log2 a) for normal a
        binade = max(exponent, emin)
        inverse = reinterpret((1023 - binade + precision - 1) << 52, np.float64)
        count = np.int64((a * inverse + _ROUND_SHIFT) - _ROUND_SHIFT)
        bits = ((binade - emin) << (precision - 1)) + count
        over = a > threshold or (a == threshold and not no_infinity)
        magnitude = nan if v != v else (beyond if over else bits)
        sign = (reinterpret(v, np.int64) >> 56) & 0x80
        out[i] = np.uint8(magnitude | sign)


_SHIFT = FLOAT32_FRACTION_BITS - HALF_FRACTION_BITS  # 13
_REBIAS = (FLOAT32_EXPONENT_BIAS - HALF_EXPONENT_BIAS) << FLOAT32_FRACTION_BITS
_IMPLICIT = 1 << FLOAT32_FRACTION_BITS
_SMALLEST_NORMAL = np.float32(HALF_SMALLEST_NORMAL)


@njit(cache=True)
def half_to_float32_integers(h):
    """The float32 value of the half bit pattern ``h`` (a uint16): the bits of
    ``_f16.half_bits_to_float32`` for every pattern, NaN payloads kept (tested on all
    65,536), computed in 32-bit integers, so that a loop of it takes 8 lanes to an AVX2
    vector where ``_f16``'s 64-bit integers take 4 (half the time: 4M halves widened in
    1.4 ms against 2.7 on one core here). The integer path of :func:`half_to_float32`, for
    processors without the half conversion instructions.

    A normal half's exponent and fraction move into place with one shift and the difference
    of the biases added; infinity and NaN get that difference twice (exponent all ones); a
    zero or subnormal ``f 2^-24`` is ``2^-14 (1 + f/1024) - 2^-14``, an exact subtraction.
    """
    h = np.int32(h)
    magnitude = np.int32(h & ~HALF_SIGN_MASK)
    normal = np.int32((magnitude << _SHIFT) + _REBIAS)
    special = np.int32(normal + _REBIAS)
    as_normal = reinterpret(np.int32(normal + _IMPLICIT), np.float32)
    subnormal = reinterpret(np.float32(as_normal - _SMALLEST_NORMAL), np.int32)
    wide = special if magnitude >= HALF_INF_BITS else normal
    wide = subnormal if magnitude < (1 << HALF_FRACTION_BITS) else wide
    sign = np.int32((h & HALF_SIGN_MASK) << 16)
    return reinterpret(np.int32(wide | sign), np.float32)


_F32_INFINITY = FLOAT32_EXPONENT_SPECIAL << FLOAT32_FRACTION_BITS
_F32_HALF_NORMAL = np.int32(np.float32(HALF_SMALLEST_NORMAL).view(np.int32))  # 2^-14
_F32_HALF_OVERFLOW = (FLOAT32_EXPONENT_BIAS + HALF_MAX_EXPONENT + 1) << FLOAT32_FRACTION_BITS
#: Its spacing is 2^-24, half's smallest subnormal: adding it to a magnitude below 2^-14
#: rounds that to a multiple of 2^-24 (ties to even), and the sum's low bits count them.
_HALF_QUANTUM_SHIFT = np.float32(2.0 ** (FLOAT32_FRACTION_BITS + HALF_SUBNORMAL_EXPONENT))
_HALF_QUANTUM_SHIFT_BITS = np.int32(_HALF_QUANTUM_SHIFT.view(np.int32))
_ROUND_HALF_DOWN = (1 << (_SHIFT - 1)) - 1  # 0xFFF: ties go to even by the kept bit


@njit(cache=True, inline="always")
def _half_nan(magnitude):
    """The half NaN (sign clear, an int32) of the float32 NaN whose magnitude bits are
    ``magnitude``: the top 10 bits of its payload, or 1 if those are zero (0 would be
    inf)."""
    return np.int32(HALF_INF_BITS | max(np.int32((magnitude >> _SHIFT) & HALF_FRACTION_MASK), 1))


@njit(cache=True)
def float32_to_half_integers(v):
    """The half bits (a uint16) of the float32 ``v`` rounded to nearest, ties to even: the
    bits of ``_f16.float32_to_half_bits`` for every float32 (``tests/kernels/test_cast.py``
    compares all 2^32 with ``-m slow``, and the patterns around every half midpoint in the
    default run), NaN payloads included (their top 10 bits, or 1 if those are zero). In
    32-bit integers, as :func:`half_to_float32_integers`: 8 lanes to an AVX2 vector where
    ``_f16``'s 64-bit integers take 4. The integer path of :func:`float32_to_half`.

    A normal half: the magnitude rebiased and shifted right by 13, after adding 0xFFF plus
    the lowest kept bit (round to nearest, ties to even; a carry moves into the exponent,
    up to infinity's bits from 65520 on). Below 2^-14 the FPU rounds: ``|v| + 0.5`` is a
    multiple of 2^-24 above 0.5, and its bits minus those of 0.5 are the count of 2^-24.
    """
    bits = reinterpret(v, np.int32)
    magnitude = np.int32(bits & FLOAT32_MAGNITUDE_MASK)
    kept_lowest = np.int32((magnitude >> _SHIFT) & 1)
    normal = np.int32((np.int32(magnitude - _REBIAS) + _ROUND_HALF_DOWN + kept_lowest) >> _SHIFT)
    subnormal = np.int32(
        reinterpret(np.float32(abs(v) + _HALF_QUANTUM_SHIFT), np.int32) - _HALF_QUANTUM_SHIFT_BITS
    )
    nan = _half_nan(magnitude)
    half = subnormal if magnitude < _F32_HALF_NORMAL else normal
    half = np.int32(HALF_INF_BITS) if magnitude >= _F32_HALF_OVERFLOW else half
    half = nan if magnitude > _F32_INFINITY else half
    return np.uint16(half | ((bits >> 16) & HALF_SIGN_MASK))


# --- the processor's half conversions ------------------------------------------------------
#
# x86 processors since 2012 (the F16C extension: Intel's Ivy Bridge, AMD's Piledriver)
# convert 8 halves to float32 and back in one instruction each (VCVTPH2PS, VCVTPS2PH,
# rounding to nearest, ties to even). LLVM emits them for ``fpext`` and ``fptrunc`` between
# ``half`` and ``float`` when its target has ``f16c``; without it, it would call a runtime
# function that Numba's JIT need not link. The functions below use them where Numba's target
# has the feature (:data:`HARDWARE_HALVES`) and the integer versions above elsewhere, with
# the same bits (tests/kernels/test_cast.py: every half; every float32 near a half midpoint
# or value, the specials and random patterns). What the instructions do differently is
# undone: they quiet a signaling NaN, which the integer versions keep as it is (as NumPy's
# casts do). In a loop over 4096 entries on one core here: half to float32 0.20 ns an entry
# against 0.34, to float64 0.35 against 0.59, float32 to half 0.28 against 0.38.
#
# float64 to half has no instruction. Rounding to odd to float32 and then to nearest by
# VCVTPS2PH gives the single rounding (24 >= 11 + 2 bits; Boldo and Melquiond, IEEE Trans.
# Computers 57(4), 2008, theorem 1), and matched ``_f16.float64_to_half_bits`` on 6 million
# inputs, but took 0.97 ns an entry with the signaling NaNs undone, against 0.70 for the
# integers: float64 results keep ``_f16.float64_to_half_bits``.


def _hardware_halves() -> bool:
    """Whether Numba compiles for an x86-64 target with ``f16c`` (its features: the user's
    ``NUMBA_CPU_FEATURES``, else the host's). Other processors take the integer versions:
    AArch64 converts halves in its base instruction set, but that path is untested here."""
    from llvmlite import binding
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features

    if not binding.get_process_triple().startswith("x86_64"):
        return False
    features = config.CPU_FEATURES
    if features is None:
        features = get_host_cpu_features()
    return "+f16c" in features.split(",")


#: Whether the conversions below use the processor's half instructions.
HARDWARE_HALVES = _hardware_halves()


@intrinsic
def _fpext_half(typingctx, bits):
    """The float32 value of half bits (a uint16): LLVM's ``fpext`` from ``half``."""
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(bits), codegen


@intrinsic
def _fptrunc_half(typingctx, value):
    """The half bits (a uint16) of a float32 rounded to nearest: LLVM's ``fptrunc`` to
    ``half``."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return types.uint16(value), codegen


_HALF_QUIET = 1 << (HALF_FRACTION_BITS - 1)  # 0x200


@njit(cache=True, inline="always")
def _signaling(h):
    """1 if the half bits ``h`` are a signaling NaN (exponent all ones, quiet bit clear,
    fraction not 0), else 0; an int32."""
    h = np.int32(h)
    top = np.int32(h & (HALF_INF_BITS | _HALF_QUIET))
    return np.int32((top == HALF_INF_BITS) & ((h & (_HALF_QUIET - 1)) != 0))


@njit(cache=True)
def _half_to_float32_f16c(h):
    """:func:`half_to_float32_integers` by VCVTPH2PS, a signaling NaN kept signaling."""
    quieted = np.int32(_signaling(h) << (FLOAT32_FRACTION_BITS - 1))
    return reinterpret(np.int32(reinterpret(_fpext_half(h), np.int32) & ~quieted), np.float32)


@njit(cache=True)
def _half_to_float64_f16c(h):
    """``_f16.half_bits_to_float64`` by VCVTPH2PS (float32 to float64 is exact), a signaling
    NaN kept signaling."""
    quieted = np.int64(_signaling(h)) << (FLOAT64_FRACTION_BITS - 1)
    wide = np.float64(_fpext_half(h))
    return reinterpret(reinterpret(wide, np.int64) & ~quieted, np.float64)


@njit(cache=True)
def _float32_to_half_f16c(v):
    """:func:`float32_to_half_integers` by VCVTPS2PH, NaN by the integer rule."""
    bits = reinterpret(v, np.int32)
    magnitude = np.int32(bits & FLOAT32_MAGNITUDE_MASK)
    nan = np.int32(_half_nan(magnitude) | ((bits >> 16) & HALF_SIGN_MASK))
    return np.uint16(nan) if magnitude > _F32_INFINITY else _fptrunc_half(v)


if HARDWARE_HALVES:
    half_to_float32 = _half_to_float32_f16c
    half_to_float64 = _half_to_float64_f16c
    float32_to_half = _float32_to_half_f16c
else:
    half_to_float32 = half_to_float32_integers
    half_to_float64 = half_bits_to_float64
    float32_to_half = float32_to_half_integers


@njit(cache=True, parallel=True)
def _widen_halves_to_float32(bits, out):
    """``out[i]`` = the float32 value of the half bits ``bits[i]`` (:func:`half_to_float32`,
    branch-free, so the loop vectorizes)."""
    for i in prange(bits.size):
        out[i] = half_to_float32(bits[i])


@njit(cache=True, parallel=True)
def _widen_halves_to_float64(bits, out):
    """The same into float64 (:func:`half_to_float64`)."""
    for i in prange(bits.size):
        out[i] = half_to_float64(bits[i])


@thread_safe
@njit(cache=True, parallel=True)
def _narrow_float64_to_halves(values, out):
    """``out[i]`` = the half bits of ``values[i]`` (float64), rounded once."""
    for i in prange(values.size):
        out[i] = float64_to_half_bits(values[i])


@thread_safe
@njit(cache=True, parallel=True)
def _narrow_float32_to_halves(values, out):
    """``out[i]`` = the half bits of ``values[i]`` (float32), rounded once (from float32: a
    float64 copy would quiet a signaling NaN), by :func:`float32_to_half`."""
    for i in prange(values.size):
        out[i] = float32_to_half(values[i])


def _threaded(array: np.ndarray) -> bool:
    """Whether a rounding of ``array`` to float16 runs in a parallel loop: at least
    ``kernels._grain.GRAIN`` entries, and Numba runs more than one thread. Smaller arrays
    (and one thread) take the serial loops: the same bits, no compile."""
    return array.size >= GRAIN and numba.get_num_threads() > 1


def widen(x: ArrayLike, dtype: DTypeLike = np.float64, *, threads: bool = True) -> np.ndarray:
    """``x`` (float16, float32 or float64) as a C-contiguous array of the wider ``dtype``
    (float32 or float64): the values of ``np.ascontiguousarray(x, dtype=dtype)``, bit for
    bit, NaN payloads included (every float16 value is a float32 and a float64 value).

    That is what it returns, except that a float16 ``x`` of at least
    ``kernels._grain.GRAIN`` entries is widened from its bits by a loop: NumPy widens half
    values one at a time in software, at about 2.5-4 ns an entry here against 0.4 for the
    parallel loop (1.6 million halves: 4.0-6.2 ms against 0.6, measured before the float32
    loop took :func:`half_to_float32`, which halved its time on one thread: 0.44 ms against
    0.92), and its serial twin is still three times NumPy's speed (4M halves to float64:
    2.4 ms against 7.6). The kernels
    read float16 input through it. The loop is chosen by ``kernels._grain.loop_for``
    (serial on one Numba thread, as in ``kernels.compose`` between matrix products);
    ``threads=False`` takes the serial twin at every size, for callers whose casts run
    between multithreaded BLAS products, where a parallel loop loses a core to OpenBLAS's
    spinning threads (``kernels/_attention.py``). Smaller arrays take NumPy's cast (no
    compile). The same bits every way.

    >>> widen(np.array([1.5, -np.inf], np.float16)).dtype
    dtype('float64')
    """
    array = np.asarray(x)
    target = np.dtype(dtype)
    loop_target = target in (np.float32, np.float64) and array.ndim > 0
    if array.dtype != np.float16 or not loop_target or array.size < GRAIN:
        return np.ascontiguousarray(array, dtype=target)
    out = np.empty(array.shape, target)
    loop = _widen_halves_to_float32 if target == np.float32 else _widen_halves_to_float64
    run = loop_for(loop, array.size) if threads else serial(loop)
    run(np.ascontiguousarray(array).view(np.uint16).reshape(-1), out.reshape(-1))
    return out


def _format(fmt: str) -> tuple[np.dtype, int, int, int, float, bool]:
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ValueError(f"fmt: expected one of {', '.join(FORMATS)}, got {fmt!r}") from None


def _wide(x: ArrayLike, name: str) -> np.ndarray:
    """``x`` as float64, exactly (bfloat16 and FP8 through float32, which holds them)."""
    arr = np.asarray(x)
    if arr.dtype.kind != "f" and arr.dtype not in [f[0] for f in FORMATS.values()]:
        raise TypeError(f"{name}: expected a float array, got dtype {arr.dtype}")
    with np.errstate(invalid="ignore"):  # a signaling NaN becomes a quiet one
        if arr.dtype.itemsize < 4:
            arr = arr.astype(np.float32)
        return np.ascontiguousarray(arr, dtype=np.float64)


def cast(x: ArrayLike, fmt: str, *, threads: bool = True) -> np.ndarray:
    """``x`` correctly rounded to ``fmt`` (module docstring); same shape.

    float16 and bfloat16 go through the kernels' own narrowing (``_f16``, ``_bf16``: from
    float64 directly, verified bit for bit; float32 to float16 from float32, without a
    float64 copy, by :func:`float32_to_half` for a large array); the FP8 formats through
    :func:`_round`. ``threads=False``: float16 by the serial loop at every size (see
    :func:`widen`)."""
    dtype, precision, emin, _, threshold, no_infinity = _format(fmt)
    shape = np.shape(x)  # ascontiguousarray makes a 0-d array 1-d
    if fmt == "float16" and np.asarray(x).dtype == np.float32:
        return _to_halves(np.ascontiguousarray(x).reshape(-1), threads).reshape(shape)
    wide = _wide(x, "x")
    if fmt == "float16":
        return _to_halves(wide.ravel(), threads).reshape(shape)
    if fmt == "bfloat16":
        return to_bfloat16(wide).reshape(shape)
    special = np.array([np.inf, np.nan]).astype(dtype).view(np.uint8)  # exact for both
    out = np.empty(wide.shape, dtype=np.uint8)
    flat = out.reshape(-1)
    _round(wide.ravel(), precision, emin, threshold, no_infinity, *special, flat)
    return out.view(dtype).reshape(shape)


def _to_halves(values: np.ndarray, threads: bool) -> np.ndarray:
    """A 1-D float64 or float32 array rounded to float16: the serial loops, or for a large
    array (:func:`_threaded`) the parallel ones, which give the same bits."""
    single = values.dtype == np.float32
    if not (threads and _threaded(values)):
        bits = (narrow_float32_to_half_array if single else narrow_to_half_array)(values)
        return bits.view(np.float16)
    out = np.empty(values.size, np.float16)
    narrow = _narrow_float32_to_halves if single else _narrow_float64_to_halves
    narrow(values, out.view(np.uint16))
    return out


def add(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """``a + b`` (broadcast) for arrays of one narrow format, rounded once to it."""
    a_arr, b_arr = np.asarray(a), np.asarray(b)
    names = [name for name, spec in FORMATS.items() if spec[0] == a_arr.dtype]
    if not names or b_arr.dtype != a_arr.dtype:
        raise TypeError(
            f"a, b: expected two arrays of one of {', '.join(FORMATS)}, got {a_arr.dtype} and "
            f"{b_arr.dtype}"
        )
    with np.errstate(invalid="ignore"):  # inf + -inf is NaN, as IEEE says
        total = _wide(a_arr, "a") + _wide(b_arr, "b")
    return cast(total, names[0])
