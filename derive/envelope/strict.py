"""Where naive half arithmetic breaks: the thresholds of the ``strict_fp16=True`` kernels.

Issue 7 ("FP16 safe envelopes"). A float16 kernel called with ``strict_fp16=True`` rounds
every intermediate result to half precision, as pure half arithmetic would (SPEC, "Dtypes
and float16"). For each row/vector module this file predicts, exactly and without running a
kernel, the parameter values at which that arithmetic overflows or flushes, as a function of
the configuration (the reduced length D and eps), and what the strict kernel then returns.
:func:`strict_thresholds` lists them; :func:`witness` builds the kernel call that shows one
of them at a given parameter value, with the strict result the rounding model below
predicts and the exact result (mpmath, 50 digits). No SymPy: this is meant for the
``liptable`` command, which must answer in about a second (a call takes ~10-150 ms).

Rounding model (``kernels/_f16.py``). A strict operation is one float64 operation on halves
followed by one rounding to half, to nearest, ties to even: exact for ``+ - *`` (a sum of two
halves spans at most 40 bits, a product 22), and for ``/``, ``sqrt`` the float64 result is
correctly rounded and rounding it again to half gives the correctly rounded half result
(53 >= 2 * 11 + 2); ``exp`` is libm's float64 ``exp`` rounded to half, as in the kernels. A
magnitude >= 65520 (the midpoint of 65504 and 2^16) rounds to inf; one <= 2^-25 (half the
smallest subnormal 2^-24; 2^-25 itself is a tie and rounds to the even 0) to zero. Here
``h(v)`` is ``float(np.float16(v))``, which is that rounding (NumPy converts from float64
directly, ``kernels/_f16.round_to_half`` is verified equal to it).

bfloat16 (``dtype="bfloat16"``). The bfloat16 strict kernels run the same loops with every
step rounded to bfloat16 (``kernels/_strict.py``), so the same model holds with ``h`` the
rounding to 8 significant bits over float32's exponent range (:class:`Narrow`; 53 >= 2 * 8
+ 2 again): inf from ``2^128 - 2^119``, zero at or below ``2^-134``, and the thresholds
move accordingly: a sum of ones stalls at 256 (the softmax of a constant row is 1/256 from
D = 257 on), sums overflow near 3.4e38 instead of 65520, eps is 0 only below 2^-134 and
subnormal below 2^-126. The derivations below are written for float16; the searches are
the same for both formats, and the tests pin both formats' boundaries by hand.

Summation order. Every strict reduction of these modules is one running sum, left to right:
``statistics_f16s`` (LayerNorm, RMSNorm, CenterNorm), ``column_statistics_f16s`` (BatchNorm,
over the batch in sample order), ``norm2_f16s`` (WeightNorm), ``_matmul_nt_strict``
(attention: ascending index) and ``_weights_strict`` (softmax). None sums pairwise or in
blocks, so the running sum ``acc_{k+1} = h(acc_k + q_k)`` is the model, with the mean
``h(acc / h(D))``.

Thresholds. A witness family is a simple input with one parameter (a row of equal values c,
a row alternating +c, -c, a zero row at a given eps, ...). ``threshold`` is the first
failing parameter value (``outside`` equals it) and ``inside`` the nearest value that does
not fail: the next half value for a half-valued parameter, the next float64 for eps. Each
boundary is found exactly: the failing set is monotone because ``h`` is (a running sum of n
copies of q is non-decreasing in q, and so are the mean, r^2 and the other chains below),
so a binary search over the ordered half values (or bit patterns) finds its end, and an eps
boundary is the float64 midpoint of the last failing and the first safe half, moved down by
one float64 when the midpoint itself rounds to the safe side (ties to even).

Derivations (the numbers are for the witnesses' gamma = 1, beta = 0.5):

* Running sums stall before they overflow. With ``acc`` in [2^e, 2^(e+1)) the spacing is
  ``2^(e-10)``; a summand at most half of it is absorbed (exactly half: a tie, absorbed when
  acc's last significand bit is even). On [32768, 65504] the spacing is 32, so q <= 16 never
  carries a sum past 32768, and ``65504 + q`` reaches 65520 (rounds to inf) only for
  q >= 16 (16 is a tie rounding to the even 65536 = inf). So the overflow threshold of a
  long sum of q is not ``65520 / D``: for D = 4096 and 8192 a row of c = 4 (q = 16) stalls
  at 32768 while c = 4 + 2^-8 (q = 16.03125 > 16) climbs by 32 per step to inf; for
  D = 768 a row of 80 (a tie on 32 spacing, rounding to steps of 64) ends at 55744 while
  80.0625 (steps of 96) overflows. Just inside a threshold the strict result is finite but
  not accurate: it is whatever the stalled sum gives (:func:`witness` predicts it exactly).
* Sum of x (LayerNorm, CenterNorm, BatchNorm; a row of D equal values c): the sum is inf,
  so the mean is inf and every deviation ``h(c - inf) = -inf``; LayerNorm and BatchNorm get
  var = inf, ``r = h(1/inf) = 0`` and ``y = h(beta + h(-inf * 0)) = NaN``; CenterNorm's
  scale is D/(D - 1), so ``y = -inf``. The exact result is beta.
* Sum of squares (LayerNorm and BatchNorm: +c, -c, +c, ... whose partial sums c, 0, c, ...
  are exact, so the mean is 0 and d = x, with a last 0 when D is odd; RMSNorm and
  WeightNorm: a row of c; attention: q.k of two rows of c): ``2 floor(D/2)`` (resp. D, or
  d) copies of ``h(c^2)`` sum to inf; then ``r = h(1/h(sqrt(inf))) = 0`` and y collapses
  to ``h(beta + 0) = beta`` (WeightNorm: W = 0), while the exact y is about
  ``+-gamma + beta`` (W = gamma/sqrt(D)). In attention the logit is inf, the row maximum
  inf and ``inf - inf`` makes that row of P, and Y, NaN; the exact Y is c.
* Square underflow (only when eps is 0 in half, or, for BatchNorm's std_plus_eps, when
  ``1/eps`` overflows): c^2 <= 2^-25 rounds to 0 (c <= 1448 * 2^-23), and for long rows the
  mean of small squares flushes as well (a sum of 2^-24 stalls at 2^-13, and
  ``2^-13/8192 = 2^-26`` rounds to 0); then ``r = h(1/0) = inf`` and ``y = h(c * inf) =
  +-inf`` (NaN at a zero entry), W = inf, while the exact result is finite.
* eps: eps <= 2^-25 is 0 in half: a zero-variance row (the zero row) has var + eps = 0,
  r = inf and ``y = h(0 * inf) = NaN`` (WeightNorm: a zero v_i gives W_i = NaN); the exact
  y is beta (W_i = 0). std_plus_eps: ``r = h(1/eps)`` overflows already for eps in half
  <= 2^-16 (1/2^-16 = 65536; the next half 257 * 2^-24 gives 65281.2 -> 65280): every eps
  <= 256.5 * 2^-24 (the tie rounds to the even 256 * 2^-24).
* r^2: the strict Jacobians of LayerNorm and RMSNorm form ``h(r * r)`` (and WeightNorm's dv
  ``h(r * r)``); at a zero-variance row ``r = h(1/h(sqrt(eps)))`` is >= 256 exactly when eps
  in half is <= 2^-16 (257 * 2^-24 gives r = 255.5, r^2 = 65280.25 -> 65280), so for eps
  <= 256.5 * 2^-24 (this includes the default 1e-5) ``r^2 = inf`` meets ``d_i d_j = 0``
  (``p = 0``) and the whole Jacobian (dv) is NaN. BatchNorm sets its sigma-path weight to 0
  at zero variance and has no such threshold.
* eps subnormal: eps below 2^-14 - 2^-25 is stored as a subnormal, a multiple of 2^-24
  (absolute error up to 2^-25, relative up to 2^-25/eps instead of 2^-11): eps = 1e-5 is
  ``168 * 2^-24 = 1.0014e-5``, 1e-6 is ``17 * 2^-24 = 1.0133e-6``. Nothing overflows at the
  boundary; the zero-variance scale ``r = 1/sqrt(eps)`` (the gradient dx = r g of a zero
  row, g = e_0 - e_1; WeightNorm's dv_j = r) inherits half of that error (all of it for
  std_plus_eps, r = 1/eps).
* Softmax (``kernels/softmax.py``; the row maximum is subtracted, so exp never overflows):
  ``h(exp(t))`` is 0 for t <= -17.34375 (exp(t) <= 2^-25; the next half, -17.328125, gives
  2^-25 * 1.00055 -> 2^-24) -- harmless, the exact weight rounds to 0 as well; with the
  maximum first, a row (0, t, ..., t) keeps the running sum at 1 for t <= -7.625, because
  ``h(exp(t)) <= 2^-11`` is half an ULP of 1 (the tie rounds to the even 1): y_0 = 1
  instead of ``1/(1 + (D-1) e^t)`` (0.2 for D = 8192); a constant row sums ones exactly up
  to 2048 and stalls there (2048 + 1 is a tie, rounding to 2048), so from D = 2049 on
  y = 2^-11 instead of 1/D; in the backward pass ``h(g_m - g_j)`` overflows for
  g = (c, -c, 0, ...) from c = 32768 (2c >= 65520), giving inf and NaN in dx = g/D.

>>> by_quantity = {t.quantity: t for t in strict_thresholds("rmsnorm", 4096, 1e-6)}
>>> by_quantity["sum of squares"].threshold, by_quantity["sum of squares"].inside
(4.00390625, 4.0)
>>> by_quantity["eps"].threshold == 2.0**-25
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, wraps

import mpmath
import numpy as np

from derive.catalog import strict_keys
from derive.reference.formats import BFLOAT16, round_float64

__all__ = [
    "DEFAULT_EPS",
    "STRICT_MODULES",
    "StrictThreshold",
    "Witness",
    "strict_thresholds",
    "witness",
]

#: The modules covered, by kernel module name (``kernels.<name>``).
STRICT_MODULES: tuple[str, ...] = strict_keys()

#: Each kernel's default eps (the modules without one ignore the argument).
DEFAULT_EPS = {"layernorm": 1e-5, "rmsnorm": 1e-6, "batchnorm": 1e-5, "weightnorm": 0.0}


#: The witnesses' parameters: gamma = 1 and beta = 0.5 (so that "beta" differs from 0).
GAMMA, BETA = 1.0, 0.5

#: The quantities (``StrictThreshold.quantity``).
SUM_X = "sum of x"
SUM_SQUARES = "sum of squares"
SQUARE_UNDERFLOW = "square underflow"
EPS_ZERO = "eps"
EPS_SUBNORMAL = "eps subnormal"
R_SQUARED = "r^2"
STD_SQUARE_UNDERFLOW = "square underflow (std_plus_eps)"
STD_EPS = "1/eps (std_plus_eps)"
NORM2 = "|v|^2"
NORM2_UNDERFLOW = "|v|^2 underflow"
EXP_UNDERFLOW = "exp underflow"
EXP_ABSORBED = "sum of exp absorbs"
EXP_STALLS = "sum of exp stalls"
G_SPREAD = "g_m - g_j"
QK = "Q K^T"

#: BatchNorm quantities that belong to one denominator; the others hold for both.
_STD_ONLY = (STD_SQUARE_UNDERFLOW, STD_EPS)
_SQRT_ONLY = (SQUARE_UNDERFLOW, EPS_ZERO)


#: mpmath precision of the exact values.
_DPS = 50


@dataclass(frozen=True)
class StrictThreshold:
    """One threshold of naive half arithmetic in a module's strict kernel."""

    module: str  # kernel module name, e.g. "layernorm"
    quantity: str  # the intermediate that overflows or flushes: "sum of x", "eps", ...
    statement: str  # one sentence: what breaks, for which inputs, what the kernel returns
    parameter: str  # what the threshold is in, e.g. "c (all-c row)", "eps"
    threshold: float  # the failing value nearest the safe side (a half or an exact float64)
    inside: float  # the nearest value that does not fail (finite, given a safe eps)
    outside: float  # == threshold: there the strict kernel returns what statement says


