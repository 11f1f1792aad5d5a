r"""FP16 safe envelopes: how large an upstream gradient may be before a backward pass overflows.

The paper's Principles 1 and 2 (001_76ce3a8a4b6079c3.txt, section 4.2) ask that activations
and gradients stay below the float range R. For one module and configuration,
:func:`envelope` answers with proofs:

* **forward**: the largest output any input can produce, or the input size at which the
  forward can overflow;
* **gains** from the upstream gradient ``g`` to the input gradient ``dx = J^T g``: in the
  2-norm (the Lipschitz constant, ``sup_x sigma_max(J)``) and in the max-norm,
  ``sup_x max_j sum_i |J_ij|`` -- what decides whether some ``dx_j`` overflows;
* **safe upstream gradient**: the largest format value ``g*`` such that no input and no
  ``g`` with ``max|g_i| <= g*`` gives an exact ``dx`` that rounds to infinity;
* **witness**: a format-representable input, parameters and a sign pattern ``s`` such that
  at ``g = g* s`` the exact ``dx_j`` is finite and at ``g = g' s`` (``g'`` the smallest
  format value with ``g' * gain(witness) >= overflow``) it rounds to infinity. ``g'`` is
  the value just past ``g*`` when the witness attains the supremum in the format; the
  envelope prints how many format steps separate them.

The gains are closed forms; their derivations are in the docstrings of the models below
and machine-checked in ``proofs/envelope.py``. Decisions ``g * gain >= overflow`` are exact
(rational or squared comparison) or rigorous (arb), never floating-point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from flint import arb

from derive.envelope.attention import MORE_MODELS
from derive.envelope.core import (
    FORMATS,
    PRECISIONS,
    Config,
    Format,
    Forward,
    Gain,
    Model,
    Point,
    Real,
    as_arb,
    overflowing_gradient,
    precision,
    safe_gradient,
    unbuilt,
)


@dataclass(frozen=True)
class Witness:
    """The witness of tightness: at ``inside * signs`` the exact ``dx[index]`` is finite, at
    ``outside * signs`` it reaches the overflow threshold; ``steps`` counts the format values
    in ``(safe, outside]`` (1 = the envelope is tight to one step)."""

    point: Point
    inside: Fraction
    outside: Fraction
    steps: int
    inside_dx: tuple[str, str]
    outside_dx: tuple[str, str]


@dataclass(frozen=True)
class Envelope:
    """The envelope of one module in one format (see the module docstring)."""

    module: str
    config: Config
    format: Format
    model: Model
    safe: Fraction | None
    witness: Witness | None

    @property
    def forward_overflow_input(self) -> Fraction | None:
        """The smallest format value ``m`` such that some input with ``max|x_j| <= m``
        overflows the forward (exact worst case), or None if no finite input does."""
        f = self.model.forward
        if f.slope is None:
            return None
        need = self.format.overflow - f.offset
        if need <= 0:
            return Fraction(0)
        return overflowing_gradient_for(f.slope, self.format, need)

    def lines(self) -> list[str]:
        """The envelope as text (what ``liptable envelope`` prints)."""
        fmt, m = self.format, self.model
        out = [
            f"{m.title} ({m.parameters}); {fmt.name}: largest finite {_num(fmt.max_finite)}, "
            f"{fmt.overflow_rule}.",
            "forward: " + self._forward_text(),
            f"gain, 2-norm ({_what(m.gain_2, LIPSCHITZ)}): {_gain_text(m.gain_2)}.",
            f"gain, max-norm ({_what(m.gain_max, 'sup over x of max_j sum_i |J_ij|')}, what "
            f"overflows): {_gain_text(m.gain_max)}.",
        ]
        if self.safe == 0:
            out.append("safe upstream gradient: none; for every g > 0 some input overflows dx.")
        elif self.safe is None:
            out.append(
                f"safe upstream gradient: every finite {fmt.name} g (the gain times "
                f"{_num(fmt.max_finite)} {_stays(fmt)} {_num(fmt.overflow)}): the backward "
                "pass never overflows."
            )
        else:
            out.append(
                f"safe upstream gradient: max|g_i| <= {_num(self.safe)} (the largest {fmt.name} "
                f"value with g * gain {_below(fmt)} {_num(fmt.overflow)}): no input overflows dx."
            )
        w = self.witness
        if w is not None:
            if w.steps == 0:
                tight = "no size is safe"
            elif w.steps == 1:
                tight = "the next value: the envelope is tight"
            elif not m.gain_max.tight:
                tight = (
                    f"{w.steps} {fmt.name} steps past the safe size: the gain is an upper "
                    "bound not shown tight, the supremum lies between the witness's gain and it"
                )
            else:
                tight = (
                    f"{w.steps} {fmt.name} steps past the safe size (the format's inputs "
                    "do not reach the real supremum more closely here)"
                )
            out += [
                f"witness: {w.point.description}; g = size * s with s the sign pattern of "
                f"column {list(w.point.index)} of J (gain there {_short(w.point.gain)}).",
                f"  at size {_num(w.inside)}: exact dx{list(w.point.index)} in "
                f"[{_dec(w.inside_dx[0])}, {_dec(w.inside_dx[1])}], finite.",
                f"  at size {_num(w.outside)} ({tight}): exact dx{list(w.point.index)} in "
                f"[{_dec(w.outside_dx[0])}, {_dec(w.outside_dx[1])}] {_past(fmt)} "
                f"{_num(fmt.overflow)}: {_overflows_to(fmt)}.",
            ]
            if w.point.unbuilt:
                out.append(f"  {w.point.unbuilt}: the sizes above come from its exact column gain.")
        out += list(m.notes)
        return out

    def _forward_text(self) -> str:
        f, fmt = self.model.forward, self.format
        if f.sup is not None:
            verdict = (
                "it never overflows"
                if not fmt.overflows(f.sup, Fraction(1))
                else f"it can reach {_num(fmt.overflow)} and overflow"
            )
            return f"|y_i| <= {f.sup.formula} = {_short(f.sup)} ({f.reached}): {verdict}."
        m = self.forward_overflow_input
        if m is None:
            return (
                f"{f.growth}; the largest finite input {_num(fmt.max_finite)} gives at most "
                f"{_short_value(f.slope, fmt.max_finite, f.offset)}: it never overflows."
            )
        return (
            f"{f.growth}: some input with max|x_j| = {_num(m)} (smallest such {fmt.name} "
            f"value) overflows, none smaller does."
        )

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (numbers as decimal strings, 35 digits, and floats)."""
        m, w = self.model, self.witness

        def real(r: Real | None) -> dict[str, Any] | None:
            if r is None:
                return None
            lo, hi = r.enclosure()
            return {"formula": r.formula, "value": r.decimal(), "enclosure": [lo, hi]}

        forward_input = self.forward_overflow_input
        return {
            "module": self.module,
            "config": {k: v for k, v in vars(self.config).items()},
            "format": self.format.name,
            "max_finite": float(self.format.max_finite),
            "overflow_threshold": float(self.format.overflow),
            "forward_sup": real(m.forward.sup),
            "forward_overflow_input": None if forward_input is None else float(forward_input),
            "gain_2": (real(m.gain_2.value) or {"value": "oo"}) | {"reached": m.gain_2.reached},
            "gain_max": (real(m.gain_max.value) or {"value": "oo"})
            | {"reached": m.gain_max.reached},
            "safe_upstream_gradient": None if self.safe is None else float(self.safe),
            "witness": None
            if w is None
            else {
                "description": w.point.description,
                "index": list(w.point.index),
                "inside": float(w.inside),
                "outside": float(w.outside),
                "steps": w.steps,
                "inside_dx": list(w.inside_dx),
                "outside_dx": list(w.outside_dx),
                "arrays": None
                if w.point.arrays is None
                else {k: v.tolist() for k, v in w.point.arrays.items()},
                "signs": None if w.point.signs is None else w.point.signs.tolist(),
            }
            | ({"not_built": w.point.unbuilt} if w.point.unbuilt else {}),
        }


