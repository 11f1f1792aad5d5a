"""Exact building blocks of the FP16 envelopes: number formats, reals known by enclosures,
and the decision "does ``g * gain`` reach the overflow threshold".

Everything here is exact or rigorous: format values are :class:`fractions.Fraction`, and an
irrational gain is an arb ball function evaluated at increasing precision until a comparison
is decided. No SymPy (the ``liptable envelope`` command answers in about a second).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from flint import arb, ctx

#: Precisions (bits) tried in turn before a comparison is declared undecidable.
PRECISIONS = (128, 512, 2048)
#: Significant digits of printed enclosures.
DIGITS = 35


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: ``precision`` significand bits (implicit one included),
    normal exponents ``emin..emax``, round to nearest even, IEEE overflow.

    ``largest`` overrides the largest finite value where the format spends its top encodings
    on NaN (FP8 E4M3: 448, not 480); such a format has no infinity: a magnitude beyond the
    midpoint of ``largest`` and the next would-be value becomes NaN, and the midpoint itself
    rounds to ``largest`` (ties to even), so its overflow is strict (``strict_overflow``).

    >>> f = FORMATS["float16"]
    >>> f.max_finite, f.overflow, f.smallest_normal
    (Fraction(65504, 1), Fraction(65520, 1), Fraction(1, 16384))
    >>> e4m3 = FORMATS["float8_e4m3fn"]
    >>> e4m3.max_finite, e4m3.overflow, e4m3.overflow_rule
    (Fraction(448, 1), Fraction(464, 1), 'results of magnitude > 464 become NaN (no infinity)')
    """

    name: str
    precision: int
    emin: int
    emax: int
    largest: Fraction | None = None
    strict_overflow: bool = False

    @property
    def max_finite(self) -> Fraction:
        """``(2 - 2^(1-p)) 2^emax``, or ``largest``."""
        if self.largest is not None:
            return Fraction(self.largest)
        return Fraction((1 << self.precision) - 1) * _pow2(self.emax - self.precision + 1)

    @property
    def overflow(self) -> Fraction:
        """The largest finite value plus half its quantum (``(2 - 2^-p) 2^emax`` for IEEE
        formats): the least magnitude that rounds to infinity, or for a strict overflow the
        greatest one that does not."""
        return self.max_finite + self.quantum(self.max_finite) / 2

    @property
    def overflow_rule(self) -> str:
        """The overflow rule in words."""
        if self.strict_overflow:
            return f"results of magnitude > {_text(self.overflow)} become NaN (no infinity)"
        return f"results of magnitude >= {_text(self.overflow)} round to inf"

    def beyond(self, real: Real, g: Fraction, threshold: Fraction) -> bool:
        """Whether ``g * real`` overflows against ``threshold`` by this format's rule:
        ``>=``, or ``>`` for a strict overflow."""
        if self.strict_overflow:
            return real.times_exceeds(g, threshold)
        return real.times_reaches(g, threshold)

    def overflows(self, real: Real, g: Fraction) -> bool:
        """Whether the exact ``g * real`` overflows this format."""
        return self.beyond(real, g, self.overflow)

    @property
    def smallest_normal(self) -> Fraction:
        return _pow2(self.emin)

    @property
    def smallest_subnormal(self) -> Fraction:
        return _pow2(self.emin - self.precision + 1)

    def quantum(self, magnitude: Fraction) -> Fraction:
        """The spacing of the format's values in the binade of ``magnitude`` (> 0)."""
        top = _floor_log2(magnitude)
        return _pow2(max(top, self.emin) - self.precision + 1)

    def round(self, value: Fraction | float) -> Fraction:
        """``value`` rounded to nearest (ties to even); ValueError if it overflows."""
        value = Fraction(value)
        if value == 0:
            return Fraction(0)
        q = self.quantum(abs(value))
        n = value / q
        rounded = math.floor(n)
        rest = n - rounded
        if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and rounded % 2):
            rounded += 1
        result = rounded * q
        if abs(result) > self.max_finite:
            raise ValueError(f"{float(value)!r} overflows {self.name}")
        return result

    def round_down(self, value: Fraction) -> Fraction:
        """The largest format value <= ``value`` (> 0), at most the largest finite one."""
        if value >= self.max_finite:
            return self.max_finite
        q = self.quantum(value)
        return math.floor(value / q) * q

    def next_up(self, value: Fraction) -> Fraction | None:
        """The next format value above ``value`` (>= 0), or None past the largest finite."""
        if value >= self.max_finite:
            return None
        if value == 0:
            return self.smallest_subnormal
        return value + self.quantum(value)

    def next_down(self, value: Fraction) -> Fraction:
        """The format value just below ``value`` (> 0; 0 below the smallest subnormal)."""
        if value <= self.smallest_subnormal:
            return Fraction(0)
        q = self.quantum(value)
        if self.quantum(value - q) < q:  # value is a power of two: the binade below is finer
            return value - self.quantum(value - q)
        return value - q

    def neighbour(self, value: Fraction, up: bool) -> Fraction:
        """The adjacent format value above (``up``) or below ``value``, for either sign."""
        if value > 0 or (value == 0 and up):
            return self.next_up(value) if up else self.next_down(value)
        return -self.neighbour(-value, not up)

    def steps(self, lo: Fraction, hi: Fraction) -> int:
        """How many format values lie in ``(lo, hi]`` (0 < lo <= hi, both format values),
        counted per binade."""
        return self._index(hi) - self._index(lo)

    def _index(self, value: Fraction) -> int:
        """The position of a positive format value among the positive format values."""
        per_binade = 1 << (self.precision - 1)
        q = self.quantum(value)
        top = _floor_log2(value)
        if top < self.emin:  # subnormal
            return int(value / q)
        # per_binade subnormals (0 included) below 2^emin, then per_binade per binade.
        return per_binade * (top - self.emin + 1) + int((value - _pow2(top)) / q)