@dataclass(frozen=True)
class Witness:
    """The kernel call that shows a threshold at one parameter value.

    Call ``getattr(kernels.<module>, call)(*arguments, **dict(keywords))`` with or without
    ``strict_fp16=True``; take element ``output`` of a tuple result (None: not a tuple).
    ``strict`` is the strict result the rounding model predicts (float16), ``exact`` the
    exact result (float64, NaN where it is 0/0).
    """

    call: str
    arguments: tuple
    keywords: tuple[tuple[str, object], ...]
    output: int | None
    strict: np.ndarray
    exact: np.ndarray


def _ieee(function: Callable) -> Callable:
    """Run ``function`` with NumPy's floating-point warnings off: inf and NaN are results."""

    @wraps(function)
    def wrapped(*args, **kwargs):
        with np.errstate(all="ignore"):
            return function(*args, **kwargs)

    return wrapped


# --- the arithmetic of one 16-bit format ------------------------------------------------------


def _div(a: float, b: float) -> float:
    """IEEE ``a / b`` (x/0 is +-inf, 0/0 NaN), as the kernels' ``error_model="numpy"``."""
    return float(np.float64(a) / np.float64(b))


def _power(exponent: int) -> str:
    return f"2^{exponent}"


@dataclass(frozen=True, eq=False)
class Narrow:
    """Strict arithmetic in one 16-bit format: its rounding ``h`` and the searches over its
    values. float16 (11 significant bits, largest 65504) and bfloat16 (8 bits, float32's
    exponent range, largest 2^128 - 2^120) are instances (:data:`FORMATS`)."""

    name: str  # "float16" or "bfloat16", the input dtype's name
    dtype: np.dtype
    precision: int  # significant bits p: one rounding errs by at most 2^-p relative
    emin: int  # the exponent of the smallest normal value, 2^emin
    #: Every finite value from +0 up to the largest, increasing: index = bit pattern.
    values: np.ndarray = field(repr=False)

    @property
    def last(self) -> int:
        return self.values.size - 1

    @property
    def largest(self) -> float:
        return float(self.values[-1])

    @property
    def overflow(self) -> float:
        """The overflow threshold: the largest value plus half its spacing (65520 in half)."""
        return self.largest + (self.largest - float(self.values[-2])) / 2

    @property
    def tiny(self) -> int:
        """The exponent of the smallest subnormal, 2^tiny (2^-24 in half)."""
        return self.emin - self.precision + 1

    @property
    def smallest_normal(self) -> float:
        return 2.0**self.emin

    @property
    def smallest_subnormal(self) -> float:
        return 2.0**self.tiny

    def h(self, v: float) -> float:
        """``v`` rounded to the format (to nearest, ties to even, once), as a float: NumPy's
        float16 cast, or :func:`_round_scalar` (a scalar call costs a tenth of an array's,
        and the searches make thousands)."""
        if self.dtype == np.float16:
            return float(np.float16(v))
        return _round_scalar(float(v), self.precision, self.emin)

    def hv(self, values) -> np.ndarray:
        """Elementwise :meth:`h` of an array, as float64."""
        return self.array(values).astype(np.float64)

    def array(self, values) -> np.ndarray:
        """``values`` rounded once to the format, as an array of its dtype."""
        return round_float64(np.asarray(values, dtype=np.float64), self.dtype)

    def running_sum(self, values: np.ndarray) -> float:
        """The strict running sum, left to right, every partial sum rounded."""
        acc = 0.0
        for v in np.asarray(values, dtype=np.float64).tolist():
            acc = self.h(acc + v)
        return acc

    def repeat_sum(self, q: float, n: int) -> float:
        """The strict running sum of ``n`` copies of the value ``q``. Once a step leaves the
        sum unchanged (stalled) or makes it inf, every later step does the same, so it stops
        there: at most a few thousand steps whatever n is."""
        acc = 0.0
        for _ in range(n):
            new = self.h(acc + q)
            if new == acc or math.isinf(new):
                return new
            acc = new
        return acc

    def scale_sqrt(self, s: float, eps: float) -> float:
        """``r = 1/sqrt(eps + s)`` in strict arithmetic (``scale_f16s``, ``scale_sqrt_f16s``
        and their ``bf16s`` twins)."""
        return self.h(_div(1.0, self.h(math.sqrt(self.h(eps + s)))))

    def scale_std(self, s: float, eps: float) -> float:
        """``r = 1/(eps + sqrt(s))`` in strict arithmetic (``scale_std_f16s``)."""
        return self.h(_div(1.0, self.h(eps + self.h(math.sqrt(s)))))

    def mean(self, total: float, size: int) -> float:
        """A strict mean: the sum divided by the length rounded to the format."""
        return self.h(_div(total, self.h(size)))

    def first_failing(self, fails: Callable[[float], bool], lo: int = 1) -> int | None:
        """The smallest bit pattern b >= lo with ``fails(value b)``, for a predicate that is
        False and then True over increasing values; None if even the largest does not
        fail."""
        hi = self.last
        if not fails(self.values[hi]):
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if fails(self.values[mid]):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def last_failing(self, fails: Callable[[float], bool], lo: int = 0) -> int | None:
        """The largest bit pattern b >= lo with ``fails(value b)``, for a predicate that is
        True and then False over increasing values; None if the value ``lo`` does not
        fail."""
        if not fails(self.values[lo]):
            return None
        hi = self.last
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fails(self.values[mid]):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def eps_boundary(self, fails: Callable[[float], bool]) -> tuple[float, float, float]:
        """``(boundary, fail, safe)``: the largest float64 eps >= 0 whose rounding fails, for
        a predicate True and then False over increasing values, with the last failing and
        the first safe value. The boundary is their midpoint, or the float64 below it when
        the midpoint (a tie) rounds to the safe one."""
        last = self.last_failing(fails)
        if last is None or last == self.last:
            raise ValueError(
                f"no eps boundary: the predicate must fail at 0 and not at {self.largest:g}"
            )
        fail, safe = float(self.values[last]), float(self.values[last + 1])
        mid = (fail + safe) / 2  # exact: two values a subnormal step apart or more
        boundary = mid if self.h(mid) == fail else math.nextafter(mid, 0.0)
        return boundary, fail, safe

    def pair(self, b: int, upward: bool) -> tuple[float, float]:
        """(outside, inside) for the failing value b: inside is the next value towards
        safety."""
        return float(self.values[b]), float(self.values[b - 1] if upward else self.values[b + 1])

    def in_units(self, eps: float) -> str:
        """An eps boundary in units of the smallest subnormal."""
        units = eps / self.smallest_subnormal
        unit = _power(self.tiny)
        if units * 2 == round(units * 2):
            return f"{units:g} * {unit} = {eps:.6g}"
        return f"{eps!r}, the float64 just below {round(units * 2) / 2:g} * {unit}"