def overflowing_gradient_for(slope: Real, fmt: Format, need: Fraction) -> Fraction | None:
    """The smallest format value ``m`` with ``m * slope >= need`` (``>`` for a strict
    overflow), or None."""
    if not fmt.beyond(slope, fmt.max_finite, need):
        return None
    scaled = Real(
        slope.formula,
        lambda: slope.ball() * as_arb(fmt.overflow) / as_arb(need),
        exact=None if slope.exact is None else slope.exact * fmt.overflow / need,
        square=None if slope.square is None else slope.square * (fmt.overflow / need) ** 2,
    )
    return overflowing_gradient(scaled, fmt)


#: What the 2-norm gain is, when it is tight.
LIPSCHITZ = "the Lipschitz constant, sup over x of sigma_max(J)"


def _what(gain: Gain, supremum: str) -> str:
    """What a gain line gives: the supremum itself, or a proven upper bound on it."""
    return supremum if gain.tight or gain.value is None else f"an upper bound on {supremum}"


def _gain_text(gain: Gain) -> str:
    if gain.value is None:
        return f"unbounded; {gain.reached}"
    return f"{gain.value.formula} = {_short(gain.value)}; {gain.reached}"


def _stays(fmt: Format) -> str:
    return "stays at most" if fmt.strict_overflow else "stays below"


def _below(fmt: Format) -> str:
    return "<=" if fmt.strict_overflow else "<"


def _past(fmt: Format) -> str:
    return ">" if fmt.strict_overflow else ">="


def _overflows_to(fmt: Format) -> str:
    return "becomes NaN" if fmt.strict_overflow else "rounds to inf"


def _num(value: Fraction) -> str:
    return f"{float(value):.8g}"


def _dec(text: str) -> str:
    return f"{float(text):.10g}"


def _short(r: Real) -> str:
    return f"{float(r):.10g}"


def _short_value(slope: Real, m: Fraction, offset: Fraction) -> str:
    return f"{float(slope) * float(m) + float(offset):.8g}"


# --------------------------------------------------------------------------------------------
# Witness evaluation
# --------------------------------------------------------------------------------------------


def _times(gain: Real, g: Fraction) -> tuple[str, str]:
    with precision(256):
        ball = gain.ball() * as_arb(g)
        return ball.lower().str(20, radius=False), ball.upper().str(20, radius=False)


def _witness(model: Model, fmt: Format, safe: Fraction | None) -> Witness | None:
    """The witness at the model's point; ``safe`` 0 (unbounded gain) gives a witness whose
    inside size is 0."""
    if safe is None:
        return None
    point = model.point(fmt)
    if point is None:
        return None
    outside = overflowing_gradient(point.gain, fmt)
    if outside is None:
        return None
    return Witness(
        point=point,
        inside=safe,
        outside=outside,
        steps=fmt.steps(safe, outside) if safe > 0 else 0,
        inside_dx=_times(point.gain, safe),
        outside_dx=_times(point.gain, outside),
    )


def envelope(
    module: str, dtype: str = "float16", *, witness: bool = True, **config: Any
) -> Envelope:
    """The FP16 (bfloat16, float32) envelope of ``module`` for the configuration ``config``
    (the fields of :class:`Config`); ``witness=False`` skips building the witness.

    >>> e = envelope("layernorm", dim=4, eps=1.0)
    >>> float(e.model.gain_max.value), float(e.safe), e.witness.steps
    (1.5, 43648.0, 1)
    """
    try:
        fmt = FORMATS[dtype]
    except KeyError:
        raise ValueError(f"dtype: expected one of {', '.join(FORMATS)}, got {dtype!r}") from None
    known = models()
    try:
        build = known[module]
    except KeyError:
        raise ValueError(f"module: expected one of {', '.join(known)}, got {module!r}") from None
    cfg = Config(**config)
    model = build(cfg)
    gain = model.gain_max.value
    safe = Fraction(0) if gain is None else safe_gradient(gain, fmt)
    return Envelope(module, cfg, fmt, model, safe, _witness(model, fmt, safe) if witness else None)


# --------------------------------------------------------------------------------------------
# Helpers for the models
# --------------------------------------------------------------------------------------------


def _frac(value: float) -> Fraction:
    return Fraction(float(value))


def _fmt_value(fmt: Format, value: float) -> Fraction:
    """``value`` rounded down to the format (a parameter of the witness network)."""
    v = _frac(value)
    return fmt.round_down(v) if v > 0 else Fraction(0)


def _ftext(value: Fraction | float) -> str:
    v = Fraction(value)
    if v.denominator == 1:
        return str(v.numerator)
    return f"{float(v):.6g}"


def _column_real(terms: list[Fraction], scale_square: Fraction | None, formula: str) -> Real:
    """``sum(terms) * sqrt(scale_square)`` (or ``sum(terms)``), exactly comparable."""
    total = sum(terms, Fraction(0))
    if scale_square is None:
        return Real.rational(total, formula)
    return Real.sqrt_of(total * total * scale_square, formula)