def _text(value: Fraction) -> str:
    return f"{float(value):.8g}"


def _pow2(exponent: int) -> Fraction:
    return Fraction(1 << exponent) if exponent >= 0 else Fraction(1, 1 << -exponent)


def _floor_log2(value: Fraction) -> int:
    """``floor(log2 value)`` for ``value > 0``, exactly."""
    top = value.numerator.bit_length() - value.denominator.bit_length()
    if value < _pow2(top):
        top -= 1
    return top


#: The formats ``liptable envelope`` knows. bfloat16 keeps float32's exponent range with 8
#: significand bits (its limits are checked against ml_dtypes in the tests, where installed).
FORMATS: dict[str, Format] = {
    "float16": Format("float16", 11, -14, 15),
    "bfloat16": Format("bfloat16", 8, -126, 127),
    "float32": Format("float32", 24, -126, 127),
    # FP8 (Micikevicius et al. 2022, "FP8 Formats for Deep Learning"; ml_dtypes' float8_e5m2
    # and float8_e4m3fn): E5M2 is IEEE-like, max 57344; E4M3 has no infinity, max 448.
    "float8_e5m2": Format("float8_e5m2", 3, -14, 15),
    "float8_e4m3fn": Format("float8_e4m3fn", 4, -6, 8, Fraction(448), strict_overflow=True),
}