def _round_scalar(v: float, precision: int, emin: int) -> float:
    """``v`` rounded once to ``precision`` significant bits with normals down to 2^emin,
    ties to even, and the format's overflow (inf from the largest value plus half a step):
    ``v`` divided by the quantum of its binade is exact in float64, and Python's ``round``
    takes it to the nearest integer, ties to even. Agrees with ``round_float64`` (a test)."""
    if not math.isfinite(v) or v == 0.0:
        return v
    _, exponent = math.frexp(v)  # |v| in [2^(exponent-1), 2^exponent)
    quantum = 2.0 ** max(exponent - precision, emin - precision + 1)
    result = round(v / quantum) * quantum
    if abs(result) >= 2.0 ** (2 - emin):  # 2^(emax + 1): the overflow threshold's image
        return math.copysign(math.inf, v)
    return result


def _finite_values(dtype: np.dtype, patterns: int) -> np.ndarray:
    return np.arange(patterns, dtype=np.uint16).view(dtype).astype(np.float64)


#: The formats of the strict kernels, by the input dtype's name.
FORMATS = {
    "float16": Narrow("float16", np.dtype(np.float16), 11, -14, _finite_values(np.float16, 0x7C00)),
    "bfloat16": Narrow("bfloat16", BFLOAT16, 8, -126, _finite_values(BFLOAT16, 0x7F80)),
}


def _g(v: float) -> str:
    return f"{v:.8g}"


def _side(eps: float, threshold: float) -> str:
    return "outside" if eps <= threshold else "inside"


# --- inputs of the witnesses -------------------------------------------------------------------


def _alternating(c: float, size: int) -> np.ndarray:
    """(c, -c, c, -c, ...) with a last 0 when size is odd: partial sums c, 0, c, ..., 0."""
    row = np.where(np.arange(size) % 2 == 0, c, -c).astype(np.float64)
    if size % 2:
        row[-1] = 0.0
    return row


def _unit_pair(size: int) -> np.ndarray:
    """g = e_0 - e_1: sum 0, so dx = r (g - mean(g)) = r g at a zero-variance row."""
    g = np.zeros(size)
    g[0], g[1] = 1.0, -1.0
    return g


# --- the strict loops, emulated ----------------------------------------------------------------


def _statistics(fmt: Narrow, row: np.ndarray, center: bool) -> tuple[float, np.ndarray, float]:
    """``(h(D), d, s)`` of ``statistics_f16s`` (and ``column_statistics_f16s``): the mean
    (0 without centering), the rounded deviations and the mean of their rounded squares."""
    n = fmt.h(row.size)
    m = fmt.h(_div(fmt.running_sum(row), n)) if center else 0.0
    d = fmt.hv(row - m)
    s = fmt.h(_div(fmt.running_sum(fmt.hv(d * d)), n))
    return n, d, s


def _output(fmt: Narrow, d: np.ndarray, r: float, gamma: float, beta: float) -> np.ndarray:
    """``y = h(beta + h(h(d gamma) r))`` (``output_f16s``)."""
    return fmt.hv(beta + fmt.hv(fmt.hv(d * gamma) * r))


def _norm_forward(fmt: Narrow, row: np.ndarray, eps: float, kind: str, denom: str = "sqrt_var_eps"):
    """Strict forward of one row: LayerNorm, RMSNorm, CenterNorm, BatchNorm (a column)."""
    n, d, s = _statistics(fmt, row, center=kind != "rmsnorm")
    if kind == "centernorm":
        r = fmt.h(_div(n, fmt.h(n - 1.0)))
    elif denom == "std_plus_eps":
        r = fmt.scale_std(s, eps)
    else:
        r = fmt.scale_sqrt(s, eps)
    return _output(fmt, d, r, GAMMA, BETA)