def layernorm_k(size: int) -> tuple[Real, int, Real]:
    r"""``K(D) = sup_x sqrt(eps) max_j sum_i |(I - 11^T/D - z z^T/D)_ij| r`` for LayerNorm's
    Jacobian without gamma (``r = 1/sqrt(var + eps)``, ``z = (x - mean) r``), with the
    maximizing ``k`` and ``lambda = sqrt(eps) r``.

    Derivation (checked in ``proofs/envelope.py``). Write ``x - mean = sqrt(D) sigma n``
    (``n`` a unit vector orthogonal to 1), ``lambda = sqrt(eps/(sigma^2 + eps))`` in (0, 1]
    and ``tau = 1 - lambda^2``: then ``z z^T / D = tau n n^T`` and column j of the bracket is
    ``e_j - 1/D - tau n_j n``. Its absolute sum is ``max_s s . (column)`` over sign vectors;
    for a fixed s with ``k`` plus signs among the N = D - 1 entries off j, the maximum over
    n (a sphere inside the hyperplane ``1 . n = 0``) is a Cauchy-Schwarz equality, and over
    the angle of ``n_j`` a trigonometric maximum, giving
    ``c_k(tau) = ((2 - tau) k + tau sqrt(N k (D - k))) / D``.
    Hence ``K = max_k max_lambda lambda (A (1 + lambda^2) + B (1 - lambda^2)) / D`` with
    ``A = k``, ``B = sqrt(N k (D - k))``: the inner maximum is ``2A`` at ``lambda = 1`` when
    ``A + B >= 3 (B - A)``, else ``(2/3)(A + B) sqrt((A + B)/(3 (B - A)))`` at
    ``lambda^2 = (A + B)/(3 (B - A))``. For D <= 57 the maximum is the constant row
    (``K = 2(D - 1)/D``); from D = 58 on a non-constant row gives more, ``K ~ sqrt(D)/sqrt(27)``.

    The maximizing k without a scan (checked in ``proofs/envelope.py``,
    :func:`proofs.envelope.layernorm_peak_proof`). Inside the regime ``B > 2A`` (``k < k_b =
    N D/(N + 4)``) the inner maximum is ``h(k) = (2/3)(A + B)^(3/2)/sqrt(3 (B - A))``, and
    ``2 B (A + B)(B - A) d(log h)/dk = D chi(k)`` with ``chi = 2 N k + (N - 2k) B``: h increases
    while ``k <= N/2``, and for ``k > N/2`` the sign of chi is that of the integer cubic
    ``p(k) = 4 N k - (2k - N)^2 (D - k)`` (``(2Nk)^2 - ((2k - N) B)^2 = N k p(k)``). p is
    positive at N/2 and at N, and tends to -oo at -oo; so once ``p(j) < 0`` at one integer
    ``N/2 < j < N``, p has exactly two roots ``r1 < j < r2`` in (N/2, N): h increases up to
    r1, decreases from r1 to r2 and increases again up to k_b, where it reaches
    ``2 k_b < 2N`` (the constant row's value; outside the regime the value is ``2k <= 2N``).
    The integer maximum of h is therefore at ``floor(r1)`` or the next integer, found by
    bisection on the exact integer signs of p between N/2 and j (j near the local minimum of
    p), and compared with the constant row in arb. Below :data:`LAYERNORM_DIP_FROM` no such
    j is found and every k is compared in arb instead (the same comparisons).

    >>> [layernorm_k(d)[1] for d in (57, 58, 768, 10**9)]
    [56, 40, 413, 500031624]
    """
    if size == 1:
        return Real.rational(Fraction(0), "0"), 0, Real.rational(Fraction(1))
    return _layernorm_best(size, layernorm_candidates(size))


#: The smallest D at which the cubic p of :func:`layernorm_k` is negative at an integer
#: (found by :func:`layernorm_dip`); below it every k is a candidate.
LAYERNORM_DIP_FROM = 40


def layernorm_candidates(size: int) -> Sequence[int]:
    """The k (besides the constant row's k = N) among which :func:`layernorm_k` chooses:
    every k below :data:`LAYERNORM_DIP_FROM`, else ``floor(r1)`` and the next integer."""
    n = size - 1
    dip = layernorm_dip(size)
    if dip is None:
        if size >= LAYERNORM_DIP_FROM:
            raise ArithmeticError(f"layernorm_k: no integer with p(k) < 0 found at D = {size}")
        return range(1, n)
    low, high = n // 2, dip  # low <= N/2 or p(low) >= 0; N/2 < high, p(high) < 0
    while high - low > 1:
        middle = (low + high) // 2
        if layernorm_p(size, middle) >= 0:
            low = middle
        else:
            high = middle
    return (low, high)


def _layernorm_best(size: int, candidates: Sequence[int]) -> tuple[Real, int, Real]:
    """:func:`k_value` of the best of the constant row and ``candidates``: the constant row
    first, then increasing k, a later k replacing the choice only when it is larger, decided
    in arb (a tie keeps the earlier choice)."""
    best = k_value(size, size - 1)
    for k in candidates:
        value = k_value(size, k)
        if _greater(value[0], best[0]):
            best = value
    return best


def layernorm_p(size: int, k: int) -> int:
    """``p(k) = 4 N k - (2k - N)^2 (D - k)``, exactly: for ``k > N/2`` it has the sign of the
    derivative of LayerNorm's ``h(k)`` (:func:`layernorm_k`)."""
    n = size - 1
    return 4 * n * k - (2 * k - n) ** 2 * (size - k)


def layernorm_dip(size: int) -> int | None:
    """An integer ``N/2 < j < N`` with ``p(j) < 0``, inside the regime ``N (D - j) > 4 j``,
    or None. Tried: the integers next to the local minimum of p, the larger root of
    ``p'(k) = 0``: ``u = 2k - N`` solves ``3u^2 - (2N + 4) u + 4N = 0`` (floats only choose
    where to look; the sign is exact)."""
    n = size - 1
    disc = (2 * n + 4) ** 2 - 48 * n
    if disc < 0:
        return None
    centre = (n + ((2 * n + 4) + math.sqrt(disc)) / 6) / 2
    for j in (math.floor(centre), math.ceil(centre)):
        if n < 2 * j and j < n and n * (size - j) > 4 * j and layernorm_p(size, j) < 0:
            return j
    return None


def _greater(a: Real, b: Real) -> bool:
    """Whether ``a > b`` is decided in arb at one of :data:`PRECISIONS` (False when it is not:
    equal, or closer than the finest precision resolves)."""
    for prec in PRECISIONS:
        with precision(prec):
            difference = a.ball() - b.ball()
            if difference > 0:
                return True
            if difference < 0:
                return False
    return False