@dataclass(frozen=True)
class Real:
    """A nonnegative real number, by a formula and a rigorous ball at any precision.

    ``exact`` is set when the number is rational, ``square`` when its square is (so
    comparisons with a rational are decided exactly); otherwise ``ball(prec)`` is evaluated
    at the precisions of :data:`PRECISIONS` until a comparison is decided.
    """

    formula: str
    ball: Callable[[], arb] = field(repr=False)
    exact: Fraction | None = None
    square: Fraction | None = None

    @classmethod
    def rational(cls, value: Fraction, formula: str | None = None) -> Real:
        value = Fraction(value)
        return cls(formula or _fraction_text(value), lambda: as_arb(value), exact=value)

    @classmethod
    def sqrt_of(cls, square: Fraction, formula: str) -> Real:
        """``sqrt(square)``, exactly comparable."""
        square = Fraction(square)
        return cls(formula, lambda: as_arb(square).sqrt(), square=square)

    def __float__(self) -> float:
        if self.exact is not None:
            return float(self.exact)
        with precision(PRECISIONS[0]):
            return float(self.ball().mid())

    def enclosure(self, digits: int = DIGITS) -> tuple[str, str]:
        """Rigorous decimal lower and upper bounds (equal strings when exact and short)."""
        with precision(PRECISIONS[-1]):
            ball = self.ball()
            lo, hi = ball.lower(), ball.upper()
            return lo.str(digits, radius=False), hi.str(digits, radius=False)

    def decimal(self, digits: int = DIGITS) -> str:
        """The value to ``digits`` significant digits (from a ball far narrower)."""
        if self.exact is not None and self.exact.denominator == 1:
            return str(self.exact.numerator)
        with precision(PRECISIONS[-1]):
            return self.ball().mid().str(digits, radius=False)

    def times_exceeds(self, g: Fraction, threshold: Fraction) -> bool:
        """Whether ``g * self > threshold`` (``g >= 0``), decided exactly or rigorously."""
        if self.exact is not None:
            return g * self.exact > threshold
        if self.square is not None:
            return g * g * self.square > threshold * threshold
        for prec in PRECISIONS:
            with precision(prec):
                difference = as_arb(g) * self.ball() - as_arb(threshold)
                if difference > 0:
                    return True
                if difference <= 0:
                    return False
        raise ArithmeticError(f"cannot decide {float(g)} * ({self.formula}) > {threshold}")

    def times_reaches(self, g: Fraction, threshold: Fraction) -> bool:
        """Whether ``g * self >= threshold`` (``g >= 0``), decided exactly or rigorously."""
        if self.exact is not None:
            return g * self.exact >= threshold
        if self.square is not None:
            return g * g * self.square >= threshold * threshold
        for prec in PRECISIONS:
            with precision(prec):
                difference = as_arb(g) * self.ball() - as_arb(threshold)
                if difference >= 0:
                    return True
                if difference < 0:
                    return False
        raise ArithmeticError(f"cannot decide {float(g)} * ({self.formula}) >= {threshold}")


@contextmanager
def precision(bits: int) -> Iterator[None]:
    """``with precision(bits):`` evaluates arb expressions at ``bits`` bits (restored after).

    ``proofs.arb.working_precision`` does the same but imports SymPy, which the envelope
    command avoids."""
    saved = ctx.prec
    ctx.prec = bits
    try:
        yield
    finally:
        ctx.prec = saved


def as_arb(value: Fraction | int) -> arb:
    """A rational as an arb ball (exact when the denominator is a power of two)."""
    value = Fraction(value)
    return arb(value.numerator) / arb(value.denominator)


def _fraction_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value}"


def safe_gradient(gain: Real, fmt: Format) -> Fraction | None:
    """The largest format value ``g`` with ``g * gain`` below the overflow threshold (at most
    at it, for a strict overflow), or None when even the largest finite value is safe."""
    if not fmt.overflows(gain, fmt.max_finite):
        return None
    with precision(PRECISIONS[0]):
        guess = Fraction(float(gain.ball().mid()))
    g = fmt.round_down(fmt.overflow / guess) if guess > 0 else fmt.max_finite
    while fmt.overflows(gain, g):
        g = fmt.next_down(g)
    while True:
        up = fmt.next_up(g)
        if up is None or fmt.overflows(gain, up):
            return g
        g = up


def overflowing_gradient(gain: Real, fmt: Format) -> Fraction | None:
    """The smallest format value ``g`` whose ``g * gain`` overflows, or None if none is finite."""
    safe = safe_gradient(gain, fmt)
    return None if safe is None else fmt.next_up(safe)