def _norm_jacobian(fmt: Narrow, row: np.ndarray, eps: float, center: bool) -> np.ndarray:
    """Strict Jacobian of LayerNorm (center) or RMSNorm (``entry_f16s``), gamma = 1."""
    n, d, s = _statistics(fmt, row, center)
    r = fmt.scale_sqrt(s, eps)
    t0 = fmt.h(GAMMA * r)
    t = fmt.hv(fmt.hv(fmt.hv(np.outer(d, d)) * fmt.h(r * r)) / n)
    delta = np.eye(row.size)
    diagonal = fmt.hv(delta - fmt.h(1.0 / n)) if center else delta
    return fmt.hv(t0 * fmt.hv(diagonal - t))


def _norm_vjp(
    fmt: Narrow, row: np.ndarray, g: np.ndarray, eps: float, kind: str, denom: str
) -> np.ndarray:
    """Strict dx of LayerNorm, RMSNorm (``vjp_f16s``) or BatchNorm (``vjp_f16s_*``)."""
    n, d, s = _statistics(fmt, row, center=kind != "rmsnorm")
    r = fmt.scale_std(s, eps) if denom == "std_plus_eps" else fmt.scale_sqrt(s, eps)
    a = fmt.hv(g * GAMMA)
    ma = fmt.h(_div(fmt.running_sum(a), n))
    if kind == "batchnorm":
        if s > 0.0:
            w = (
                fmt.h(r * r)
                if denom == "sqrt_var_eps"
                else fmt.h(r * fmt.h(1.0 / fmt.h(math.sqrt(s))))
            )
        else:
            w = 0.0 * r * r  # the kernels' value at zero variance (NaN when r is inf)
        mad = fmt.h(_div(fmt.running_sum(fmt.hv(fmt.hv(d * g) * GAMMA)), n))
        return fmt.hv(r * fmt.hv(fmt.hv(a - ma) - fmt.hv(fmt.hv(d * mad) * w)))
    maz = fmt.h(_div(fmt.running_sum(fmt.hv(fmt.hv(fmt.hv(d * g) * GAMMA) * r)), n))
    inner = fmt.hv(a - ma) if kind == "layernorm" else a
    return fmt.hv(r * fmt.hv(inner - fmt.hv(fmt.hv(d * maz) * r)))


def _weightnorm_weights(fmt: Narrow, v: np.ndarray, eps: float) -> np.ndarray:
    """Strict W of one row v (``weights_f16s``), gamma = 1."""
    r = fmt.scale_sqrt(fmt.running_sum(fmt.hv(v * v)), eps)
    return fmt.hv(fmt.h(GAMMA * r) * v)


def _weightnorm_dv(fmt: Narrow, v: np.ndarray, x: np.ndarray, g: float, eps: float) -> np.ndarray:
    """Strict dv of one row v for one sample x and upstream g (``parameter_gradients_f16s``
    after ``dW = g^T x``)."""
    r = fmt.scale_sqrt(fmt.running_sum(fmt.hv(v * v)), eps)
    dw = fmt.hv(g * x)
    p = fmt.running_sum(fmt.hv(dw * v))
    t2 = fmt.h(p * fmt.h(r * r))
    return fmt.hv(fmt.h(GAMMA * r) * fmt.hv(dw - fmt.hv(t2 * v)))


def _softmax_weights(fmt: Narrow, row: np.ndarray) -> tuple[np.ndarray, int]:
    """Strict softmax of a finite row (``_weights_strict``) and its first argmax."""
    m = int(np.argmax(row))  # the first index of the maximum
    shifted = fmt.hv(row - row[m])
    e = fmt.hv([math.exp(t) for t in shifted.tolist()])
    return fmt.hv(e / fmt.running_sum(e)), m