def k_value(size: int, k: int) -> tuple[Real, int, Real]:
    n = size - 1
    a, bsq = k, n * k * (size - k)
    if k == n or (a + math.sqrt(bsq) >= 3 * (math.sqrt(bsq) - a)):
        value = Fraction(2 * a, size)
        return Real.rational(value, f"2(D-1)/D = {_ftext(value)}"), k, Real.rational(Fraction(1))

    def ball() -> arb:
        b = arb(bsq).sqrt()
        return 2 * (a + b) / 3 * ((a + b) / (3 * (b - a))).sqrt() / size

    def lam() -> arb:
        b = arb(bsq).sqrt()
        return ((a + b) / (3 * (b - a))).sqrt()

    formula = f"(2/3)(A+B)sqrt((A+B)/(3(B-A)))/D with A = {k}, B = sqrt({n}*{k}*{size - k})"
    return Real(formula, ball), k, Real("lambda", lam)


def _layernorm_point(
    fmt: Format, size: int, eps: Fraction, gamma: Fraction, name: str, batch: bool
) -> Point:
    """The LayerNorm (BatchNorm: one feature of ``size`` samples) witness of :func:`layernorm_k`,
    rounded to the format, with its exact column gain."""
    _, k, lam = layernorm_k(size)
    n = size - 1
    lam_f = float(lam)
    if lam_f >= 1.0 or eps == 0:
        start = [0.0, 0.0, 0.0]
        description = f"a constant {'feature' if batch else 'row'} (x = 0)"
    else:
        # cos(2 theta) = k / B, sin(2 theta) = sqrt(D k (N - k)) / B, B = sqrt(N k (D - k)).
        theta = 0.5 * math.atan2(math.sqrt(size * k * (n - k)), k)
        s_big, c_big = math.sin(theta), math.cos(theta)
        aj = s_big * math.sqrt(n / size)
        norm_perp = math.sqrt(4 * k * (n - k) / n) if 0 < k < n else 1.0
        r_plus = -aj / n + c_big * (2 * (n - k) / n) / norm_perp
        r_minus = -aj / n - c_big * (2 * k / n) / norm_perp
        sigma = math.sqrt(float(eps) * (1 / lam_f**2 - 1))
        # The row: x_0, then k entries of one value and N - k of another (0 < k < N here).
        scale = math.sqrt(size) * sigma
        start = [scale * aj, scale * r_plus, scale * r_minus]
    counts = (1, k, n - k) if lam_f < 1.0 and eps != 0 else (1, 0, n)
    values = _best_neighbour(fmt, start, counts, eps, _ln_gain)
    if lam_f < 1.0 and eps != 0:
        description = (
            f"x_0 = {float(values[0])!r} and {k} entries {float(values[1])!r}, {n - k} entries "
            f"{float(values[2])!r} ({fmt.name} values next to the maximizing row "
            f"{start[0]:.6g}, {start[1]:.6g}, {start[2]:.6g})"
        )
    # The row has the distinct values ``values`` with multiplicities ``counts`` (entry 0
    # first); every sum below runs over the distinct values, weighted exactly.
    mean = sum((c * v for c, v in zip(counts, values, strict=True)), Fraction(0)) / size
    d = [v - mean for v in values]
    var = sum((c * v * v for c, v in zip(counts, d, strict=True)), Fraction(0)) / size
    denom = var + eps
    # J_i0 = gamma_i r (delta_i0 - 1/D - d_i d_0 r^2 / D), r^2 = 1/(var + eps): rational
    # brackets times r.
    brackets = [
        (1 if i == 0 else 0) - Fraction(1, size) - d[i] * d[0] / (size * denom) for i in range(3)
    ]
    terms = [c * abs(gamma * q) for c, q in zip(counts, brackets, strict=True)]
    gain = _column_real(terms, 1 / denom, "sum_i |J_i0| at the witness")
    options = {"eps": float(eps)}
    text = description + f", gamma = {float(gamma):g}"
    # x and the sign pattern have D entries each, and gamma and beta D (LayerNorm) or 1.
    entries = 2 * size + 2 if batch else 4 * size
    too_large = unbuilt(entries, f"{'M' if batch else 'D'} = {size}")
    if too_large:
        return Point(None, None, (0, 0), gain, text, options, too_large)
    signs = np.repeat([np.sign(float(q)) for q in brackets], counts)
    x_arr = np.repeat([float(v) for v in values], counts)
    if batch:
        arrays = {
            "x": x_arr.reshape(size, 1),
            "gamma": np.full(1, float(gamma)),
            "beta": np.zeros(1),
        }
        return Point(arrays, signs.reshape(size, 1), (0, 0), gain, text, options)
    params = np.full(size, float(gamma))
    arrays = {"x": x_arr.reshape(1, size), "gamma": params, "beta": np.zeros(size)}
    return Point(arrays, signs.reshape(1, size), (0, 0), gain, text, options)


#: A witness entry is moved by up to this many format steps either way to find the format
#: input with the largest gain near the real maximizer.
NEIGHBOURHOOD = 6


def _ln_gain(v: np.ndarray, counts: tuple[int, ...], eps: float) -> np.ndarray:
    """LayerNorm's column-0 gain (gamma = 1) at rows with the values ``v[..., i]`` repeated
    ``counts[i]`` times (entry 0 first), in float64: only to rank candidates."""
    c = np.array(counts, dtype=np.float64)
    size = c.sum()
    mean = (v * c).sum(axis=-1, keepdims=True) / size
    d = v - mean
    den = (d * d * c).sum(axis=-1) / size + eps
    b = -1 / size - d * d[..., :1] / (size * den[..., None])
    b[..., 0] += 1
    return (np.abs(b) * c).sum(axis=-1) / np.sqrt(den)


def _rms_gain(v: np.ndarray, counts: tuple[int, ...], eps: float) -> np.ndarray:
    """RMSNorm's column-0 gain (gamma = 1), like :func:`_ln_gain`."""
    c = np.array(counts, dtype=np.float64)
    size = c.sum()
    den = (v * v * c).sum(axis=-1) / size + eps
    b = -v * v[..., :1] / (size * den[..., None])
    b[..., 0] += 1
    return (np.abs(b) * c).sum(axis=-1) / np.sqrt(den)


def _best_neighbour(
    fmt: Format, values: list[float], counts: tuple[int, ...], eps: Fraction, gain
) -> list[Fraction]:
    """The format values within :data:`NEIGHBOURHOOD` steps of each of ``values`` (rounded)
    that maximize ``gain`` (a float64 ranking; the chosen point's gain is then computed
    exactly)."""
    grids = []
    for value in values:
        center = fmt.round(value)
        grid = [center]
        up = down = center
        for _ in range(NEIGHBOURHOOD):
            up, down = fmt.neighbour(up, True), fmt.neighbour(down, False)
            grid += [up, down]
        grids.append(sorted(set(grid)))
    mesh = np.meshgrid(*[np.array([float(g) for g in grid]) for grid in grids], indexing="ij")
    stacked = np.stack([m.ravel() for m in mesh], axis=-1)
    with np.errstate(all="ignore"):
        scores = gain(stacked, counts, float(eps))
    best = int(np.nanargmax(scores))
    return [Fraction(float(v)) for v in stacked[best]]