@dataclass(frozen=True)
class Config:
    """A module's configuration. ``dim`` is the reduced axis (the batch size per feature for
    BatchNorm); ``gamma_max``/``beta_max`` bound ``|gamma_i|``/``|beta_i|``; ``weight_max``
    and ``bias_max`` bound the entries of a Linear (or residual branch) weight and bias;
    ``out_dim`` is a Linear's / WeightNorm's output size; ``nu_max`` bounds the residual
    weight ``|nu_i|``."""

    dim: int = 768
    eps: float | None = None
    gamma_max: float = 1.0
    beta_max: float = 0.0
    out_dim: int | None = None
    weight_max: float = 1.0
    bias_max: float = 0.0
    nu_max: float = 1.0
    tokens: int = 8
    channels: int = 1
    kernel: int = 3
    stride: int = 1
    tau_max: float = 1.0

    def __post_init__(self) -> None:
        for name in ("dim", "out_dim", "tokens", "channels", "kernel", "stride"):
            value = getattr(self, name)
            if value is not None and (int(value) != value or value < 1):
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        for name in ("gamma_max", "beta_max", "weight_max", "bias_max", "nu_max", "tau_max"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
        if self.eps is not None and (not math.isfinite(self.eps) or self.eps < 0):
            raise ValueError(f"eps: expected a finite number >= 0, got {self.eps!r}")

    @property
    def outputs(self) -> int:
        return self.dim if self.out_dim is None else int(self.out_dim)


@dataclass(frozen=True)
class Gain:
    """A supremum of a gain over all inputs, with how it is reached; ``value`` None means
    the gain is unbounded (no upstream gradient is safe for every input). ``tight`` False
    marks a proven upper bound that is not shown to be the supremum: the safe size is still
    safe, and the witness bounds the supremum from below."""

    value: Real | None
    reached: str
    tight: bool = True


@dataclass(frozen=True)
class Forward:
    """The forward principle: ``sup`` bounds ``|y_i|`` over all real inputs (None when the
    output grows without bound); ``slope`` is then the largest ``|y_i|`` per unit of
    ``max|x_j|`` and ``offset`` the added bias, so the forward can overflow once
    ``slope * max|x| + offset`` reaches the threshold."""

    sup: Real | None = None
    reached: str = ""
    slope: Real | None = None
    offset: Fraction = Fraction(0)
    growth: str = ""


#: The most array entries (inputs, parameters and sign pattern together) a witness is built
#: with: 2^22 float64 values, 32 MiB. A larger witness keeps its description, column and
#: exact gain -- the envelope's sizes come from those, not from the arrays -- but its arrays
#: are not built (:attr:`Point.unbuilt` says so).
WITNESS_ENTRIES = 1 << 22


def unbuilt(total: int, sizes: str) -> str:
    """ "" when a witness whose arrays hold ``total`` entries in all is built, else the line
    saying it is not; ``sizes`` names the large dimension(s), e.g. ``"D = 1000000000"``.

    >>> unbuilt(4 * 768, "D = 768")
    ''
    >>> unbuilt(4 * 10**9, "D = 1000000000")
    'witness not built: D = 1000000000 entries (4000000000 array entries in all, more than 4194304)'
    """
    if total <= WITNESS_ENTRIES:
        return ""
    return (
        f"witness not built: {sizes} entries ({total} array entries in all, more than "
        f"{WITNESS_ENTRIES})"
    )


@dataclass(frozen=True)
class Point:
    """A witness input in the format, the Jacobian column it maximizes and the kernel call.

    ``gain`` is the exact ``|J_ij|`` sum of column ``index`` as a :class:`Real`; ``signs``
    is the sign pattern of that column (``g = size * signs`` maximizes ``dx_j``); ``arrays``
    are the kernel's inputs (x, parameters) as float64 arrays of format values. ``arrays``
    and ``signs`` are None when the witness is too large to build (more than
    :data:`WITNESS_ENTRIES` entries); ``unbuilt`` then says so (see :func:`unbuilt`).
    """

    arrays: dict[str, np.ndarray] | None
    signs: np.ndarray | None
    index: tuple[int, ...]
    gain: Real
    description: str
    options: dict[str, Any] = field(default_factory=dict)
    unbuilt: str = ""


@dataclass(frozen=True)
class Model:
    title: str
    parameters: str
    forward: Forward
    gain_2: Gain
    gain_max: Gain
    point: Callable[[Format], Point | None] = field(repr=False)
    kernel: str = ""
    notes: tuple[str, ...] = ()