def _softmax_vjp(fmt: Narrow, row: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Strict dx (``_vjp_row_strict``): c = sum_{j != m} y_j (g_m - g_j), left to right."""
    y, m = _softmax_weights(fmt, row)
    terms = fmt.hv(y * fmt.hv(g[m] - g))
    c = fmt.running_sum(np.delete(terms, m))
    dx = fmt.hv(y * fmt.hv(fmt.hv(g - g[m]) + c))
    dx[m] = fmt.h(y[m] * c)
    return dx


def _matmul(fmt: Narrow, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Strict ``a @ b`` (``_matmul_nt_strict``): products and running sums rounded."""
    out = np.empty((a.shape[0], b.shape[1]))
    for i in range(a.shape[0]):
        for k in range(b.shape[1]):
            out[i, k] = fmt.running_sum(fmt.hv(a[i] * b[:, k]))
    return out


def _attention_forward(fmt: Narrow, X, Wq, Wk, Wv) -> np.ndarray:
    """Strict DP attention (``dp_attention._Prepared.forward``)."""
    Q, K, V = _matmul(fmt, X, Wq.T), _matmul(fmt, X, Wk.T), _matmul(fmt, X, Wv.T)
    S = fmt.hv(_matmul(fmt, Q, K.T) / fmt.h(math.sqrt(Wq.shape[0])))
    P = np.empty(S.shape)
    for i, s in enumerate(S):
        if np.any(np.isnan(s)) or np.any(s == math.inf) or np.all(s == -math.inf):
            P[i] = math.nan  # ``_row_max``: such a row is NaN
            continue
        top = s[int(np.argmax(s))]
        e = fmt.hv([math.exp(t) for t in fmt.hv(s - top).tolist()])
        P[i] = fmt.hv(e / fmt.running_sum(e))
    return _matmul(fmt, P, V)


# --- exact values (mpmath) ------------------------------------------------------------------


def _distinct(values) -> tuple[np.ndarray, np.ndarray]:
    """``(distinct, inverse)``: the distinct values of ``values`` in float64 (a witness holds
    a few, in thousands of copies) and, for each element in order, its index among them.
    The exact computations below evaluate each step once per distinct value and sum over
    every element in order, each term the same number as an elementwise computation's:
    the same results."""
    flat = np.asarray(values, dtype=np.float64).ravel()
    return np.unique(flat, return_inverse=True)


def _mp_vector(values) -> list:
    return [mpmath.mpf(float(v)) for v in np.asarray(values, dtype=np.float64).ravel()]


def _per_element(exact, inverse: np.ndarray, shape) -> np.ndarray:
    """The float64 values of ``exact`` (one per distinct input, :func:`_distinct`) at every
    element, in the input's ``shape``."""
    return np.array([float(v) for v in exact], dtype=np.float64)[inverse].reshape(shape)


def _exact_norm(row: np.ndarray, eps: float, kind: str, denom: str = "sqrt_var_eps"):
    """Exact y of one row (LayerNorm, RMSNorm, CenterNorm, BatchNorm column), gamma = 1,
    by distinct values (:func:`_distinct`; elementwise, this was half of the strict
    envelope tests' time)."""
    values, inverse = _distinct(row)
    with mpmath.workdps(_DPS):
        x = _mp_vector(values)
        size = row.size
        mean = mpmath.fsum(x[i] for i in inverse) / size if kind != "rmsnorm" else mpmath.mpf(0)
        d = [v - mean for v in x]
        if kind == "centernorm":
            y = [mpmath.mpf(size) / (size - 1) * v + BETA for v in d]
            return _per_element(y, inverse, row.shape)
        squares = [v * v for v in d]
        var = mpmath.fsum(squares[i] for i in inverse) / size
        if denom == "std_plus_eps":
            denominator = mpmath.sqrt(var) + eps
        else:
            denominator = mpmath.sqrt(var + eps)
        if denominator == 0:
            return np.full(row.shape, math.nan)  # 0/0
        y = [GAMMA * v / denominator + BETA for v in d]
        return _per_element(y, inverse, row.shape)


def _exact_zero_scale(eps: float, denom: str = "sqrt_var_eps"):
    """The exact r at zero variance, an mpf (None when it is 1/0)."""
    if eps == 0:
        return None
    with mpmath.workdps(_DPS):
        return 1 / mpmath.mpf(eps) if denom == "std_plus_eps" else 1 / mpmath.sqrt(eps)


# --- witnesses -----------------------------------------------------------------------------


@_ieee
def witness(
    module: str,
    quantity: str,
    dim: int,
    value: float,
    eps: float | None = None,
    denom: str = "sqrt_var_eps",
    dtype: str = "float16",
) -> Witness:
    """The kernel call showing ``quantity`` of ``module`` at the parameter ``value``.

    ``dim`` is the configuration's D (for BatchNorm the batch length M of one feature, for
    attention the head width d); ``eps`` the configured eps (None: the kernel's default),
    unless the parameter is eps itself; ``denom`` BatchNorm's denominator for the
    quantities that hold for both (the others name theirs); ``dtype`` the input's format,
    ``"float16"`` or ``"bfloat16"``. A value c is rounded to that format first; an eps is
    passed on as it is (the kernels round it).
    """
    eps = _check(module, dim, eps)
    fmt = _format(dtype)
    kind = {"module": module, "quantity": quantity}
    if module in ("layernorm", "rmsnorm", "centernorm"):
        return _row_norm_witness(fmt, module, quantity, dim, value, eps, kind)
    if module == "batchnorm":
        if quantity in _STD_ONLY:
            denom = "std_plus_eps"
        elif quantity in _SQRT_ONLY:
            denom = "sqrt_var_eps"
        return _batchnorm_witness(fmt, quantity, dim, value, eps, denom, kind)
    if module == "weightnorm":
        return _weightnorm_witness(fmt, quantity, dim, value, eps, kind)
    if module == "softmax":
        return _softmax_witness(fmt, quantity, dim, value, kind)
    return _attention_witness(fmt, quantity, dim, value, kind)


def _unknown(kind: dict) -> ValueError:
    return ValueError(f"quantity: {kind['quantity']!r} is not a threshold of {kind['module']}")


def _row_norm_witness(fmt: Narrow, module, quantity, dim, value, eps, kind) -> Witness:
    ones, betas = fmt.array(np.ones(dim)), fmt.array(np.full(dim, BETA))
    tail = () if module == "centernorm" else (eps,)
    if quantity in (SUM_X, SUM_SQUARES, SQUARE_UNDERFLOW):
        if module == "rmsnorm" and quantity == SUM_X:
            raise _unknown(kind)
        if module == "centernorm" and quantity != SUM_X:
            raise _unknown(kind)
        if quantity == SUM_X or module == "rmsnorm":
            row = fmt.hv(np.full(dim, value))
        else:
            row = fmt.hv(_alternating(value, dim))
        strict = _norm_forward(fmt, row, fmt.h(eps), module)
        exact = _exact_norm(row, eps, module)
        arguments = (fmt.array(row)[np.newaxis], ones, betas, *tail)
        return Witness("forward", arguments, (), None, fmt.array(strict)[np.newaxis], exact[None])
    if module == "centernorm":
        raise _unknown(kind)
    zero = np.zeros(dim)
    eps_h = fmt.h(value)
    if quantity == EPS_ZERO:
        strict = _norm_forward(fmt, zero, eps_h, module)
        exact = _exact_norm(zero, value, module)
        arguments = (fmt.array(zero)[np.newaxis], ones, betas, value)
        return Witness("forward", arguments, (), None, fmt.array(strict)[np.newaxis], exact[None])
    if quantity == R_SQUARED:
        strict = _norm_jacobian(fmt, zero, eps_h, center=module == "layernorm")
        r = _exact_zero_scale(value)
        centered = 1.0 / dim if module == "layernorm" else 0.0
        exact = np.full((dim, dim), math.nan) if r is None else float(r) * (np.eye(dim) - centered)
        return Witness(
            "jacobian", (fmt.array(zero), ones, betas, value), (), None, fmt.array(strict), exact
        )
    if quantity == EPS_SUBNORMAL:
        g = _unit_pair(dim)
        strict = _norm_vjp(fmt, zero, g, eps_h, module, "sqrt_var_eps")
        r = _exact_zero_scale(value)
        exact = np.full(dim, math.nan) if r is None else float(r) * g
        arguments = (fmt.array(zero)[np.newaxis], fmt.array(g)[np.newaxis], ones, betas, value)
        return Witness("vjp", arguments, (), 0, fmt.array(strict)[np.newaxis], exact[None])
    raise _unknown(kind)


def _batchnorm_witness(fmt: Narrow, quantity, dim, value, eps, denom, kind) -> Witness:
    one, beta = fmt.array([GAMMA]), fmt.array([BETA])
    keywords = (("denom", denom),)
    if quantity in (SUM_X, SUM_SQUARES, SQUARE_UNDERFLOW, STD_SQUARE_UNDERFLOW):
        column = fmt.hv(np.full(dim, value) if quantity == SUM_X else _alternating(value, dim))
        strict = _norm_forward(fmt, column, fmt.h(eps), "batchnorm", denom)
        exact = _exact_norm(column, eps, "batchnorm", denom)
        arguments = (fmt.array(column)[:, np.newaxis], one, beta, eps)
        return Witness(
            "forward", arguments, keywords, None, fmt.array(strict)[:, None], exact[:, None]
        )
    zero = np.zeros(dim)
    if quantity in (EPS_ZERO, STD_EPS):
        strict = _norm_forward(fmt, zero, fmt.h(value), "batchnorm", denom)
        exact = _exact_norm(zero, value, "batchnorm", denom)
        arguments = (fmt.array(zero)[:, np.newaxis], one, beta, value)
        return Witness(
            "forward", arguments, keywords, None, fmt.array(strict)[:, None], exact[:, None]
        )
    if quantity == EPS_SUBNORMAL:
        g = _unit_pair(dim)
        strict = _norm_vjp(fmt, zero, g, fmt.h(value), "batchnorm", denom)
        r = _exact_zero_scale(value, denom)
        exact = np.full(dim, math.nan) if r is None else float(r) * g
        arguments = (fmt.array(zero)[:, np.newaxis], fmt.array(g)[:, np.newaxis], one, beta, value)
        return Witness("vjp", arguments, keywords, 0, fmt.array(strict)[:, None], exact[:, None])
    raise _unknown(kind)


def _weightnorm_witness(fmt: Narrow, quantity, dim, value, eps, kind) -> Witness:
    one = fmt.array([GAMMA])
    if quantity in (NORM2, NORM2_UNDERFLOW, EPS_ZERO):
        v = np.zeros(dim) if quantity == EPS_ZERO else fmt.hv(np.full(dim, value))
        eps_used = value if quantity == EPS_ZERO else eps
        strict = _weightnorm_weights(fmt, v, fmt.h(eps_used))
        values, inverse = _distinct(v)
        with mpmath.workdps(_DPS):
            entries = _mp_vector(values)
            squares = [t**2 for t in entries]
            norm2 = mpmath.fsum(squares[i] for i in inverse) + eps_used
            if norm2 == 0:
                exact = np.full(dim, math.nan)
            else:
                w = [GAMMA * t / mpmath.sqrt(norm2) for t in entries]
                exact = _per_element(w, inverse, dim)
        arguments = (fmt.array(np.zeros(dim)), fmt.array(v)[np.newaxis], one, eps_used)
        return Witness("jacobian", arguments, (), None, fmt.array(strict)[np.newaxis], exact[None])
    if quantity in (R_SQUARED, EPS_SUBNORMAL):
        v, x = np.zeros(dim), np.ones(dim)
        strict = _weightnorm_dv(fmt, v, x, 1.0, fmt.h(value))
        r = _exact_zero_scale(value)
        exact = np.full(dim, math.nan) if r is None else np.full(dim, float(r))
        arguments = (
            fmt.array(x)[np.newaxis],
            fmt.array([[1.0]]),
            fmt.array(v)[np.newaxis],
            one,
            value,
        )
        return Witness("vjp", arguments, (), 1, fmt.array(strict)[np.newaxis], exact[None])
    raise _unknown(kind)


def _softmax_exact(row: np.ndarray) -> np.ndarray:
    values, inverse = _distinct(row)
    with mpmath.workdps(_DPS):
        e = [mpmath.exp(v) for v in _mp_vector(values)]
        total = mpmath.fsum(e[i] for i in inverse)
        return _per_element([v / total for v in e], inverse, row.shape)


def _softmax_witness(fmt: Narrow, quantity, dim, value, kind) -> Witness:
    if quantity in (EXP_UNDERFLOW, EXP_ABSORBED, EXP_STALLS):
        if quantity == EXP_STALLS:
            row = np.zeros(int(value))  # the parameter is the row length
        else:
            row = fmt.hv(np.full(dim, value))
            row[0] = 0.0  # the maximum first
        y, _ = _softmax_weights(fmt, row)
        exact = _softmax_exact(row)
        return Witness(
            "forward", (fmt.array(row)[np.newaxis],), (), None, fmt.array(y)[None], exact[None]
        )
    if quantity == G_SPREAD:
        row, g = np.zeros(dim), np.zeros(dim)
        g[0], g[1] = fmt.h(value), -fmt.h(value)
        strict = _softmax_vjp(fmt, row, g)
        exact = g / dim  # y = 1/D and <g, y> = 0, so dx = g/D (one float64 rounding)
        arguments = (fmt.array(row)[np.newaxis], fmt.array(g)[np.newaxis])
        return Witness("vjp", arguments, (), None, fmt.array(strict)[None], exact[None])
    raise _unknown(kind)


def _attention_witness(fmt: Narrow, quantity, dim, value, kind) -> Witness:
    if quantity != QK:
        raise _unknown(kind)
    X = fmt.hv(np.full((2, 1), value))
    Wq = np.ones((dim, 1))
    Wv = np.ones((1, 1))
    strict = _attention_forward(fmt, X, Wq, Wq, Wv)
    exact = X.copy()  # two equal tokens: P = 1/2 each, Y = V = c
    arguments = (fmt.array(X), fmt.array(Wq), fmt.array(Wq), fmt.array(Wv))
    return Witness("forward", arguments, (), None, fmt.array(strict), exact)


# --- the thresholds ------------------------------------------------------------------------------


def _check(module: str, dim: int, eps: float | None) -> float:
    if module not in STRICT_MODULES:
        raise ValueError(f"module: expected one of {list(STRICT_MODULES)}, got {module!r}")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ValueError(f"dim: expected an integer >= 1, got {dim!r}")
    if module == "centernorm" and dim < 2:
        raise ValueError(f"dim: CenterNorm needs D >= 2, got {dim!r}")
    if eps is None:
        return DEFAULT_EPS.get(module, 0.0)
    value = float(eps)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"eps: expected a finite number >= 0, got {eps!r}")
    return value