def _eps(cfg: Config, default: float) -> Fraction:
    return _frac(default if cfg.eps is None else cfg.eps)


def _norm_parameters(cfg: Config, eps: Fraction, what: str = "D") -> str:
    return (
        f"{what} = {cfg.dim}, eps = {float(eps):g} (PyTorch convention), |gamma_i| <= "
        f"{cfg.gamma_max:g}, |beta_i| <= {cfg.beta_max:g}"
    )


def _layernorm_like(cfg: Config, title: str, what: str, batch: bool) -> Model:
    size, eps = cfg.dim, _eps(cfg, 1e-5)
    if eps == 0:
        raise ValueError("eps: must be > 0 (with eps = 0 the gain is unbounded near constant rows)")
    gmax, bmax = _frac(cfg.gamma_max), _frac(cfg.beta_max)
    k_real, k, lam = layernorm_k(size)
    gain_2 = Real.sqrt_of(
        (gmax * gmax / eps) if size > 1 else Fraction(0),
        "max|gamma|/sqrt(eps)" if size > 1 else "0 (D = 1)",
    )
    gain_max = Real(
        f"max|gamma| K({size})/sqrt(eps), K({size}) = {float(k_real):.10g}",
        lambda: k_real.ball() * (as_arb(gmax * gmax / eps)).sqrt(),
        exact=None,
        square=None if k_real.exact is None else (k_real.exact**2) * gmax * gmax / eps,
    )
    reached = (
        "attained at every constant " + ("feature" if batch else "row")
        if lam.exact == 1
        else f"attained at a non-constant {'feature' if batch else 'row'}: k = {k} of the "
        f"{size - 1} other entries share one sign, lambda = sqrt(eps/(var+eps)) = {float(lam):.6g}"
    )
    fwd_sup = Real(
        "max|gamma| sqrt(D-1) + max|beta|",
        lambda: as_arb(gmax) * arb(size - 1).sqrt() + as_arb(bmax),
        square=None if bmax else gmax * gmax * (size - 1),
        exact=Fraction(0) + bmax if size == 1 else None,
    )

    def point(fmt: Format) -> Point | None:
        gamma = _fmt_value(fmt, cfg.gamma_max)
        if gamma == 0 or size == 1:
            return None
        return _layernorm_point(fmt, size, eps, gamma, what, batch)

    return Model(
        title=title,
        parameters=_norm_parameters(cfg, eps, "D" if not batch else "M (values per feature)"),
        forward=Forward(sup=fwd_sup, reached="approached by one large entry, never reached"),
        gain_2=Gain(gain_2, "attained at constant rows when gamma = max|gamma| 1"),
        gain_max=Gain(gain_max, reached),
        point=point,
        kernel="batchnorm" if batch else "layernorm",
        notes=(
            f"the max-norm gain is {float(k_real):.6g} times the 2-norm gain for this D"
            + ("." if lam.exact == 1 else ": a constant row is not the worst case."),
        ),
    )


def _layernorm(cfg: Config) -> Model:
    return _layernorm_like(cfg, "LayerNorm", "D", batch=False)


def _batchnorm(cfg: Config) -> Model:
    return _layernorm_like(cfg, "BatchNorm (training mode, one feature)", "M", batch=True)


def rmsnorm_k(size: int) -> tuple[Real, Real]:
    r"""``K(D) = sup_x sqrt(eps) max_j sum_i |r (I - x x^T r^2/D)_ij|`` for RMSNorm
    (``r = 1/sqrt(mean x^2 + eps)``), with the maximizing ``lambda = sqrt(eps) r``.

    With ``x = sqrt(D) rho n``, ``lambda = sqrt(eps/(rho^2 + eps))``, ``tau = 1 - lambda^2``,
    column j is ``e_j - tau n_j n``; its absolute sum is at most
    ``1 - tau a^2 + tau a sqrt(N (1 - a^2))`` (``a = |n_j|``, Cauchy-Schwarz on the others,
    equality when they are equal), and over the angle of ``a``
    ``1 + tau (sqrt(D) - 1)/2``. With ``c = (sqrt(D) - 1)/2``,
    ``K = max_lambda lambda (1 + c (1 - lambda^2))``: 1 at lambda = 1 for D <= 4, else
    ``(2/3)(1 + c) sqrt((1 + c)/(3c))``.
    """
    if size <= 4:
        return Real.rational(Fraction(1), "1"), Real.rational(Fraction(1))

    def c() -> arb:
        return (arb(size).sqrt() - 1) / 2

    def ball() -> arb:
        cc = c()
        return 2 * (1 + cc) / 3 * ((1 + cc) / (3 * cc)).sqrt()

    def lam() -> arb:
        cc = c()
        return ((1 + cc) / (3 * cc)).sqrt()

    return Real("(2/3)(1+c)sqrt((1+c)/(3c)), c = (sqrt(D)-1)/2", ball), Real("lambda", lam)


def _rmsnorm_point(fmt: Format, size: int, eps: Fraction, gamma: Fraction) -> Point:
    _, lam = rmsnorm_k(size)
    lam_f = float(lam)
    if lam_f >= 1.0:
        description = "x = 0"
    else:
        n = size - 1
        theta = 0.5 * math.atan2(math.sqrt(n), 1.0)
        rho = math.sqrt(float(eps) * (1 / lam_f**2 - 1))
        # x_0, then N equal entries.
        scale = math.sqrt(size) * rho
        start = [scale * math.sin(theta), scale * (math.cos(theta) / math.sqrt(n))]
    counts = (1, size - 1)
    values = (
        _best_neighbour(fmt, start, counts, eps, _rms_gain) if lam_f < 1.0 else [Fraction(0)] * 2
    )
    if lam_f < 1.0:
        description = (
            f"x_0 = {float(values[0])!r}, the other {size - 1} entries {float(values[1])!r} "
            f"({fmt.name} values next to the maximizing row {start[0]:.6g}, {start[1]:.6g})"
        )
    denom = sum((c * v * v for c, v in zip(counts, values, strict=True)), Fraction(0)) / size + eps
    brackets = [(1 if i == 0 else 0) - values[i] * values[0] / (size * denom) for i in range(2)]
    terms = [c * abs(gamma * q) for c, q in zip(counts, brackets, strict=True)]
    gain = _column_real(terms, 1 / denom, "sum_i |J_i0|")
    text = description + f", gamma = {float(gamma):g}"
    options = {"eps": float(eps)}
    too_large = unbuilt(4 * size, f"D = {size}")  # x, gamma, beta and the signs
    if too_large:
        return Point(None, None, (0, 0), gain, text, options, too_large)
    signs = np.repeat([np.sign(float(q)) for q in brackets], counts)
    arrays = {
        "x": np.repeat([float(v) for v in values], counts).reshape(1, size),
        "gamma": np.full(size, float(gamma)),
        "beta": np.zeros(size),
    }
    return Point(arrays, signs.reshape(1, size), (0, 0), gain, text, options)