@_ieee
def strict_thresholds(
    module: str, dim: int, eps: float | None = None, dtype: str = "float16"
) -> tuple[StrictThreshold, ...]:
    """The thresholds of ``module``'s strict kernel for the length ``dim`` and ``eps``, with
    input of the 16-bit format ``dtype`` (``"float16"`` or ``"bfloat16"``).

    ``dim``: the reduced length D (BatchNorm: the M values of one feature; attention: the
    head width d; softmax: the row length). ``eps``: None for the kernel's default; ignored
    by CenterNorm, softmax and attention. A threshold that the configuration cannot reach
    (a sum of one term, a square underflow with eps nonzero in the format) is left out.
    """
    eps = _check(module, dim, eps)
    return _thresholds(module, int(dim), eps, _format(dtype).name)


def _format(dtype: str) -> Narrow:
    if dtype not in FORMATS:
        raise ValueError(f"dtype: expected one of {list(FORMATS)}, got {dtype!r}")
    return FORMATS[dtype]


@cache
def _thresholds(module: str, dim: int, eps: float, dtype: str) -> tuple[StrictThreshold, ...]:
    builders = {
        "layernorm": _layernorm,
        "rmsnorm": _rmsnorm,
        "centernorm": _centernorm,
        "batchnorm": _batchnorm,
        "weightnorm": _weightnorm,
        "softmax": _softmax,
        "dp_attention": _dp_attention,
    }
    return tuple(builders[module](FORMATS[dtype], dim, eps))


def _threshold(module, quantity, statement, parameter, outside, inside) -> StrictThreshold:
    return StrictThreshold(module, quantity, statement, parameter, outside, inside, outside)


def _sum_x(fmt: Narrow, module: str, dim: int, noun: str, outcome: str) -> list[StrictThreshold]:
    """A row (or feature) of D equal values c: the first c whose running sum is inf."""
    b = fmt.first_failing(lambda c: math.isinf(fmt.repeat_sum(c, dim)))
    if b is None:
        return []
    out, inside = fmt.pair(b, upward=True)
    reached = fmt.repeat_sum(inside, dim)
    statement = (
        f"{noun} of {dim} equal values c: from c = {_g(out)} on the strict running sum "
        f"reaches {_g(fmt.overflow)} and rounds to inf (at c = {_g(inside)} it ends at "
        f"{_g(reached)}, "
        f"exact {_g(dim * inside)}), so the mean is inf and the strict kernel returns "
        f"{outcome}, where the exact result is beta."
    )
    return [_threshold(module, SUM_X, statement, "c (all-c row)", out, inside)]


def _sum_squares(fmt: Narrow, module, terms, row, parameter, outcome, quantity=SUM_SQUARES) -> list:
    """The first c whose ``terms`` rounded squares h(c^2) sum to inf."""
    b = fmt.first_failing(lambda c: math.isinf(fmt.repeat_sum(fmt.h(c * c), terms)))
    if b is None:
        return []
    out, inside = fmt.pair(b, upward=True)
    q = fmt.h(inside * inside)
    reached = fmt.repeat_sum(q, terms)
    statement = (
        f"{row}: from c = {_g(out)} on the strict running sum of the {terms} squares "
        f"h(c^2) = {_g(fmt.h(out * out))} rounds to inf (at c = {_g(inside)}, h(c^2) = {_g(q)}, "
        f"it ends at {_g(reached)}, exact {_g(terms * q)}), and the strict kernel returns "
        f"{outcome}."
    )
    return [_threshold(module, quantity, statement, parameter, out, inside)]