def _rmsnorm(cfg: Config) -> Model:
    size, eps = cfg.dim, _eps(cfg, 1e-6)
    if eps == 0:
        raise ValueError("eps: must be > 0 (with eps = 0 the gain is unbounded near x = 0)")
    gmax, bmax = _frac(cfg.gamma_max), _frac(cfg.beta_max)
    k_real, lam = rmsnorm_k(size)
    inv2 = gmax * gmax / eps
    gain_max = Real(
        f"max|gamma| K({size})/sqrt(eps), K({size}) = {float(k_real):.10g}",
        lambda: k_real.ball() * as_arb(inv2).sqrt(),
        square=None if k_real.exact is None else k_real.exact**2 * inv2,
    )

    def point(fmt: Format) -> Point | None:
        gamma = _fmt_value(fmt, cfg.gamma_max)
        return None if gamma == 0 else _rmsnorm_point(fmt, size, eps, gamma)

    return Model(
        title="RMSNorm",
        parameters=_norm_parameters(cfg, eps),
        forward=Forward(
            sup=Real(
                "max|gamma| sqrt(D) + max|beta|",
                lambda: as_arb(gmax) * arb(size).sqrt() + as_arb(bmax),
                square=None if bmax else gmax * gmax * size,
            ),
            reached="approached by one large entry, never reached",
        ),
        gain_2=Gain(Real.sqrt_of(inv2, "max|gamma|/sqrt(eps)"), "attained at x = 0"),
        gain_max=Gain(
            gain_max,
            "attained at x = 0"
            if lam.exact == 1
            else f"attained at a non-zero x with lambda = sqrt(eps/(mean x^2 + eps)) = "
            f"{float(lam):.6g}, one entry sin(theta), the others cos(theta)/sqrt(D-1), "
            "tan(2 theta) = sqrt(D-1)",
        ),
        point=point,
        kernel="rmsnorm",
    )


def _centernorm(cfg: Config) -> Model:
    size = cfg.dim
    if size < 2:
        raise ValueError(f"dim: CenterNorm needs D >= 2, got {size}")
    gmax, bmax = _frac(cfg.gamma_max), _frac(cfg.beta_max)
    c = Fraction(size, size - 1)
    # J = c diag(gamma) (I - 11^T/D): column sums c max|gamma| (1 - 1/D + (D-1)/D) = 2 max|gamma|.
    gain_max = Real.rational(2 * gmax, "D/(D-1) max|gamma| 2(D-1)/D = 2 max|gamma|")
    gain_2 = Real.rational(c * gmax, "D/(D-1) max|gamma|")

    def point(fmt: Format) -> Point | None:
        gamma = _fmt_value(fmt, cfg.gamma_max)
        if gamma == 0:
            return None
        # Column 0: c gamma (1 - 1/D) on the diagonal, c gamma / D in the D - 1 other rows.
        terms = [abs(c * gamma * (1 - Fraction(1, size))), (size - 1) * abs(c * gamma / size)]
        gain = _column_real(terms, None, "sum_i |J_i0|")
        text = f"x = 0, gamma = {float(gamma):g}"
        too_large = unbuilt(4 * size, f"D = {size}")  # x, gamma, beta and the signs
        if too_large:
            return Point(None, None, (0, 0), gain, text, {}, too_large)
        signs = np.array([1.0] + [-1.0] * (size - 1)).reshape(1, size)
        arrays = {
            "x": np.zeros((1, size)),
            "gamma": np.full(size, float(gamma)),
            "beta": np.zeros(size),
        }
        return Point(arrays, signs, (0, 0), gain, text)

    return Model(
        title="CenterNorm",
        parameters=f"D = {size}, |gamma_i| <= {cfg.gamma_max:g}, |beta_i| <= {cfg.beta_max:g}",
        forward=Forward(
            slope=Real.rational(2 * gmax, "2 max|gamma|"),
            offset=bmax,
            growth="linear: |y_i| <= 2 max|gamma| max|x_j| + max|beta| (x_i = m, the others -m)",
        ),
        gain_2=Gain(gain_2, "attained (the Jacobian is constant; gamma = max|gamma| 1)"),
        gain_max=Gain(gain_max, "attained at every x (gamma = max|gamma| 1)"),
        point=point,
        kernel="centernorm",
    )


def _weightnorm(cfg: Config) -> Model:
    size, outputs = cfg.dim, cfg.outputs
    eps = _eps(cfg, 0.0)
    gmax = _frac(cfg.gamma_max)
    reach = (
        "attained (eps = 0)" if eps == 0 else "approached as |v_i| grows, never reached (eps > 0)"
    )

    def point(fmt: Format) -> Point | None:
        gamma = _fmt_value(fmt, cfg.gamma_max)
        if gamma == 0:
            return None
        # v_i = t e_0 for every row: W_i0 = gamma t / sqrt(t^2 + eps). t = the largest format
        # value whose square stays finite in float64 arithmetic of the kernel.
        t = fmt.round_down(Fraction(2**15)) if eps else Fraction(1)
        square = (t * t / (t * t + eps)) * gamma * gamma
        gain = Real.sqrt_of(square * outputs * outputs, "sum_i |W_i0|")
        text = f"every row v_i = {float(t):g} e_0, gamma = {float(gamma):g}"
        options = {"eps": float(eps)}
        # v (O x D), x (D), gamma and the signs (O each).
        total = outputs * size + size + 2 * outputs
        too_large = unbuilt(total, f"O D = {outputs} x {size}")
        if too_large:
            return Point(None, None, (0, 0), gain, text, options, too_large)
        v = np.zeros((outputs, size))
        v[:, 0] = float(t)
        arrays = {"x": np.zeros((1, size)), "v": v, "gamma": np.full(outputs, float(gamma))}
        signs = np.ones((1, outputs))
        return Point(arrays, signs, (0, 0), gain, text, options)

    return Model(
        title="WeightNorm",
        parameters=f"D = {size}, O = {outputs}, eps = {float(eps):g}, "
        f"|gamma_i| <= {cfg.gamma_max:g}",
        forward=Forward(
            slope=Real.sqrt_of(gmax * gmax * size, "max|gamma| sqrt(D)"),
            growth="linear: |y_i| <= max|gamma| |x|_2 <= max|gamma| sqrt(D) max|x_j| "
            "(x = m 1, v_i = 1)",
        ),
        gain_2=Gain(
            Real.sqrt_of(gmax * gmax * outputs, "max|gamma| sqrt(O)"),
            reach + ", all rows v_i parallel",
        ),
        gain_max=Gain(
            Real.rational(gmax * outputs, "O max|gamma|"), reach + ", all rows v_i along one e_j"
        ),
        point=point,
        kernel="weightnorm",
    )