def _square_underflow(
    fmt: Narrow, module, eps, terms, scale, row, parameter, outcome, quantity=SQUARE_UNDERFLOW
) -> list[StrictThreshold]:
    """The largest c whose squares leave the strict scale r = inf (a 1/0). ``scale`` maps
    the strict sum of the ``terms`` squares to r."""
    if terms == 0:
        return []
    b = fmt.last_failing(lambda c: math.isinf(scale(fmt.repeat_sum(fmt.h(c * c), terms))), lo=1)
    if b is None:
        return []
    out, inside = fmt.pair(b, upward=False)
    statement = (
        f"With eps = {eps:g} ({fmt.h(eps):.6g} in {fmt.name}), {row}: up to c = {_g(out)} the "
        f"rounded squares (c^2 <= {_power(fmt.tiny - 1)} is 0; a long row of small squares "
        f"stalls, and its mean "
        f"flushes) leave the strict scale r = inf, and the strict kernel returns {outcome}, "
        f"where the exact result is finite."
    )
    return [_threshold(module, quantity, statement, parameter, out, inside)]


def _eps_zero(
    fmt: Narrow, module, eps, scale, formula, what, quantity=EPS_ZERO
) -> list[StrictThreshold]:
    """The largest eps whose strict zero-variance scale is inf."""
    boundary, fail, safe = fmt.eps_boundary(lambda e: math.isinf(scale(0.0, e)))
    statement = (
        f"eps <= {fmt.in_units(boundary)} is at most {fail:.6g} in {fmt.name}, where the "
        f"strict zero-variance scale r = {formula} is inf (the next value, {safe:.6g}, gives "
        f"r = {_g(scale(0.0, safe))}), so {what}; the configured eps = {eps:g} is "
        f"{_side(eps, boundary)}."
    )
    inside = math.nextafter(boundary, math.inf)
    return [_threshold(module, quantity, statement, "eps", boundary, inside)]


def _eps_subnormal(fmt: Narrow, module, eps, observable, share) -> list[StrictThreshold]:
    """The largest eps stored as a subnormal (in half: relative error up to 2^-25/eps)."""
    boundary, fail, _ = fmt.eps_boundary(lambda e: e < fmt.smallest_normal)
    half_step = _power(fmt.tiny - 1)
    eps_h = fmt.h(eps)
    if eps > 0 and eps_h > 0:
        configured = (
            f"the configured eps = {eps:g} is stored as {eps_h:.5g} ({eps_h / eps - 1:+.2%}), "
            f"which gives r = {_g(fmt.scale_sqrt(0.0, eps_h))} (exact {_g(1 / math.sqrt(eps))})"
        )
    else:
        configured = f"the configured eps = {eps:g} is 0 in {fmt.name}"
    statement = (
        f"eps <= {fmt.in_units(boundary)} (below {_power(fmt.emin)} - {half_step}) is stored "
        f"as a subnormal {fmt.name}, at most {fail:.6g}, a multiple of {_power(fmt.tiny)} off "
        f"by up to {half_step} (relative {half_step}/eps instead of {_power(-fmt.precision)}); "
        f"nothing overflows there, but the strict zero-variance scale r "
        f"({observable}) inherits {share} of that error; {configured}."
    )
    inside = math.nextafter(boundary, math.inf)
    return [_threshold(module, EPS_SUBNORMAL, statement, "eps", boundary, inside)]


def _r_squared(fmt: Narrow, module, eps, observable) -> list[StrictThreshold]:
    """The largest eps whose zero-variance r^2 = h(r r) is inf."""
    boundary, fail, safe = fmt.eps_boundary(
        lambda e: math.isinf(fmt.h(fmt.scale_sqrt(0.0, e) ** 2))
    )
    r_fail, r_safe = fmt.scale_sqrt(0.0, fail), fmt.scale_sqrt(0.0, safe)
    statement = (
        f"eps <= {fmt.in_units(boundary)} is at most {fail:.6g} in {fmt.name}, where the "
        f"zero-variance scale is r = 1/sqrt(eps) = {_g(r_fail)} and h(r^2) = inf (the next value, "
        f"{safe:.6g}, gives r = {_g(r_safe)}, h(r^2) = {_g(fmt.h(r_safe * r_safe))}); r^2 = inf "
        f"meets a zero factor: {observable}; the configured eps = {eps:g} is "
        f"{_side(eps, boundary)}."
    )
    inside = math.nextafter(boundary, math.inf)
    return [_threshold(module, R_SQUARED, statement, "eps", boundary, inside)]


#: The witness families, as ``StrictThreshold.parameter`` names them.
_ALL_C = "c (all-c row)"
_ALTERNATING = "c (row +c, -c, ...)"


def _alternating_text(noun: str, dim: int) -> str:
    last = ", a last 0" if dim % 2 else ""
    return f"{noun} alternating +c, -c (partial sums c, 0, ...: mean exactly 0{last})"


_SQRT = "1/sqrt(eps)"
_PLUS_MINUS_INF = "+-inf (NaN at a zero entry)"


def _layernorm(fmt: Narrow, dim: int, eps: float) -> list[StrictThreshold]:
    terms = 2 * (dim // 2)
    row = _alternating_text("a row", dim)
    eps_h = fmt.h(eps)
    result = _sum_x(fmt, "layernorm", dim, "A row", "NaN in the whole row (-inf * r with r = 0)")
    outcome = "beta in the whole row (r = 0), not about +-gamma + beta"
    result += _sum_squares(fmt, "layernorm", terms, "A" + row[1:], _ALTERNATING, outcome)
    if eps_h == 0:

        def scale(total: float) -> float:
            return fmt.scale_sqrt(fmt.mean(total, dim), eps_h)

        result += _square_underflow(
            fmt, "layernorm", eps, terms, scale, row, _ALTERNATING, _PLUS_MINUS_INF
        )
    what = "the zero row gives NaN (0 * inf), not beta"
    result += _eps_zero(fmt, "layernorm", eps, fmt.scale_sqrt, _SQRT, what)
    jacobian = "the strict Jacobian of a zero row is NaN, not r (I - 11^T/D)"
    result += _r_squared(fmt, "layernorm", eps, jacobian)
    if dim >= 2:
        observable = "dx = r g at a zero row, g = e_0 - e_1"
        result += _eps_subnormal(fmt, "layernorm", eps, observable, "half")
    return result


def _rmsnorm(fmt: Narrow, dim: int, eps: float) -> list[StrictThreshold]:
    row = f"a row of {dim} equal values c"
    eps_h = fmt.h(eps)
    outcome = "beta (r = 0), not about gamma + beta"
    result = _sum_squares(fmt, "rmsnorm", dim, "A" + row[1:], _ALL_C, outcome)
    if eps_h == 0:

        def scale(total: float) -> float:
            return fmt.scale_sqrt(fmt.mean(total, dim), eps_h)

        result += _square_underflow(fmt, "rmsnorm", eps, dim, scale, row, _ALL_C, "inf")
    what = "the zero row gives NaN (0 * inf), not beta"
    result += _eps_zero(fmt, "rmsnorm", eps, fmt.scale_sqrt, _SQRT, what)
    result += _r_squared(fmt, "rmsnorm", eps, "the strict Jacobian of a zero row is NaN, not r I")
    observable = "dx = r g at a zero row, g = e_0 - e_1"
    return result + _eps_subnormal(fmt, "rmsnorm", eps, observable, "half")


def _centernorm(fmt: Narrow, dim: int, eps: float) -> list[StrictThreshold]:
    # The strict loop also sums the squared deviations, but CenterNorm's scale D/(D-1)
    # does not use them: their overflow changes nothing.
    return _sum_x(fmt, "centernorm", dim, "A row", "-inf (h(-inf * gamma) * D/(D-1))")


def _batchnorm(fmt: Narrow, dim: int, eps: float) -> list[StrictThreshold]:
    terms = 2 * (dim // 2)
    row = _alternating_text("a feature", dim)
    either = " (either denom)"
    eps_h = fmt.h(eps)
    result = _sum_x(fmt, "batchnorm", dim, "A feature", "NaN for the whole feature" + either)
    outcome = "beta for the whole feature" + either
    result += _sum_squares(fmt, "batchnorm", terms, "A" + row[1:], _ALTERNATING, outcome)
    if eps_h == 0:

        def scale(total: float) -> float:
            return fmt.scale_sqrt(fmt.mean(total, dim), eps_h)

        result += _square_underflow(
            fmt, "batchnorm", eps, terms, scale, row, _ALTERNATING, _PLUS_MINUS_INF
        )
    if math.isinf(fmt.scale_std(0.0, eps_h)):

        def scale_std(total: float) -> float:
            return fmt.scale_std(fmt.mean(total, dim), eps_h)

        result += _square_underflow(fmt,
            "batchnorm", eps, terms, scale_std, row + ", std_plus_eps", _ALTERNATING,
            _PLUS_MINUS_INF, STD_SQUARE_UNDERFLOW,
        )  # fmt: skip
    what = "a zero feature gives NaN (0 * inf), not beta (sqrt_var_eps)"
    result += _eps_zero(fmt, "batchnorm", eps, fmt.scale_sqrt, _SQRT, what)
    what = "a zero feature gives NaN (0 * inf), not beta (std_plus_eps)"
    result += _eps_zero(fmt, "batchnorm", eps, fmt.scale_std, "1/eps", what, STD_EPS)
    if dim >= 2:
        observable = "dx = r g of a zero feature, g = e_0 - e_1"
        share = "half (sqrt_var_eps; all of it with std_plus_eps, r = 1/eps)"
        result += _eps_subnormal(fmt, "batchnorm", eps, observable, share)
    return result


def _weightnorm(fmt: Narrow, dim: int, eps: float) -> list[StrictThreshold]:
    row = f"a row v of {dim} equal values c"
    eps_h = fmt.h(eps)
    outcome = "W = 0 (r = 0), not gamma/sqrt(D)"
    result = _sum_squares(fmt, "weightnorm", dim, "A" + row[1:], _ALL_C, outcome, NORM2)
    if eps_h == 0:

        def scale(total: float) -> float:
            return fmt.scale_sqrt(total, eps_h)

        result += _square_underflow(
            fmt, "weightnorm", eps, dim, scale, row, _ALL_C, "W = inf", NORM2_UNDERFLOW
        )
    what = "a zero row v_i gives W_i = NaN (inf * 0), not 0"
    result += _eps_zero(fmt, "weightnorm", eps, fmt.scale_sqrt, _SQRT, what)
    dv = "dv of a zero row v (x = 1, g = 1) is NaN (p h(r^2) = 0 * inf), not r"
    result += _r_squared(fmt, "weightnorm", eps, dv)
    observable = "dv_j = r of a zero row v, x = 1, g = 1, while eps is above the r^2 threshold"
    return result + _eps_subnormal(fmt, "weightnorm", eps, observable, "half")


def _softmax(fmt: Narrow, dim: int, eps: float) -> list[StrictThreshold]:
    result = []
    if dim >= 2:
        b = fmt.first_failing(lambda a: fmt.h(math.exp(-a)) == 0.0)
        out, inside = -float(fmt.values[b]), -float(fmt.values[b - 1])
        statement = (
            f"A row (0, t, ..., t) of D = {dim}: for t <= {_g(out)} h(exp(t)) is 0 (exp(t) "
            f"<= {_power(fmt.tiny - 1)}) and the strict kernel returns y_j = 0 for j > 0, which "
            f"is also the correctly rounded value (harmless; at t = {_g(inside)} exp(t) rounds "
            f"to {_power(fmt.tiny)})."
        )
        result.append(
            _threshold("softmax", EXP_UNDERFLOW, statement, "t = x_j - max x", out, inside)
        )
        b = fmt.first_failing(lambda a: fmt.h(1.0 + fmt.h(math.exp(-a))) == 1.0)
        out, inside = -float(fmt.values[b]), -float(fmt.values[b - 1])
        e = fmt.h(math.exp(out))
        exact = 1.0 / (1.0 + (dim - 1) * math.exp(out))
        statement = (
            f"A row (0, t, ..., t) of D = {dim}, the maximum first: for t <= {_g(out)} each "
            f"h(exp(t)) <= {_power(-fmt.precision)} is absorbed by the running sum 1 (half an ULP "
            f"of 1), so the "
            f"strict kernel returns y_0 = 1 and y_j = {_g(e)} where the exact y_0 is "
            f"{exact:.4g} at t = {_g(out)}."
        )
        result.append(
            _threshold("softmax", EXP_ABSORBED, statement, "t = x_j - max x", out, inside)
        )
    exact_terms = 0
    acc = 0.0
    while fmt.h(acc + 1.0) != acc:  # ones sum exactly up to the stall
        acc = fmt.h(acc + 1.0)
        exact_terms += 1
    stall = exact_terms + 1
    consequence = (
        f"for this D = {dim}, y = {_g(fmt.h(1.0 / fmt.repeat_sum(1.0, dim)))} instead of 1/D = "
        f"{1.0 / dim:.6g}"
    )
    statement = (
        f"A constant row of length D: the strict running sum of the D ones is exact up to "
        f"{exact_terms:g} and stalls there ({exact_terms:g} + 1 is a tie rounding to even), so "
        f"from D = {stall} on the strict kernel returns y = {_g(fmt.h(1.0 / exact_terms))} "
        f"instead of 1/D; {consequence}."
    )
    result.append(
        _threshold("softmax", EXP_STALLS, statement, "D (constant row)", float(stall), stall - 1.0)
    )
    if dim >= 2:
        b = fmt.first_failing(lambda c: math.isinf(fmt.h(c + c)))
        out, inside = fmt.pair(b, upward=True)
        statement = (
            f"vjp at x = 0 with g = (c, -c, 0, ...): from c = {_g(out)} on g_m - g_j = 2c "
            f"rounds to inf, so c = sum y_j (g_m - g_j) is inf and the strict dx is inf and "
            f"NaN (-inf + inf), where the exact dx = g/D is finite."
        )
        result.append(
            _threshold("softmax", G_SPREAD, statement, "c (g = (c, -c, 0, ...))", out, inside)
        )
    return result


def _dp_attention(fmt: Narrow, dim: int, eps: float) -> list[StrictThreshold]:
    b = fmt.first_failing(lambda c: math.isinf(fmt.repeat_sum(fmt.h(c * c), dim)))
    if b is None:
        return []
    out, inside = fmt.pair(b, upward=True)
    q = fmt.h(inside * inside)
    statement = (
        f"Two equal tokens with q = k = (c, ..., c) of width d = {dim} (X = [[c], [c]], "
        f"Wq = Wk = ones((d, 1)); or identity weights with D = d): from c = {_g(out)} on "
        f"the strict running sum of the d products h(c^2) = {_g(fmt.h(out * out))} in Q K^T "
        f"rounds to inf (at c = {_g(inside)} it ends at {_g(fmt.repeat_sum(q, dim))}), the row "
        f"maximum is inf, inf - inf is NaN and the strict kernel returns Y = NaN, where the "
        f"exact Y is c."
    )
    return [_threshold("dp_attention", QK, statement, "c (all-c tokens)", out, inside)]