# --------------------------------------------------------------------------------------------
# Linear maps: Linear, residual and weighted residual with a Linear branch
# --------------------------------------------------------------------------------------------


def _linear(cfg: Config) -> Model:
    size, outputs = cfg.dim, cfg.outputs
    w, b = _frac(cfg.weight_max), _frac(cfg.bias_max)

    def point(fmt: Format) -> Point | None:
        wf = _fmt_value(fmt, cfg.weight_max)
        if wf == 0:
            return None
        gain = Real.rational(outputs * wf, "O w")
        text = f"W = {float(wf):g} everywhere, x = 0"
        # W (O x D), x (D) and the signs (O).
        too_large = unbuilt(outputs * size + size + outputs, f"O D = {outputs} x {size}")
        if too_large:
            return Point(None, None, (0, 0), gain, text, {}, too_large)
        arrays = {"x": np.zeros((1, size)), "W": np.full((outputs, size), float(wf))}
        return Point(arrays, np.ones((1, outputs)), (0, 0), gain, text)

    return Model(
        title="Linear",
        parameters=f"D = {size}, O = {outputs}, |W_ij| <= {cfg.weight_max:g}, "
        f"|b_i| <= {cfg.bias_max:g}",
        forward=Forward(
            slope=Real.rational(size * w, "D w"),
            offset=b,
            growth="linear: |y_i| <= D w max|x_j| + max|b_i| (W = w, x = m 1)",
        ),
        gain_2=Gain(Real.sqrt_of(w * w * size * outputs, "w sqrt(O D)"), "attained at W = w 11^T"),
        gain_max=Gain(Real.rational(outputs * w, "O w"), "attained at W = w 11^T"),
        point=point,
        kernel="linear",
    )


def _residual_like(cfg: Config, weighted: bool) -> Model:
    size = cfg.dim
    w, b = _frac(cfg.weight_max), _frac(cfg.bias_max)
    nu = _frac(cfg.nu_max) if weighted else Fraction(1)
    gain = 1 + size * nu * w
    nu_text = "nu " if weighted else ""

    def point(fmt: Format) -> Point | None:
        wf = _fmt_value(fmt, cfg.weight_max)
        nf = _fmt_value(fmt, cfg.nu_max) if weighted else Fraction(1)
        g = 1 + size * nf * wf
        gain = Real.rational(g, f"1 + D {nu_text}w")
        text = (
            f"W = {float(wf):g} everywhere"
            + (f", nu = {float(nf):g}" if weighted else "")
            + ", x = 0"
        )
        # W (D x D), x, the signs and (weighted) nu, D each.
        entries = size * size + (3 if weighted else 2) * size
        too_large = unbuilt(entries, f"D x D = {size} x {size}")
        if too_large:
            return Point(None, None, (0, 0), gain, text, {}, too_large)
        arrays = {"x": np.zeros((1, size)), "W": np.full((size, size), float(wf))}
        if weighted:
            arrays["nu"] = np.full(size, float(nf))
        return Point(arrays, np.ones((1, size)), (0, 0), gain, text)

    title = "Weighted residual x + nu f(x)" if weighted else "Residual x + f(x)"
    return Model(
        title=title + ", f = Linear(D, D)",
        parameters=f"D = {size}, |W_ij| <= {cfg.weight_max:g}, |b_i| <= {cfg.bias_max:g}"
        + (f", |nu_i| <= {cfg.nu_max:g}" if weighted else ""),
        forward=Forward(
            slope=Real.rational(gain, f"1 + D {nu_text}w"),
            offset=nu * b,
            growth=f"linear: |y_i| <= (1 + D {nu_text}w) max|x_j| + {nu_text}max|b_i|",
        ),
        gain_2=Gain(
            Real.rational(gain, f"1 + D {nu_text}w"), "attained at W = w 11^T (eigenvector 1)"
        ),
        gain_max=Gain(Real.rational(gain, f"1 + D {nu_text}w"), "attained at W = w 11^T"),
        point=point,
        kernel="weighted_residual" if weighted else "residual",
    )


def _residual(cfg: Config) -> Model:
    return _residual_like(cfg, weighted=False)


def _weighted_residual(cfg: Config) -> Model:
    return _residual_like(cfg, weighted=True)


# --------------------------------------------------------------------------------------------
# Bounded and elementwise modules
# --------------------------------------------------------------------------------------------


def _softmax(cfg: Config) -> Model:
    size = cfg.dim
    half = Fraction(1, 2) if size > 1 else Fraction(0)
    # J = diag(y) - y y^T: column j sums y_j (1 - y_j) + sum_{i != j} y_i y_j = 2 y_j (1 - y_j).
    return Model(
        title="Softmax",
        parameters=f"D = {size}",
        forward=Forward(
            sup=Real.rational(Fraction(1), "1"),
            reached="attained at D = 1 or in the limit of one dominant entry",
        ),
        gain_2=Gain(
            Real.rational(half, "1/2"), "attained at D = 2, x = (0, 0); approached for D >= 3"
        ),
        gain_max=Gain(
            Real.rational(half, "max_j 2 y_j (1 - y_j) = 1/2"), "attained where y_j = 1/2"
        ),
        point=lambda fmt: None,
        kernel="softmax",
    )


def _maxpool(cfg: Config) -> Model:
    one = Real.rational(Fraction(1), "1")
    return Model(
        title="MaxPooling (global, over D)",
        parameters=f"D = {cfg.dim}",
        forward=Forward(sup=None, slope=one, growth="|y| <= max|x_j| (the output is an input)"),
        gain_2=Gain(one, "attained at every x with a unique maximum"),
        gain_max=Gain(one, "attained (dx = g at the argmax)"),
        point=lambda fmt: None,
        kernel="maxpool",
    )


def _avgpool(cfg: Config) -> Model:
    size = cfg.dim
    return Model(
        title="AveragePooling (global, over D)",
        parameters=f"D = {size}",
        forward=Forward(slope=Real.rational(Fraction(1), "1"), growth="|y| <= max|x_j| (a mean)"),
        gain_2=Gain(Real.sqrt_of(Fraction(1, size), "1/sqrt(D)"), "attained at every x"),
        gain_max=Gain(Real.rational(Fraction(1, size), "1/D"), "attained at every x (dx = g/D)"),
        point=lambda fmt: None,
        kernel="avgpool",
    )


#: Elementwise modules: envelope key -> (catalog key of derive.definitions.activations, kernel,
#: approximate).
ELEMENTWISE_KEYS: dict[str, tuple[str, str, str | None]] = {
    "sigmoid": ("sigmoid", "sigmoid", None),
    "relu": ("relu", "relu", None),
    "gelu": ("gelu_none", "gelu", "none"),
    "gelu_tanh": ("gelu_tanh", "gelu", "tanh"),
    "gelu_sigmoid": ("gelu_sigmoid", "gelu", "sigmoid"),
    "swish": ("swish", "swish", None),
}


def _elementwise(key: str) -> Callable[[Config], Model]:
    catalog, kernel, approximate = ELEMENTWISE_KEYS[key]

    def build(cfg: Config) -> Model:
        from proofs.activations import sup_abs_derivative

        sup = sup_abs_derivative(catalog)
        lo, hi = Fraction(sup.enclosure[0]), Fraction(sup.enclosure[1])

        def ball() -> arb:
            return (as_arb(lo) + as_arb(hi)) / 2 + arb(0, float(hi - lo) / 2 * (1 + 1e-9))

        exact = _rational_or_none(sup.value) if sup.value_exact else None
        gain = Real(f"sup|f'| = {sup.value}", ball, exact=exact)

        def point(fmt: Format) -> Point | None:
            return _elementwise_point(fmt, catalog, sup.maximizer, approximate)

        bounded = key == "sigmoid"
        return Model(
            title=key,
            parameters="elementwise",
            forward=Forward(sup=Real.rational(Fraction(1), "1"), reached="approached as x -> oo")
            if bounded
            else Forward(slope=Real.rational(Fraction(1), "1"), growth="|f(x)| <= |x|"),
            gain_2=Gain(gain, f"attained at x = {sup.maximizer}"),
            gain_max=Gain(gain, f"attained at x = {sup.maximizer} (the Jacobian is diagonal)"),
            point=point,
            kernel=kernel,
            notes=(
                "the forward and derivative at all 65,536 half inputs: the report's float16 facts",
            ),
        )

    return build


def _elementwise_point(fmt: Format, catalog: str, maximizer: str, approximate: str | None) -> Point:
    """The format value near the maximizer of |f'| with the largest |f'| (checked over the
    neighbouring format values, rigorously)."""
    import sympy as sp

    from derive.definitions.activations import elementwise
    from derive.definitions.activations import x as var
    from proofs.arb import to_arb

    module = elementwise(catalog)
    center = fmt.round(Fraction(float(sp.sympify(maximizer).evalf(30))))
    candidates = [center]
    for _ in range(4):
        candidates.append(fmt.next_up(candidates[-1]))
        low = candidates[0] - fmt.quantum(candidates[0])
        candidates.insert(0, low)
    if catalog == "relu":
        chosen, value = Fraction(1), Real.rational(Fraction(1), "relu'(1)")
    else:
        f = to_arb(module.derivative, var)
        with precision(256):
            balls = [(c, f(as_arb(c))) for c in candidates]
        chosen, best = balls[0]
        for c, b in balls[1:]:
            if b.mid() > best.mid():
                chosen, best = c, b
        value = Real(f"|f'({float(chosen):.8g})|", lambda: abs(f(as_arb(chosen))))
    options = {} if approximate is None else {"approximate": approximate}
    arrays = {"x": np.array([float(chosen)])}
    return Point(arrays, np.ones(1), (0,), value, f"x = {float(chosen):.8g}", options)


def _rational_or_none(text: str) -> Fraction | None:
    try:
        return Fraction(text)
    except ValueError:
        return None


#: Every module with an envelope, in the report's order.
MODELS: dict[str, Callable[[Config], Model]] = {
    "linear": _linear,
    "sigmoid": _elementwise("sigmoid"),
    "softmax": _softmax,
    "relu": _elementwise("relu"),
    "gelu": _elementwise("gelu"),
    "gelu_tanh": _elementwise("gelu_tanh"),
    "gelu_sigmoid": _elementwise("gelu_sigmoid"),
    "swish": _elementwise("swish"),
    "layernorm": _layernorm,
    "batchnorm": _batchnorm,
    "weightnorm": _weightnorm,
    "rmsnorm": _rmsnorm,
    "centernorm": _centernorm,
    "residual": _residual,
    "weighted_residual": _weighted_residual,
    "maxpool": _maxpool,
    "avgpool": _avgpool,
}


def kernel_dx(e: Envelope, size: Fraction | float, *, strict_fp16: bool = False) -> np.ndarray:
    """The kernel's input gradient at the witness for ``g = size * signs``, in the envelope's
    format (the witness's arrays and ``g`` rounded once to it), mixed mode unless
    ``strict_fp16``. float16, bfloat16 and float32 run the kernels in that format; the FP8
    formats, which the kernels do not take, run the float64 kernels on the FP8 values
    (exact in float64) and round dx once to the format, which is what mixed mode is (every
    module but the composite blocks, whose branch output mixed mode would round first).
    """
    import kernels
    from kernels.cast import cast

    name = e.format.name
    if e.witness is None:
        raise ValueError(f"{e.module}: this envelope has no witness")
    if e.witness.point.arrays is None:
        raise ValueError(f"{e.module}: {e.witness.point.unbuilt}")
    fp8 = name.startswith("float8")
    composite = e.model.kernel in ("residual", "weighted_residual")
    if name not in ("float16", "bfloat16", "float32") and not (fp8 and not composite):
        raise ValueError(f"no kernels for {e.module} in {name}")
    if fp8 and strict_fp16:
        raise ValueError(f"no strict arithmetic in {name}")

    def rounded(values: np.ndarray) -> np.ndarray:
        if name == "float32":
            return values.astype(np.float32)
        narrow = cast(values, name)
        return narrow.astype(np.float64) if fp8 else narrow

    point = e.witness.point
    arrays = {k: rounded(v) for k, v in point.arrays.items()}
    g = rounded(float(size) * point.signs)
    module = getattr(kernels, e.model.kernel)
    if e.model.kernel in ("residual", "weighted_residual"):
        branch = kernels.compose.Linear(arrays.pop("W"))
        extra = (arrays.pop("nu"),) if "nu" in arrays else ()
        x = arrays.pop("x")
        out = module.vjp(x, g, branch, *extra, strict_fp16=strict_fp16)
    else:
        out = module.vjp(g=g, **arrays, **point.options, strict_fp16=strict_fp16)
    dx = out[0] if isinstance(out, tuple) else out
    return cast(dx, name) if fp8 else dx


def models() -> dict[str, Callable[[Config], Model]]:
    """:data:`MODELS` with the convolution and attention models (``envelope_attention``)."""
    return MODELS | MORE_MODELS
