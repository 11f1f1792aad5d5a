r"""FP16 envelopes (see :mod:`derive.envelope.modules`) of Conv2d and the three single-head
attentions.

Each model below states the supremum of the max-norm gain ``sup max_j sum_i |J_ij|`` (what
decides whether some ``dx_j = (J^T g)_j`` overflows), the 2-norm gain and the forward
bound, with the derivation in its docstring, and builds a witness input in the format
with its EXACT column gain (rationals, square roots, or arb balls of closed forms). Where a
supremum is not derived exactly (L2 and SCS attention), the model gives a rigorous UPPER
bound -- so the printed safe upstream gradient is safe -- labelled "upper bound, not shown
tight", and a witness that is only a lower bound of the supremum; a note then says that the
format steps between the safe size and the witness's overflow measure the bound's
looseness, not only the format's.

Conventions (the kernels', SPEC "Modules and kernel API"):

* ``conv2d``: ``C_in = cfg.channels``, ``C_out = cfg.out_dim`` or, when not given,
  ``cfg.channels`` (a square layer; ``cfg.outputs`` would default to ``cfg.dim``, which is
  not a convolution size); square kernels ``k = cfg.kernel``, stride ``s = cfg.stride``,
  ``padding_mode="zeros"`` with any padding; ``|W| <= cfg.weight_max``,
  ``|b| <= cfg.bias_max``. The suprema are over all kernels, inputs and image sizes.
* attention: ``N = cfg.tokens`` tokens of width ``D = cfg.dim``; queries and keys have
  width ``d = D`` (one head), values ``dv = cfg.outputs``; every projection entry is
  bounded by ``w = cfg.weight_max``. SCS: ``|nu| <= cfg.nu_max``, ``|tau| <= cfg.tau_max``,
  ``eps = cfg.eps`` (default
  1e-6, must be > 0).

Upper bounds over a box of a few real parameters are computed by branch and bound with arb
interval arithmetic (:func:`sup_upper`): the result is a rational number at least the
supremum, within :data:`BB_TOLERANCE` of it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from functools import lru_cache

import numpy as np
from flint import arb

from derive.envelope.core import (
    Config,
    Format,
    Forward,
    Gain,
    Model,
    Point,
    Real,
    as_arb,
    precision,
    unbuilt,
)

__all__ = [
    "BB_TOLERANCE",
    "MORE_MODELS",
    "conv_overlap_sum",
    "dp_column",
    "l2_cluster_column",
    "l2_constants",
    "scs_column",
    "scs_constant",
    "sup_upper",
]

#: Relative tolerance of :func:`sup_upper`: it stops once no box can exceed the best point
#: value found by more than this fraction (the bound it returns is rigorous regardless).
BB_TOLERANCE = Fraction(1, 200)
#: Working precision (bits) of the branch and bound.
BB_PREC = 64
#: Largest number of boxes :func:`sup_upper` may split before giving up.
BB_LIMIT = 200_000


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def _frac(value: float) -> Fraction:
    return Fraction(float(value))


def _down(fmt: Format, value: float) -> Fraction:
    """``value`` rounded down to the format (0 stays 0)."""
    v = _frac(value)
    return fmt.round_down(v) if v > 0 else Fraction(0)


def _up(fmt: Format, value: Fraction) -> Fraction | None:
    """The smallest format value >= ``value`` (> 0), or None past the largest finite."""
    if value > fmt.max_finite:
        return None
    low = fmt.round_down(value)
    return low if low >= value else fmt.next_up(low)


def _nearest(fmt: Format, value: float) -> Fraction:
    """``value`` rounded to nearest in the format (magnitudes capped at the largest finite)."""
    v = _frac(value)
    if abs(v) >= fmt.max_finite:
        return fmt.max_finite if v > 0 else -fmt.max_finite
    return fmt.round(v)


def _fraction_of(ball_endpoint: arb) -> Fraction:
    """An exact arb point (an endpoint from ``lower()``/``upper()``) as a Fraction."""
    man, exp = ball_endpoint.man_exp()
    man, exp = int(man), int(exp)
    return Fraction(man * (1 << exp)) if exp >= 0 else Fraction(man, 1 << -exp)


def _interval(lo: float, hi: float) -> arb:
    return arb(lo) if lo == hi else arb(lo).union(arb(hi))


def _sign(value: arb) -> float:
    """The sign of a ball that excludes 0 (0.0 for an exact 0)."""
    if value > 0:
        return 1.0
    if value < 0:
        return -1.0
    if value.is_zero():
        return 0.0
    raise ArithmeticError(f"the sign of {value} is not decided")


def _tol_text() -> str:
    return f"branch and bound in arb, within {float(BB_TOLERANCE):g} relative"


# --------------------------------------------------------------------------------------------
# Branch and bound: a rigorous upper bound of a supremum over a box
# --------------------------------------------------------------------------------------------


class _Dual:
    """An arb ball with an enclosure of its gradient (None: unknown), for the mean-value
    form of :func:`sup_upper`. Supports ``+ - * /`` with arbs and ints, and ``exp``."""

    __slots__ = ("grad", "value")

    def __init__(self, value: arb, grad: tuple[arb, ...] | None) -> None:
        self.value, self.grad = value, grad

    def _scaled(self, factor: arb) -> tuple[arb, ...] | None:
        return None if self.grad is None else tuple(g * factor for g in self.grad)

    def __add__(self, other: object) -> _Dual:
        if isinstance(other, _Dual):
            grad = (
                None
                if self.grad is None or other.grad is None
                else tuple(a + b for a, b in zip(self.grad, other.grad, strict=True))
            )
            return _Dual(self.value + other.value, grad)
        return _Dual(self.value + other, self.grad)

    __radd__ = __add__

    def __neg__(self) -> _Dual:
        return _Dual(-self.value, self._scaled(arb(-1)))

    def __sub__(self, other: object) -> _Dual:
        return self + (-other)

    def __rsub__(self, other: object) -> _Dual:
        return (-self) + other

    def __mul__(self, other: object) -> _Dual:
        if isinstance(other, _Dual):
            grad = (
                None
                if self.grad is None or other.grad is None
                else tuple(
                    a * other.value + self.value * b
                    for a, b in zip(self.grad, other.grad, strict=True)
                )
            )
            return _Dual(self.value * other.value, grad)
        return _Dual(self.value * other, self._scaled(arb(other)))

    __rmul__ = __mul__

    def __truediv__(self, other: object) -> _Dual:
        if isinstance(other, _Dual):
            q = self.value / other.value
            grad = (
                None
                if self.grad is None or other.grad is None
                else tuple(
                    (a - q * b) / other.value for a, b in zip(self.grad, other.grad, strict=True)
                )
            )
            return _Dual(q, grad)
        return _Dual(self.value / other, self._scaled(1 / arb(other)))

    def __rtruediv__(self, other: object) -> _Dual:
        q = arb(other) / self.value
        return _Dual(q, self._scaled(-q / self.value))

    def exp(self) -> _Dual:
        e = self.value.exp()
        return _Dual(e, self._scaled(e))


def _value(x: arb | _Dual) -> arb:
    return x.value if isinstance(x, _Dual) else x


def sup_upper(
    f: Callable[[Sequence[arb]], arb],
    box: Sequence[tuple[float, float]],
    *,
    tolerance: Fraction = BB_TOLERANCE,
) -> Fraction:
    """A rational ``U >= sup f`` over ``box`` (a list of closed intervals with float
    endpoints), within ``tolerance`` of the supremum.

    ``f`` is written with ``+ - * /`` and ``exp`` so that it evaluates on arb balls (one per
    coordinate: an enclosure of its values there) and on :class:`_Dual` numbers (also an
    enclosure of its gradient). A box's upper bound is the smaller of the plain interval
    bound and the mean-value bound ``f(c) + sum_i g_i (x_i - c_i)`` (c the centre, g the
    gradient enclosure over the box), which shrinks quadratically near a maximum. The box
    with the largest upper bound is bisected first, across the side where the mean-value
    term ``|g_i| width_i`` is largest (the widest side when the gradient is unknown); the
    values at box centres give a lower bound L of the supremum, and the search stops when
    every remaining box's upper bound is at most ``(1 + tolerance) L``. ``U`` is the largest
    upper bound of the remaining boxes: every point of the domain lies in one of them, so
    ``U`` bounds the supremum whatever the tolerance.

    >>> u = sup_upper(lambda v: v[0] * (1 - v[0]), [(0.0, 1.0)])
    >>> Fraction(1, 4) <= u <= Fraction(1, 4) * (1 + BB_TOLERANCE)
    True
    """
    with precision(BB_PREC):
        count = 0
        best = -math.inf

        def evaluate(cell: tuple[tuple[float, float], ...]) -> tuple[float, Fraction | None, int]:
            nonlocal best
            balls = [_interval(lo, hi) for lo, hi in cell]
            centre = [arb((lo + hi) / 2) for lo, hi in cell]
            at_centre = _value(f(centre))
            if at_centre.is_finite():
                best = max(best, float(at_centre.lower()))
            size = len(cell)
            units = [tuple(arb(int(i == j)) for j in range(size)) for i in range(size)]
            result = f([_Dual(b, u) for b, u in zip(balls, units, strict=True)])
            value = _value(result)
            bounds = []
            if value.is_finite():
                bounds.append(_fraction_of(value.upper()))
            grad = result.grad if isinstance(result, _Dual) else None
            if grad is not None and at_centre.is_finite() and all(g.is_finite() for g in grad):
                spread = at_centre
                for g, b, c in zip(grad, balls, centre, strict=True):
                    spread = spread + g * (b - c)
                bounds.append(_fraction_of(spread.upper()))
            widths = [hi - lo for lo, hi in cell]
            if grad is not None and all(g.is_finite() for g in grad):
                # Split where the mean-value term is largest.
                weights = [float(abs(g).upper()) * h for g, h in zip(grad, widths, strict=True)]
            else:
                weights = widths
            axis = max(range(size), key=lambda a: (weights[a], widths[a]))
            if not bounds:
                return math.inf, None, axis
            upper = min(bounds)
            return float(upper), upper, axis

        heap: list = []
        start = tuple((float(lo), float(hi)) for lo, hi in box)
        top, exact, axis = evaluate(start)
        heap.append((-top, 0, start, exact, axis))
        serial = 1
        while True:
            negative, _, cell, exact, axis = heap[0]
            if exact is not None and -negative <= best + abs(best) * float(tolerance):
                break
            heapq.heappop(heap)
            count += 1
            if count > BB_LIMIT:
                raise ArithmeticError("sup_upper: the branch and bound did not converge")
            lo, hi = cell[axis]
            middle = (lo + hi) / 2
            for part in ((lo, middle), (middle, hi)):
                child = (*cell[:axis], part, *cell[axis + 1 :])
                top, exact_child, child_axis = evaluate(child)
                heapq.heappush(heap, (-top, serial, child, exact_child, child_axis))
                serial += 1
        return max(entry[3] for entry in heap)


# --------------------------------------------------------------------------------------------
# Conv2d
# --------------------------------------------------------------------------------------------


def conv_overlap_sum(k: int, s: int) -> int:
    """``F(k, s) = sum over integers |j| < k/s of (k - |j| s)``: the row sum of ``T T^T`` for
    the 1-D strided all-ones window operator T far from the border (``k^2`` for s = 1,
    ``k^2/s`` when s divides k).

    With ``m = ceil(k/s)`` (windows per axis over one pixel) the sum over ``j = 1..m-1`` is
    ``(m - 1) k - s m (m - 1)/2``, so ``F = k + (m - 1)(2k - s m)`` (no loop: k may be huge).

    >>> conv_overlap_sum(3, 1), conv_overlap_sum(3, 2), conv_overlap_sum(4, 2)
    (9, 5, 8)
    >>> conv_overlap_sum(10**9, 1) == 10**18
    True
    """
    reach = -(-k // s)  # ceil(k/s): windows per axis over one pixel
    return k + (reach - 1) * (2 * k - s * reach)


def _conv2d(cfg: Config) -> Model:
    r"""Conv2d (``kernels.conv2d``, zero padding), all kernels ``|W| <= w``, all images.

    Jacobian. With zero padding, output ``(o, i, j)`` reads input pixel ``(c, r, t)`` through
    at most one tap, ``(p, q) = (r + P - i s, t + P - j s)`` (P the padding), so every entry
    of J is one weight or 0 and ``|J| <= J(w 1)`` entrywise, where
    ``J(w 1) = w (1_{C_out} 1_{C_in}^T) (x) T_H (x) T_W`` with ``T`` the 1-D window incidence
    (``T_{i r} = 1`` when window i covers pixel r).

    Max-norm: column ``(c, r, t)`` sums ``|W[o, c, p, q]|`` over the windows covering the
    pixel: at most ``C_out w m_r m_t``, with ``m_r`` the number of windows per axis over
    the pixel. Window i covers r when ``r + P - k < i s <= r + P``: multiples of s among k
    consecutive integers, at most ``ceil(k/s)``. Hence ``gain <= C_out w ceil(k/s)^2``,
    attained by ``W = w`` at pixel ``(m - 1) s`` of a ``k + (m - 1) s`` square image with no
    padding (``m = ceil(k/s)``: windows 0..m-1 all cover it), and on every larger image.

    2-norm: the spectral norm of a matrix is at most that of its entrywise absolute value,
    and on nonnegative matrices it is monotone in the entries, so the supremum over kernels
    is the all-w kernel's: ``w sqrt(C_in C_out) |T_H| |T_W|``
    (``|1 1^T|_2 = sqrt(C_in C_out)``). ``T T^T`` is nonnegative with entries (window
    overlaps) at most ``max(0, k - |i - i'| s)``, so ``|T|^2 <= max row sum <= F(k, s)``
    (:func:`conv_overlap_sum`); with ``u = 1`` on the windows, ``|T^T u|^2 / |u|^2`` is the
    mean row sum of ``T T^T``, which tends to F as the image grows (interior windows have
    every overlap). So the supremum is ``w sqrt(C_in C_out) F(k, s)`` -- ``w k^2 sqrt(C_in
    C_out)`` for stride 1, ``w k^2 sqrt(C_in C_out) / s`` when s divides k -- approached as
    the image grows, attained on a torus (circular padding: T T^T is circulant with row
    sum F; ``proofs.spectral.conv_circular_lipschitz`` of the all-ones kernel gives 9 for
    k = 3, s = 1 and 5 for k = 3, s = 2).

    Forward: ``|y| <= C_in k^2 w max|x| + max|b|``, attained at ``W = w``, ``b = max|b|``,
    constant x, any output whose window lies inside the image.
    """
    c_in = cfg.channels
    c_out = cfg.channels if cfg.out_dim is None else int(cfg.out_dim)
    k, s = cfg.kernel, cfg.stride
    w, b = _frac(cfg.weight_max), _frac(cfg.bias_max)
    reach = -(-k // s)
    overlap = conv_overlap_sum(k, s)
    side = k + (reach - 1) * s

    def point(fmt: Format) -> Point | None:
        wf = _down(fmt, cfg.weight_max)
        if wf == 0:
            return None
        pixel = (reach - 1) * s
        gain = Real.rational(c_out * wf * reach * reach, "C_out w ceil(k/s)^2")
        text = (
            f"W = {float(wf):g} everywhere, x = 0 on a {side} x {side} image, padding 0 "
            f"(pixel ({pixel}, {pixel}) lies under {reach} x {reach} windows)"
        )
        options = {"stride": s, "padding": 0}
        # x (C_in side^2), W (C_out C_in k^2), b (C_out) and the signs (C_out ceil(k/s)^2).
        total = c_in * side * side + c_out * c_in * k * k + c_out + c_out * reach * reach
        too_large = unbuilt(
            total, f"C_in side^2 = {c_in} x {side}^2 and C_out C_in k^2 = {c_out} x {c_in} x {k}^2"
        )
        if too_large:
            return Point(None, None, (0, 0, pixel, pixel), gain, text, options, too_large)
        arrays = {
            "x": np.zeros((1, c_in, side, side)),
            "W": np.full((c_out, c_in, k, k), float(wf)),
            "b": np.full(c_out, float(_down(fmt, cfg.bias_max))),
        }
        signs = np.ones((1, c_out, reach, reach))
        return Point(arrays, signs, (0, 0, pixel, pixel), gain, text, options)

    stride_text = "stride 1" if s == 1 else f"stride {s}"
    return Model(
        title="Conv2d (zero padding)",
        parameters=f"C_in = {c_in}, C_out = {c_out}, k = {k}, {stride_text}, |W| <= "
        f"{cfg.weight_max:g}, |b| <= {cfg.bias_max:g}, any image size and padding",
        forward=Forward(
            slope=Real.rational(c_in * k * k * w, "C_in k^2 w"),
            offset=b,
            growth="linear: |y| <= C_in k^2 w max|x| + max|b| (W = w, x = m 1)",
        ),
        gain_2=Gain(
            Real.sqrt_of(
                w * w * c_in * c_out * overlap * overlap,
                f"w sqrt(C_in C_out) F(k, s), F = {overlap}",
            ),
            "supremum over kernels and image sizes, at W = w: approached as the image grows, "
            "attained with circular padding",
        ),
        gain_max=Gain(
            Real.rational(c_out * w * reach * reach, "C_out w ceil(k/s)^2"),
            f"attained at W = w on images of at least {side} x {side} pixels",
        ),
        point=point,
        kernel="conv2d",
        notes=(
            f"smaller images than {side} x {side} have smaller max-norm gains; the safe size "
            "holds for every image size and every zero padding (not for circular padding, "
            "where a pixel can sit under several taps of one window).",
        ),
    )


# --------------------------------------------------------------------------------------------
# Dot-product attention
# --------------------------------------------------------------------------------------------


def dp_column(n: int, dv: int, d: int, w: Fraction, sigma: Fraction) -> Real:
    r"""The exact column gain of DP attention (N = ``n`` tokens) with every weight ``w``, at
    an X whose token 0 has entries summing to ``sigma`` and whose other tokens are 0, in
    column (1, k) (any k):
    ``dv w [(N-1)/N (1 + c sigma^2/N) + |1 - c sigma^2 P_00| P_01]``, ``c = w^2 sqrt(d)``,
    ``P_00 = E/(E + N - 1)``, ``P_01 = 1/(E + N - 1)``, ``E = exp(c sigma^2)``.

    Derivation. With all weights w, ``q_j = k_j = w s_j 1_d`` and ``v_j = w s_j 1_dv``
    (``s_j`` the sum of token j's entries), so ``Y_i = w mu_i 1_dv`` with
    ``mu_i = sum_j P_ij s_j``, ``P_ij = softmax_j(c s_i s_j)``, and every column (m, k) of J
    is ``w d mu / d s_m`` repeated dv times. Differentiating,
    ``d mu_i / d s_m = P_im + c delta_im Var_i + c s_i P_im (s_m - mu_i)``
    (``Var_i`` the variance of s under row i). At ``s = (sigma, 0, ..., 0)``, m = 1: rows
    ``i >= 2`` are uniform and give ``1/N``; row 1 gives ``1/N + c Var_1 = 1/N +
    c sigma^2 (N-1)/N^2``; row 0 gives ``P_01 (1 - c sigma^2 P_00)``.
    """
    c2 = w * w  # c = c2 sqrt(d)
    base = Fraction(n - 1, n)

    def ball() -> arb:
        c = as_arb(c2) * arb(d).sqrt()
        x = c * as_arb(sigma * sigma)
        e = x.exp()
        p00, p01 = e / (e + (n - 1)), 1 / (e + (n - 1))
        return as_arb(dv * w) * (as_arb(base) * (1 + x / n) + abs(1 - x * p00) * p01)

    return Real("dv w ((N-1)/N (1 + c s^2/N) + |1 - c s^2 P_00| P_01)", ball)


def _dp_signs(n: int, dv: int, d: int, w: Fraction, sigma: Fraction) -> np.ndarray:
    with precision(256):
        x = as_arb(w * w) * arb(d).sqrt() * as_arb(sigma * sigma)
        e = x.exp()
        row0 = _sign(1 - x * e / (e + (n - 1)))
    signs = np.ones((n, dv))
    signs[0] = row0
    return signs


def _dp_attention(cfg: Config) -> Model:
    r"""Dot-product attention (``kernels.dp_attention``), ``d = D``, ``|W| <= w``.

    For N >= 2 and w > 0 the gains are unbounded: ``proofs/attention.py`` (dp_unbounded)
    proves that along ``X = (t a, 0, ..., 0)`` an entry of J grows like ``t^2`` whenever
    ``Wq^T Wk != 0`` and ``Wv != 0``. With every weight w, column (1, k) sums exactly to
    :func:`dp_column`, about ``dv w^3 sqrt(d) t^2 (N-1)/N^2``. The witness takes the
    smallest format size t with column gain >= the overflow threshold (so g = 1 already
    overflows dx) while ``|Y| <= w t`` stays finite.

    N = 1: the softmax is 1 and ``Y = X Wv^T`` is linear: gains ``dv w`` (max-norm) and
    ``w sqrt(dv D)`` (2-norm), attained at ``Wv = w``.

    Forward: ``|Y_ic| <= max_j |v_jc| <= D w max|x|`` (a convex combination of values),
    attained at constant X with every weight w (uniform attention).
    """
    n, dim, dv = cfg.tokens, cfg.dim, cfg.outputs
    w = _frac(cfg.weight_max)
    forward = Forward(
        slope=Real.rational(dim * w, "D w"),
        growth="linear: |Y| <= max_j |v_j| <= D w max|x| (convex combinations of the values)",
    )
    parameters = f"N = {n}, D = d = {dim}, dv = {dv}, |W_ij| <= {cfg.weight_max:g}"
    if n == 1 or w == 0:
        return _linear_attention(cfg, "Dot-product attention", parameters, forward, "dp_attention")

    def point(fmt: Format) -> Point | None:
        wf = _down(fmt, cfg.weight_max)
        if wf == 0:
            return None
        return _dp_point(fmt, n, dim, dv, wf)

    reason = (
        "for N >= 2 and w > 0 (proofs/attention.py, dp_unbounded): along X = (t e_0, 0, ...) "
        "with every weight w a column of J sums to about dv w^3 sqrt(d) t^2 (N-1)/N^2"
    )
    return Model(
        title="Dot-product attention (single head)",
        parameters=parameters,
        forward=forward,
        gain_2=Gain(None, reason),
        gain_max=Gain(None, reason),
        point=point,
        kernel="dp_attention",
        notes=(
            "unbounded over real inputs; over the inputs a format can hold the gain is finite, "
            "so 'no size is safe' is shown for the format by the witness (g <= 1 overflows); "
            "when no witness is printed, the weights are too small for the format's inputs to "
            "reach the overflow threshold at g <= 1 and the statement holds over real inputs only.",
        ),
    )


def _dp_point(fmt: Format, n: int, dim: int, dv: int, w: Fraction) -> Point | None:
    """The smallest token size t (a format value; on one entry, or on all D entries when
    one entry cannot hold it) whose column gain reaches the overflow threshold."""
    d = dim
    threshold = fmt.overflow
    # gain ~ dv w (N-1)/N (1 + c s^2 / N): solve for s, then step up to a sure overflow.
    c = float(w * w) * math.sqrt(d)
    need = max(float(threshold) / (dv * float(w) * (n - 1) / n) - 1.0, 0.0) * n / c
    estimate = Fraction(math.sqrt(need)) if need > 0 else fmt.smallest_subnormal
    for spread in (1, dim):
        t = _up(fmt, estimate / spread)
        if t is None or t == 0:
            continue

        def reaches(size: Fraction, spread: int = spread) -> bool:
            return fmt.beyond(dp_column(n, dv, d, w, spread * size), Fraction(1), threshold)

        while t is not None and not reaches(t):
            t = fmt.next_up(t)
        if t is None:
            continue
        while t > fmt.smallest_subnormal:  # the smallest such size
            lower = fmt.round_down(t - fmt.smallest_subnormal)
            if not reaches(lower):
                break
            t = lower
        sigma = spread * t
        # |Y| <= w sigma must stay finite
        if fmt.beyond(Real.rational(w * sigma), Fraction(1), fmt.overflow):
            return None
        where = "X[0, 0]" if spread == 1 else "every entry of token 0"
        gain = dp_column(n, dv, d, w, sigma)
        text = (
            f"every weight {float(w):g}, {where} = {float(t):g}, the other tokens 0 "
            f"(|Y| <= {float(w * sigma):.6g}: the forward is finite)"
        )
        too_large = unbuilt(_attention_entries(n, dim, dv, 2), _attention_sizes(n, dim, dv))
        if too_large:
            return Point(None, None, (1, 0), gain, text, {}, too_large)
        X = np.zeros((n, dim))
        X[0, :spread] = float(t)
        full = np.full((d, dim), float(w))
        arrays = {"X": X, "Wq": full, "Wk": full.copy(), "Wv": np.full((dv, dim), float(w))}
        return Point(arrays, _dp_signs(n, dv, d, w, sigma), (1, 0), gain, text)
    return None


def _attention_entries(n: int, dim: int, dv: int, square_weights: int) -> int:
    """The array entries of an attention witness: X (N x D), ``square_weights`` D x D
    projections (d = D), Wv (dv x D) and the signs (N x dv)."""
    return n * dim + square_weights * dim * dim + dv * dim + n * dv


def _attention_sizes(n: int, dim: int, dv: int) -> str:
    return f"N D = {n} x {dim}, D^2 = {dim}^2 and dv D = {dv} x {dim}"


def _linear_attention(
    cfg: Config, title: str, parameters: str, forward: Forward, kernel: str
) -> Model:
    """N = 1 (or w = 0): the attention is ``Y = X Wv^T``."""
    dim, dv = cfg.dim, cfg.outputs
    w = _frac(cfg.weight_max)

    def point(fmt: Format) -> Point | None:
        wf = _down(fmt, cfg.weight_max)
        if wf == 0:
            return None
        gain = Real.rational(dv * wf, "dv w")
        text = f"every weight {float(wf):g}, X = 0"
        too_large = unbuilt(
            _attention_entries(cfg.tokens, dim, dv, 2), _attention_sizes(cfg.tokens, dim, dv)
        )
        if too_large:
            return Point(None, None, (0, 0), gain, text, {}, too_large)
        full = np.full((dim, dim), float(wf))
        arrays = {
            "X": np.zeros((cfg.tokens, dim)),
            "Wq": full,
            "Wk": full.copy(),
            "Wv": np.full((dv, dim), float(wf)),
        }
        return Point(arrays, np.ones((cfg.tokens, dv)), (0, 0), gain, text)

    return Model(
        title=title + " (one token: Y = X Wv^T)" if cfg.tokens == 1 else title + " (w = 0)",
        parameters=parameters,
        forward=forward,
        gain_2=Gain(Real.sqrt_of(w * w * dv * dim, "w sqrt(dv D)"), "attained at Wv = w"),
        gain_max=Gain(Real.rational(dv * w, "dv w"), "attained at Wv = w"),
        point=point,
        kernel=kernel,
    )


# --------------------------------------------------------------------------------------------
# L2 attention
# --------------------------------------------------------------------------------------------

#: Beyond this distance (in units of d^(1/4) / |Wq|) the tails of the L2 bounds are added
#: in closed form.
_L2_REACH = 6.0


def _l2_terms(n: int, r: arb, rho: arb) -> tuple[arb, arb, arb]:
    """``(P, r, S)`` of the per-token bound: ``P = a/(1 + a + (n-1) b)``,
    ``S = (n-1) rho b/(1 + a + (n-1) b)``, ``a = exp(-r^2)``, ``b = exp(-rho^2)``."""
    a = (-(r * r)).exp()
    b = (-(rho * rho)).exp()
    z = 1 + a + (n - 1) * b
    return a / z, r, (n - 1) * rho * b / z


@lru_cache(maxsize=64)
def l2_constants(n_tokens: int) -> dict[str, Fraction]:
    r"""Rigorous upper bounds (rationals) of the four suprema the L2 bounds are made of, for
    ``N = n_tokens`` (``n = N - 1``; ``a = exp(-r^2)``, ``b = exp(-rho^2)``, r, rho >= 0):

    * ``A``  = sup ``(1 + 2 n a r^2) / (1 + n a)`` (the column's own token),
    * ``psi`` = sup ``P (1 + 2 r ((1 - P) r + S))`` (each other token),
    * ``e``  = sup ``n a r^2 / (1 + n a)`` (a row's mean squared distance),
    * ``c1`` = sup ``P r ((1 - P) r + S)``,

    with ``P = a/(1 + a + (n-1) b)``, ``S = (n-1) rho b/(1 + a + (n-1) b)``. Each is a
    branch and bound (:func:`sup_upper`) over ``r, rho in [0, R]``, R = 6; the strip
    ``rho >= R`` enters as the intervals ``b in [0, e^{-R^2}]``, ``rho b in [0, R e^{-R^2}]``
    (``rho e^{-rho^2}`` decreases for rho >= 1/sqrt 2), and ``r >= R`` as a closed-form tail
    (``P <= a``, ``S <= (n-1)/sqrt(2e)``, and ``r^k e^{-r^2}`` decreases for r >= 1).
    """
    n = n_tokens - 1
    if n == 0:
        return {"A": Fraction(1), "psi": Fraction(0), "e": Fraction(0), "c1": Fraction(0)}
    R = _L2_REACH
    box1 = [(0.0, R)]
    box2 = [(0.0, R), (0.0, R)]

    def part_a(v: Sequence[arb]) -> arb:
        a = (-(v[0] * v[0])).exp()
        return (1 + 2 * n * a * v[0] * v[0]) / (1 + n * a)

    def part_e(v: Sequence[arb]) -> arb:
        a = (-(v[0] * v[0])).exp()
        return n * a * v[0] * v[0] / (1 + n * a)

    def part_psi(v: Sequence[arb]) -> arb:
        p, r, s = _l2_terms(n, v[0], v[1])
        return p * (1 + 2 * r * ((1 - p) * r + s))

    def part_c1(v: Sequence[arb]) -> arb:
        p, r, s = _l2_terms(n, v[0], v[1])
        return p * r * ((1 - p) * r + s)

    with precision(BB_PREC):
        big = arb(R)
        tail = (-(big * big)).exp()
        # For rho >= R: b <= e^{-R^2}, rho b <= R e^{-R^2}; S <= (n-1)/sqrt(2e) always.
        s_max = (n - 1) / (2 * arb(1).exp()).sqrt()
        bound_a = 1 + 2 * n * tail * big * big
        bound_e = n * tail * big * big
        bound_psi = tail * (1 + 2 * big * big + 2 * big * s_max)
        bound_c1 = tail * (big * big + big * s_max)
        tails = {
            "A": _fraction_of(bound_a.upper()),
            "e": _fraction_of(bound_e.upper()),
            "psi": _fraction_of(bound_psi.upper()),
            "c1": _fraction_of(bound_c1.upper()),
        }
        # rho in [R, oo): b in [0, e^{-R^2}] and rho b in [0, R e^{-R^2}].
        b_tail = arb(0).union(tail)
        rb_tail = arb(0).union(big * tail)

    def rho_tail(g: Callable[[arb, arb, arb], arb]) -> Callable[[Sequence[arb]], arb]:
        def h(v: Sequence[arb]) -> arb:
            a = (-(v[0] * v[0])).exp()
            z = 1 + a + (n - 1) * b_tail
            return g(a / z, v[0], (n - 1) * rb_tail / z)

        return h

    def psi_of(p: arb, r: arb, s: arb) -> arb:
        return p * (1 + 2 * r * ((1 - p) * r + s))

    def c1_of(p: arb, r: arb, s: arb) -> arb:
        return p * r * ((1 - p) * r + s)

    out = {
        "A": max(sup_upper(part_a, box1), tails["A"]),
        "e": max(sup_upper(part_e, box1), tails["e"]),
        "psi": max(sup_upper(part_psi, box2), sup_upper(rho_tail(psi_of), box1), tails["psi"]),
        "c1": max(sup_upper(part_c1, box2), sup_upper(rho_tail(c1_of), box1), tails["c1"]),
    }
    return out


def l2_cluster_column(
    n_tokens: int, c: arb, a: Fraction, b: Fraction, p: int
) -> tuple[arb, list[arb]]:
    r"""``(sum_i |d mu_i / d s_m|, [term_m, term_L, term_R])`` for L2 attention with every
    weight w at token sums ``s_m = 0``, ``p`` tokens at ``-a``, ``q = N - 1 - p`` at ``b``
    (``c = w^2 sqrt(d)``: the logits are ``-c (s_i - s_j)^2``). The column sum of J is
    ``dv D sqrt(d) w^3`` times the first value; the terms carry the signs of the rows.

    ``d mu_i / d s_m = P_mm + 2 c Var_m`` for i = m and
    ``P_im (1 + 2 c (s_m - mu_i)(s_i - s_m))`` otherwise (``mu_i = sum_j P_ij s_j``).
    """
    q = n_tokens - 1 - p
    A, B = as_arb(a), as_arb(b)
    e_l, e_r, e_lr = (-c * A * A).exp(), (-c * B * B).exp(), (-c * (A + B) * (A + B)).exp()
    z = 1 + p * e_l + q * e_r
    mean = (-A * p * e_l + B * q * e_r) / z
    second = (A * A * p * e_l + B * B * q * e_r) / z
    term_m = 1 / z + 2 * c * (second - mean * mean)
    z_l = p + e_l + q * e_lr
    term_l = e_l / z_l * (1 + 2 * c * A * ((-A * p + B * q * e_lr) / z_l))
    z_r = q + e_r + p * e_lr
    term_r = e_r / z_r * (1 - 2 * c * B * ((B * q - A * p * e_lr) / z_r))
    total = abs(term_m) + (p * abs(term_l) if p else 0) + (q * abs(term_r) if q else 0)
    return total, [term_m, term_l, term_r]


@lru_cache(maxsize=64)
def _l2_cluster_search(n_tokens: int) -> tuple[int, float, float]:
    """``(p, a, b)`` maximizing the cluster column sum with c = 1 (float64 grid search,
    then a finer grid around the best): the witness's shape, not a proof of anything."""
    n = n_tokens - 1
    if n == 0:
        return 0, 0.0, 0.0
    counts = (
        range(0, n // 2 + 1) if n <= 64 else sorted({int(v) for v in np.linspace(0, n // 2, 33)})
    )

    def values(p: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        q = n - p
        el, er, elr = np.exp(-a * a), np.exp(-b * b), np.exp(-((a + b) ** 2))
        z = 1 + p * el + q * er
        mean = (-a * p * el + b * q * er) / z
        term_m = 1 / z + 2 * ((a * a * p * el + b * b * q * er) / z - mean * mean)
        zl, zr = p + el + q * elr, q + er + p * elr
        tl = el / zl * (1 + 2 * a * ((-a * p + b * q * elr) / zl)) if p else 0 * a
        tr = er / zr * (1 - 2 * b * ((b * q - a * p * elr) / zr)) if q else 0 * a
        return np.abs(term_m) + p * np.abs(tl) + q * np.abs(tr)

    grid = np.linspace(0.0, 4.0, 161)
    A, B = np.meshgrid(grid, grid, indexing="ij")
    best = (-1.0, 0, 0.0, 0.0)
    for p in counts:
        v = values(p, A, B)
        i = np.unravel_index(int(np.argmax(v)), v.shape)
        if v[i] > best[0]:
            best = (float(v[i]), p, float(A[i]), float(B[i]))
    _, p, a0, b0 = best
    for width in (0.05, 0.002):
        fine_a = np.clip(np.linspace(a0 - width, a0 + width, 81), 0.0, None)
        fine_b = np.clip(np.linspace(b0 - width, b0 + width, 81), 0.0, None)
        A, B = np.meshgrid(fine_a, fine_b, indexing="ij")
        v = values(p, A, B)
        i = np.unravel_index(int(np.argmax(v)), v.shape)
        a0, b0 = float(A[i]), float(B[i])
    return p, a0, b0


def _spread(fmt: Format, total: float, dim: int) -> tuple[Fraction, int]:
    """A format value ``t`` and a count (1 or D) of entries so that ``count t`` is close to
    ``total`` (one entry unless it would not fit in the format)."""
    if total == 0:
        return Fraction(0), 1
    for count in (1, dim):
        if abs(total) / count <= float(fmt.max_finite) / 4:
            return _nearest(fmt, total / count), count
    return _nearest(fmt, total / dim), dim


def _l2_attention(cfg: Config) -> Model:
    r"""L2 attention (``kernels.l2_attention``, Kim et al., tied W^Q = W^K), ``d = D``,
    ``|W| <= w``. Bounds proven here; the witness is a lower bound.

    Column (m, k) of J. With ``q_j = Wq x_j``, ``u = Wq e_k``, ``C = Wv Wq^T / sqrt(d)``,
    ``Y_i = C qbar_i`` (``qbar_i = sum_j P_ij q_j``), perturbing ``x_mk`` moves only
    ``q_m`` (by u) and ``dY_i = C v_i`` with
    ``v_m = (P_mm I + 2 Cov_m) u`` and, for ``i != m``,
    ``v_i = P_im (I + (2/sqrt d)(q_m - qbar_i)(q_i - q_m)^T) u``
    (``Cov_m`` the covariance of the ``z_j = q_j / d^{1/4}`` under row m; the logits are
    ``-|z_i - z_j|^2``). Then ``sum_i ||C v_i||_1 <= (dv D w^2/sqrt d) sqrt d sum_i |v_i|_2``
    (every ``|C_ce| <= D w^2/sqrt d``, ``||v||_1 <= sqrt d |v|_2``) and ``|u|_2 <= sqrt d w``:

    ``column sum <= kappa [P_mm + 2 Var_m + sum_{i != m} P_im (1 + 2 r_i |z_m - zbar_i|)]``,
    ``kappa = dv D sqrt(d) w^3``, ``r_i = |z_i - z_m|``.

    * ``P_mm + 2 Var_m <= (1 + 2 sum_j a_j r_j^2)/(1 + sum_j a_j)`` (``a_j = e^{-r_j^2}``,
      ``Var <= E r^2``), and ``a ln(1/a)`` is concave: at most A = sup over one a of
      ``(1 + 2 n a r^2)/(1 + n a)`` (Jensen at fixed ``sum a_j``).
    * ``|z_m - zbar_i| <= (1 - P_im) r_i + S_i``, ``S_i = sum_{j != i, m} P_ij |z_i - z_j|``
      (triangle inequality through z_i); with ``b_j = e^{-|z_i - z_j|^2}``,
      ``P_im = a_i / (1 + a_i + sum b_j)`` exactly and ``b sqrt(ln 1/b)`` is concave, so each
      term is at most psi = sup over (r, rho) of ``P (1 + 2 r ((1 - P) r + S))``
      (:func:`l2_constants`).

    Hence ``gain_max <= kappa (A + (N - 1) psi)``. At X = 0 (all weights w) the column sum
    is kappa; a search over all weights and inputs (small sizes, evidence) never found more
    than the best two-cluster input on a line with every weight w, used as the witness.

    2-norm: ``dY = C dQbar`` with ``dQbar = Lambda(dQ)``, ``Lambda = P (x) I +
    2 diag(Cov_i) + 2 K``, ``K_ij = P_ij (z_j - zbar_i)(z_i - z_j)^T``;
    ``|P|_2 <= sqrt(1 + (N-1)/2)`` (off-diagonal ``P_ij <= 1/2``), ``|Cov_i| <= e``,
    ``|K| <= sqrt(e (N-1) c1)`` (Schur test on the block norms, row sums <= e by
    Cauchy-Schwarz, column sums <= (N-1) c1), ``|C|_2 |Wq|_2 <= w^3 D sqrt(D d dv)``:
    ``Lip <= w^3 D sqrt(D d dv) (sqrt(1 + (N-1)/2) + 2 e + 2 sqrt(e (N-1) c1))``;
    ``w^3 D sqrt(D d dv)`` is attained at X = 0.

    N = 1: ``Y = x A Wv^T`` is linear, both bounds are attained (``A = 1``, the rest 0).

    Forward: ``|Y_ic| <= max_j |(X B)_jc|``, ``|B_ac| <= D sqrt(d) w^3`` for
    ``B = Wq^T Wq Wv^T / sqrt d``: ``|Y| <= D^2 sqrt(d) w^3 max|x|``, attained at constant
    X with every weight w.
    """
    n, dim, dv = cfg.tokens, cfg.dim, cfg.outputs
    d = dim
    w = _frac(cfg.weight_max)
    consts = l2_constants(n)
    factor = consts["A"] + (n - 1) * consts["psi"]
    kappa_sq = Fraction(dv * dim) ** 2 * d * w**6  # kappa^2
    parameters = f"N = {n}, D = d = {dim}, dv = {dv}, |W_ij| <= {cfg.weight_max:g}"
    if n == 1:
        gain_max = Gain(
            Real.sqrt_of(kappa_sq, "dv D sqrt(d) w^3"),
            "attained at X = 0, every weight w (N = 1: linear)",
        )
        gain_2 = Gain(
            Real.sqrt_of(w**6 * dim**3 * d * dv, "w^3 D sqrt(D d dv)"),
            "attained at every weight w (N = 1: linear)",
        )
        notes: tuple[str, ...] = ()
    else:
        gain_max = Gain(
            Real.sqrt_of(
                kappa_sq * factor * factor,
                f"dv D sqrt(d) w^3 K, K = A + (N-1) psi <= {float(factor):.6g}",
            ),
            f"upper bound, not shown tight (A <= {float(consts['A']):.6g}, psi <= "
            f"{float(consts['psi']):.6g}: {_tol_text()}); at X = 0 the column sum is "
            "dv D sqrt(d) w^3",
            tight=False,
        )
        e, c1 = consts["e"], consts["c1"]

        def lip_ball() -> arb:
            h = (1 + arb(n - 1) / 2).sqrt() + 2 * as_arb(e) + 2 * (as_arb(e * (n - 1) * c1)).sqrt()
            return as_arb(w**3 * dim) * arb(dim * d * dv).sqrt() * h

        gain_2 = Gain(
            Real("w^3 D sqrt(D d dv) (sqrt(1 + (N-1)/2) + 2 e + 2 sqrt(e (N-1) c1))", lip_ball),
            f"upper bound, not shown tight (e <= {float(e):.6g}, c1 <= {float(c1):.6g}); "
            "X = 0 with every weight w gives w^3 D sqrt(D d dv)",
            tight=False,
        )
        notes = ()

    def point(fmt: Format) -> Point | None:
        wf = _down(fmt, cfg.weight_max)
        if wf == 0:
            return None
        return _l2_point(fmt, n, dim, dv, wf)

    return Model(
        title="L2 attention (single head, tied W^Q = W^K)",
        parameters=parameters,
        forward=Forward(
            slope=Real.sqrt_of(Fraction(dim * dim) ** 2 * d * w**6, "D^2 sqrt(d) w^3"),
            growth="linear: |Y| <= max_j |(X Wq^T Wq Wv^T / sqrt d)_j| <= D^2 sqrt(d) w^3 max|x| "
            "(constant X, every weight w)",
        ),
        gain_2=gain_2,
        gain_max=gain_max,
        point=point,
        kernel="l2_attention",
        notes=notes,
    )


def _l2_point(fmt: Format, n: int, dim: int, dv: int, w: Fraction) -> Point:
    """Every weight w; token 0 at 0, p tokens at -a, the others at b (token sums, in units
    of ``1/(w d^{1/4})``), rounded to the format; the exact column gain of column (0, 0)."""
    d = dim
    p, a, b = _l2_cluster_search(n)
    unit = 1.0 / (float(w) * d**0.25)
    ta, count_a = _spread(fmt, a * unit, dim)
    tb, count_b = _spread(fmt, b * unit, dim)
    count = max(count_a, count_b)
    if count != count_a:
        ta = _nearest(fmt, a * unit / count)
    if count != count_b:
        tb = _nearest(fmt, b * unit / count)
    sa, sb = count * ta, count * tb
    kappa = Fraction(dv * dim) * w**3  # times sqrt(d)

    def ball() -> arb:
        c = as_arb(w * w) * arb(d).sqrt()
        total, _ = l2_cluster_column(n, c, sa, sb, p)
        return as_arb(kappa) * arb(d).sqrt() * total

    with precision(256):
        c = as_arb(w * w) * arb(d).sqrt()
        _, terms = l2_cluster_column(n, c, sa, sb, p)
        # Rows: token 0, the p tokens at -a, the N - 1 - p tokens at b.
        counts = (1, p, n - 1 - p)
        row_signs = [_sign(term) if rows else 1.0 for term, rows in zip(terms, counts, strict=True)]
    where = "" if count == 1 else f" spread over all {dim} entries"
    shape = (
        "X = 0"
        if n == 1
        else f"token 0 = 0, {p} tokens with entry sum {-float(sa):.6g} and {n - 1 - p} with "
        f"{float(sb):.6g}{where}"
    )
    if n == 1:  # X = 0: exactly dv D sqrt(d) w^3
        gain = Real.sqrt_of(kappa * kappa * d, "dv D sqrt(d) w^3")
    else:
        gain = Real("dv D sqrt(d) w^3 sum_i |d mu_i/d s_0| at the witness", ball)
    text = f"every weight {float(w):g}; {shape}"
    too_large = unbuilt(_attention_entries(n, dim, dv, 1), _attention_sizes(n, dim, dv))
    if too_large:
        return Point(None, None, (0, 0), gain, text, {}, too_large)
    X = np.zeros((n, dim))
    X[1 : 1 + p, :count] = -float(ta)
    X[1 + p :, :count] = float(tb)
    signs = np.repeat(np.repeat(row_signs, counts)[:, None], dv, axis=1)
    full = np.full((d, dim), float(w))
    arrays = {"X": X, "Wq": full, "Wv": np.full((dv, dim), float(w))}
    return Point(arrays, signs, (0, 0), gain, text)


# --------------------------------------------------------------------------------------------
# Scaled cosine similarity attention
# --------------------------------------------------------------------------------------------


def _best_on(a: arb, b: arb, cap: arb) -> arb:
    """An upper bound of ``max_{0 <= P <= cap} P (a (1 - P) + b)`` (a, b >= 0, cap <= 1):
    ``g(cap)`` when the vertex ``(a + b)/(2a)`` is surely past the cap (g increases up to
    it), the vertex value ``(a + b)^2 / (4a)`` when it surely lies before the cap, else the
    smaller of the two upper bounds ``cap (a + b)`` and ``(a + b)^2 / (4a)``."""
    past = _value(a * (1 - 2 * cap) + b)
    if past > 0:
        return cap * (a * (1 - cap) + b)
    if past < 0:  # then a > 0 and the vertex lies inside [0, cap)
        return (a + b) * (a + b) / (4 * a)
    a, b, cap = _value(a), _value(b), _value(cap)
    bound = (cap * (a + b)).upper()
    if a > 0:
        bound = bound.min(((a + b) * (a + b) / (4 * a)).upper())
    return _Dual(bound, None)


@lru_cache(maxsize=64)
def scs_constant(n_tokens: int, tau: Fraction, d: int, dv: int) -> Fraction:
    r"""A rigorous upper bound of ``sqrt(eps) / (|nu| w) * sup max_j sum_i |J_ij|`` for SCS
    attention with ``|tau| <= tau``, N = ``n_tokens`` >= 2 (derivation in
    :func:`_scs_attention`): the branch and bound over the norms
    ``(rho_q, rho_k, rho_v) in [0, 1]^3`` (as ``2 u/(1 + u^2)``, u in [0, 1]) of the column
    token's normalized q, k, v of

    ``(N - 1) h(A, B, p_i) + s sqrt(1 - rho_q^2) + h(A', B, p_m)`` with ``s = tau sqrt(d dv)``,
    ``A = s sqrt(1 - rho_k^2)(1 + rho_v)``, ``A' = rho_q A``, ``B = dv sqrt(1 - rho_v^2)``,
    ``p_i = 1/(1 + (N-1) e^{-tau (1 + rho_k)})``,
    ``p_m = 1/(1 + (N-1) e^{-tau rho_q (1 + rho_k)})``,
    ``h(a, b, cap) = max_{0 <= P <= cap} P (a (1 - P) + b)``.
    """
    n = n_tokens
    with precision(BB_PREC):
        t = as_arb(tau)
        s = t * arb(d * dv).sqrt()

    def total(v: Sequence[arb]) -> arb:
        # rho = 2 u/(1 + u^2), sqrt(1 - rho^2) = (1 - u^2)/(1 + u^2), u in [0, 1]: smooth up
        # to rho = 1.
        (rq, root_q), (rk, root_k), (rv, root_v) = (
            (2 * u / (1 + u * u), (1 - u * u) / (1 + u * u)) for u in v
        )
        a = s * root_k * (1 + rv)
        b = dv * root_v
        cap_i = 1 / (1 + (n - 1) * (-t * (1 + rk)).exp())
        cap_m = 1 / (1 + (n - 1) * (-t * rq * (1 + rk)).exp())
        return (n - 1) * _best_on(a, b, cap_i) + s * root_q + _best_on(rq * a, b, cap_m)

    return sup_upper(total, [(0.0, 1.0)] * 3)


def scs_column(
    n_tokens: int,
    m_values: tuple[Fraction, Fraction, Fraction],
    o_values: tuple[Fraction, Fraction, Fraction],
    slopes: tuple[int, int, int],
    w: Fraction,
    d: int,
    dv: int,
    nu: Fraction,
    tau: Fraction,
    eps: Fraction,
) -> tuple[arb, arb, arb]:
    r"""``(column sum, dy_m, dy_o)`` of SCS attention at a rank-one witness, exactly (arb).

    Weights ``Wq = w 1_d a_q^T``, ``Wk = w 1_d a_k^T``, ``Wv = w 1_dv a_v^T``; token j has
    functionals ``(alpha_j, beta_j, gamma_j) = (a_q.x_j, a_k.x_j, a_v.x_j)``: ``m_values`` for
    the column's token m, ``o_values`` for each of the N - 1 identical others; ``slopes`` is
    ``(a_q[k], a_k[k], a_v[k])`` for the column's coordinate k. Then
    ``q~_j = phi_j 1_d/sqrt d`` with ``phi_j = w sqrt(d) alpha_j / sqrt(w^2 d alpha_j^2 + eps)``
    (likewise psi_j from beta with d, chi_j from gamma with dv), the logits are
    ``tau phi_i psi_j`` and ``Y_i = nu (sum_j P_ij chi_j) 1_dv/sqrt dv``. Perturbing
    ``x_mk`` moves ``phi_m`` by ``a_q[k] w sqrt(d) eps / r^3`` (r the normalizer; likewise
    psi_m, chi_m), and with ``P_om``, ``P_mm`` the two distinct attention weights on m:

    ``dy_o = nu P_om (tau phi_o dpsi_m (1 - P_om)(chi_m - chi_o) + dchi_m)``,
    ``dy_m = nu (P_mm (1 - P_mm)(chi_m - chi_o) tau (dphi_m (psi_m - psi_o) + phi_m dpsi_m)
    + P_mm dchi_m)``; the column sum is ``sqrt(dv) ((N - 1)|dy_o| + |dy_m|)``.
    """
    n = n_tokens
    wa = as_arb(w)
    rd, rdv = arb(d).sqrt(), arb(dv).sqrt()
    e = as_arb(eps)

    def normalized(value: Fraction, width: arb) -> tuple[arb, arb]:
        """(the normalized value, its derivative per unit of the functional)."""
        x = wa * width * as_arb(value)
        r2 = x * x + e
        r = r2.sqrt()
        return x / r, wa * width * e / (r2 * r)

    phi_m, dphi = normalized(m_values[0], rd)
    psi_m, dpsi = normalized(m_values[1], rd)
    chi_m, dchi = normalized(m_values[2], rdv)
    phi_o, _ = normalized(o_values[0], rd)
    psi_o, _ = normalized(o_values[1], rd)
    chi_o, _ = normalized(o_values[2], rdv)
    dphi, dpsi, dchi = slopes[0] * dphi, slopes[1] * dpsi, slopes[2] * dchi
    t, v = as_arb(tau), as_arb(nu)
    if n == 1:
        dy_m = v * dchi
        return rdv * abs(dy_m), dy_m, arb(0)
    p_om = 1 / (1 + (n - 1) * (t * phi_o * (psi_o - psi_m)).exp())
    p_mm = 1 / (1 + (n - 1) * (t * phi_m * (psi_o - psi_m)).exp())
    gap = chi_m - chi_o
    dy_o = v * p_om * (t * phi_o * dpsi * (1 - p_om) * gap + dchi)
    dy_m = v * (p_mm * (1 - p_mm) * gap * t * (dphi * (psi_m - psi_o) + phi_m * dpsi) + p_mm * dchi)
    return rdv * ((n - 1) * abs(dy_o) + abs(dy_m)), dy_m, dy_o


def _scs_reduced(
    values: np.ndarray, slopes: np.ndarray, n: int, tau: float, d: int, dv: int
) -> np.ndarray:
    """Float64 :func:`scs_column` per unit ``nu w / sqrt(eps)``, vectorized over rows of
    ``values = (phi_m, psi_m, chi_m, phi_o, psi_o, chi_o)`` in [-1, 1]."""
    fm, pm, cm, fo, po, co = values.T
    dphi = slopes[0] * math.sqrt(d) * (1 - fm * fm) ** 1.5
    dpsi = slopes[1] * math.sqrt(d) * (1 - pm * pm) ** 1.5
    dchi = slopes[2] * math.sqrt(dv) * (1 - cm * cm) ** 1.5
    p_om = 1 / (1 + (n - 1) * np.exp(tau * fo * (po - pm)))
    p_mm = 1 / (1 + (n - 1) * np.exp(tau * fm * (po - pm)))
    gap = cm - co
    dy_o = p_om * (tau * fo * dpsi * (1 - p_om) * gap + dchi)
    dy_m = p_mm * (1 - p_mm) * gap * tau * (dphi * (pm - po) + fm * dpsi) + p_mm * dchi
    return math.sqrt(dv) * ((n - 1) * np.abs(dy_o) + np.abs(dy_m))


def _rewidth(p: np.ndarray, ratio: float) -> np.ndarray:
    """The normalized value ``f(ratio f^{-1}(p))`` (``f(x) = x/sqrt(1 + x^2)``): the same
    functional normalized with another width (``sqrt(dv)`` instead of ``sqrt(d)``)."""
    p = np.clip(p, -1 + 1e-12, 1 - 1e-12)
    x = ratio * p / np.sqrt(1 - p * p)
    return x / np.sqrt(1 + x * x)


def _scs_families(dim: int, d: int, dv: int) -> list[tuple[tuple[int, int, int], int, Callable]]:
    """The witness families: ``(slopes, k, values)`` with ``values(P)`` mapping k free
    parameters in [-1, 1] per token to its ``(phi, psi, chi)``.

    D >= 3: three independent functionals, ``(phi, psi, chi) = P``. D = 2: ``a_q = (1, 1)``,
    ``a_k = (1, -1)`` and ``a_v = sigma a_k`` or ``sigma a_q``, so chi is psi or phi
    re-normalized with width ``sqrt(dv)``, times sigma. D = 1: one functional with signs
    ``(s_q, s_k, s_v)`` (all weights +-w)."""
    ratio = math.sqrt(dv / d)
    if dim >= 3:
        return [((1, 1, 1), 3, lambda P: (P[:, 0], P[:, 1], P[:, 2]))]
    if dim == 2:
        out = []
        for sigma in (1, -1):
            out.append(
                (
                    (1, 1, sigma),
                    2,
                    lambda P, s=sigma: (P[:, 0], P[:, 1], s * _rewidth(P[:, 1], ratio)),
                )
            )
            out.append(
                (
                    (1, 1, sigma),
                    2,
                    lambda P, s=sigma: (P[:, 0], P[:, 1], s * _rewidth(P[:, 0], ratio)),
                )
            )
        return out
    out = []
    for sq in (1, -1):
        for sk in (1, -1):
            for sv in (1, -1):
                out.append(
                    (
                        (sq, sk, sv),
                        1,
                        lambda P, a=sq, b=sk, c=sv: (
                            a * P[:, 0],
                            b * P[:, 0],
                            c * _rewidth(P[:, 0], ratio),
                        ),
                    )
                )
    return out


@lru_cache(maxsize=64)
def _scs_search(n: int, tau: float, dim: int, dv: int) -> tuple[int, np.ndarray, np.ndarray]:
    """``(family index, parameters of token m, parameters of the others)`` of the best
    witness found in :func:`_scs_families`: a seeded random search, then a local
    refinement, in float64 (the witness's shape only; its gain is computed exactly)."""
    d = dim
    rng = np.random.default_rng(20240607)
    best: tuple[float, int, np.ndarray] = (-1.0, 0, np.zeros(2))
    for index, (slopes, k, values) in enumerate(_scs_families(dim, d, dv)):
        signs = np.array(slopes)

        def score(
            P: np.ndarray, values: Callable = values, k: int = k, signs: np.ndarray = signs
        ) -> np.ndarray:
            vm, vo = values(P[:, :k]), values(P[:, k:])
            return _scs_reduced(np.stack([*vm, *vo], axis=1), signs, n, tau, d, dv)

        raw = rng.uniform(-1, 1, (6000 * k, 2 * k))
        raw = np.where(rng.random(raw.shape) < 0.3, np.sign(raw) * (1 - 1e-9), raw)
        scores = score(raw)
        for start in raw[np.argsort(scores)[-4:]]:
            x, fx, step = start, float(score(start[None])[0]), 0.2
            for _ in range(40):
                trial = np.clip(x + step * rng.standard_normal((48, 2 * k)), -1.0, 1.0)
                vals = score(trial)
                j = int(np.argmax(vals))
                if vals[j] > fx:
                    x, fx = trial[j], float(vals[j])
                else:
                    step *= 0.6
            if fx > best[0]:
                best = (fx, index, x)
    _, index, x = best
    k = _scs_families(dim, d, dv)[index][1]
    return index, x[:k], x[k:]


def _scs_attention(cfg: Config) -> Model:
    r"""Scaled cosine similarity attention (``kernels.scs_attention``, LipsFormer), ``d = D``,
    ``|W| <= w``, ``|nu| <= nu_max``, ``|tau| <= tau_max``, ``eps > 0``. Bounds proven here;
    the witness is a lower bound.

    Column (m, k) of J. Perturbing ``x_mk`` moves ``q_m, k_m, v_m`` by the k-th columns
    ``u_q, u_k, u_v`` of the weights (``|u_q|_2, |u_k|_2 <= sqrt(d) w``,
    ``|u_v|_2 <= sqrt(dv) w``), and the normalized rows by ``Dg u``, where
    ``|Dg(q)|_2 = 1/r = sqrt(1 - rho^2)/sqrt(eps)`` with ``rho = |q~| < 1`` (the eigenvalues
    of ``Dg = (I - q q^T/r^2)/r`` are 1/r and eps/r^3; proofs/attention.py,
    scs_printed_holds). With ``rho_q, rho_k, rho_v`` those norms for token m:

    * ``i != m``: ``dY_i = nu P_im (tau (q~_i . dk~_m)(v~_m - vbar_i) + dv~_m)``, and
      ``v~_m - vbar_i = sum_{j != m} P_ij (v~_m - v~_j)`` has norm ``<= (1 - P_im)(1 + rho_v)``;
      the logit on m is at most ``tau rho_k``, the others at least ``-tau``, so
      ``P_im <= p_i``. With ``||.||_1 <= sqrt(dv) |.|_2``:
      ``||dY_i||_1 <= nu w/sqrt(eps) P_im (A (1 - P_im) + B)``.
    * ``i = m``: ``dY_m = nu (tau sum_j P_mj (dq~_m . k~_j)(v~_j - vbar_m) + tau P_mm
      (q~_m . dk~_m)(v~_m - vbar_m) + P_mm dv~_m)``; the first sum is at most
      ``|dq~_m| sqrt(Var_m(v~)) <= |dq~_m|`` (Cauchy-Schwarz, ``|v~_j| < 1``), the rest as
      above with ``|q~_m| = rho_q`` and ``P_mm <= p_m``.

    Summing gives :func:`scs_constant` times ``|nu| w / sqrt(eps)``, maximized over the
    three norms by branch and bound. N = 1: ``Y = nu v~_1`` and the gain is exactly
    ``|nu| dv w / sqrt(eps)``, attained at X = 0.

    The witness: rank-one weights ``w 1 a^T`` with three independent sign vectors
    ``a_q, a_k, a_v`` (D >= 3; D = 2: two, the third tied to one of them; D = 1: all weights
    +-w), the column token's (q~, k~, v~) and the N - 1 identical other tokens' chosen by a
    search over :func:`scs_column` (:func:`_scs_families`). Hill climbing over general
    weights and inputs (N = 3 and 4, D = 3, tau = 1: evidence) found smaller column sums
    than this family's witness.

    2-norm: ``Lip <= nu eps^{-1/2} ((N/2) tau (|Wq|_2 + |Wk|_2) + sqrt(N) |Wv|_2)``
    (proofs/attention.py, derived_scs_bound) with ``|W|_2 <= w sqrt(rows D)``.

    Forward: ``|Y_ic| <= |nu| max_j |v~_jc| < |nu|``, approached when every v_j grows along
    one axis.
    """
    n, dim, dv = cfg.tokens, cfg.dim, cfg.outputs
    d = dim
    w, nu = _frac(cfg.weight_max), _frac(cfg.nu_max)
    tau = _frac(cfg.tau_max)
    eps = _frac(1e-6 if cfg.eps is None else cfg.eps)
    if eps == 0:
        raise ValueError(
            "eps: must be > 0 for SCS attention (with eps = 0 the gain is unbounded near q_i = 0)"
        )
    scale_sq = nu * nu * w * w / eps  # (|nu| w / sqrt(eps))^2
    parameters = (
        f"N = {n}, D = d = {dim}, dv = {dv}, |W_ij| <= {cfg.weight_max:g}, |nu| <= "
        f"{cfg.nu_max:g}, |tau| <= {float(tau):g}, eps = {float(eps):g} (added to |q|^2)"
    )
    if n == 1:
        gain_max = Gain(
            Real.sqrt_of(scale_sq * dv * dv, "|nu| dv w / sqrt(eps)"),
            "attained at X = 0, Wv = w (N = 1: Y = nu v~)",
        )
        gain_2 = Gain(
            Real.sqrt_of(scale_sq * dv * dim, "|nu| w sqrt(dv D) / sqrt(eps)"),
            "attained at X = 0, Wv = w",
        )
        notes: tuple[str, ...] = ()
    else:
        constant = scs_constant(n, tau, d, dv)
        gain_max = Gain(
            Real.sqrt_of(
                scale_sq * constant * constant, f"|nu| w K / sqrt(eps), K <= {float(constant):.6g}"
            ),
            f"upper bound, not shown tight ({_tol_text()} over the column token's |q~|, "
            "|k~|, |v~|)",
            tight=False,
        )

        def lip_ball() -> arb:
            inner = n * as_arb(tau) * arb(d).sqrt() + arb(n * dv).sqrt()
            return as_arb(nu * w) * arb(dim).sqrt() * inner / as_arb(eps).sqrt()

        gain_2 = Gain(
            Real("|nu| w sqrt(D) (N tau sqrt(d) + sqrt(N dv)) / sqrt(eps)", lip_ball),
            "upper bound, not shown tight (derived_scs_bound, proofs/attention.py, with "
            "|W|_2 <= w sqrt(rows D)); X = 0 gives |nu| w sqrt(dv D) / sqrt(eps)",
            tight=False,
        )
        notes = ()

    def point(fmt: Format) -> Point | None:
        wf, nf, tf = _down(fmt, cfg.weight_max), _down(fmt, cfg.nu_max), _down(fmt, float(tau))
        if wf == 0 or nf == 0:
            return None
        return _scs_point(fmt, n, dim, dv, wf, nf, tf, eps)

    return Model(
        title="SCS attention (single head, scaled cosine similarity)",
        parameters=parameters,
        forward=Forward(
            sup=Real.rational(nu, "|nu|"),
            reached="approached when every v_j grows along one axis, never reached (eps > 0)",
        ),
        gain_2=gain_2,
        gain_max=gain_max,
        point=point,
        kernel="scs_attention",
        notes=notes,
    )


def _scs_inverse(fmt: Format, value: float, width: float, w: Fraction, eps: Fraction) -> float:
    """The functional value whose normalization is ``value`` (|value| < 1), capped so that
    the witness's entries stay well inside the format."""
    cap = float(fmt.max_finite) / 16
    value = max(min(value, 1 - 1e-9), -1 + 1e-9)
    raw = value * math.sqrt(float(eps)) / (float(w) * width * math.sqrt(1 - value * value))
    return max(min(raw, cap), -cap)


def _scs_point(
    fmt: Format, n: int, dim: int, dv: int, w: Fraction, nu: Fraction, tau: Fraction, eps: Fraction
) -> Point:
    """The best witness of :func:`_scs_families` (X = 0 for N = 1), rounded to the format,
    with its exact column gain (:func:`scs_column`) in column (0, 0)."""
    d = dim
    # X is zero beyond its first three columns, and the N - 1 tokens after token 0 are
    # equal: the witness is its rows' first ``head`` entries and the weights' sign vectors'.
    head = min(dim, 3)
    row_m, row_o = np.zeros(head), np.zeros(head)
    root_d = math.sqrt(d)
    ones = np.ones(head)
    if n == 1:
        a_q = a_k = a_v = ones
        description = "every weight w, X = 0"
    else:
        index, pm, po = _scs_search(n, float(tau), dim, dv)
        slopes = _scs_families(dim, d, dv)[index][0]

        def inverse(value: float) -> float:
            return _scs_inverse(fmt, value, root_d, w, eps)

        if dim >= 3:
            a_q, a_k, a_v = ones.copy(), ones.copy(), ones.copy()
            a_k[1] = a_v[2] = -1
            for row, params in ((row_m, pm), (row_o, po)):
                al, be = inverse(params[0]), inverse(params[1])
                ga = _scs_inverse(fmt, params[2], math.sqrt(dv), w, eps)
                # a_q.x = al, a_k.x = be, a_v.x = ga on the first three coordinates.
                row[:] = [
                    float(_nearest(fmt, v)) for v in ((be + ga) / 2, (al - be) / 2, (al - ga) / 2)
                ]
            description = "rank-one weights w 1 a^T, a_q = 1, a_k = 1 - 2 e_1, a_v = 1 - 2 e_2"
        elif dim == 2:
            a_q, a_k = np.array([1.0, 1.0]), np.array([1.0, -1.0])
            a_v = slopes[2] * (a_k if index % 2 == 0 else a_q)
            for row, params in ((row_m, pm), (row_o, po)):
                al, be = inverse(params[0]), inverse(params[1])
                row[:] = [float(_nearest(fmt, v)) for v in ((al + be) / 2, (al - be) / 2)]
            description = f"weights w 1 a^T, a_q = (1, 1), a_k = (1, -1), a_v = {a_v.tolist()}"
        else:
            a_q, a_k, a_v = (np.array([float(v)]) for v in slopes)
            row_m[0] = float(_nearest(fmt, inverse(pm[0])))
            row_o[0] = float(_nearest(fmt, inverse(po[0])))
            description = f"weights {float(w):g} times {slopes} (Wq, Wk, Wv)"

    def functionals(row: np.ndarray) -> tuple[Fraction, Fraction, Fraction]:
        exact = [Fraction(float(v)) for v in row]
        return tuple(  # type: ignore[return-value]
            sum((Fraction(float(a)) * x for a, x in zip(vec, exact, strict=True)), Fraction(0))
            for vec in (a_q, a_k, a_v)
        )

    m_values = functionals(row_m)
    o_values = functionals(row_o) if n > 1 else m_values
    column_slopes = (int(a_q[0]), int(a_k[0]), int(a_v[0]))

    def column() -> tuple[arb, arb, arb]:
        return scs_column(n, m_values, o_values, column_slopes, w, d, dv, nu, tau, eps)

    with precision(256):
        _, dy_m, dy_o = column()
        sign_m, sign_o = _sign(dy_m), (_sign(dy_o) if n > 1 else 0.0)
    others = f", the other {n - 1} tokens {row_o.tolist()}" if n > 1 else ""
    if n == 1:  # X = 0: exactly |nu| dv w / sqrt(eps)
        gain = Real.sqrt_of((nu * dv * w) ** 2 / eps, "|nu| dv w / sqrt(eps)")
    else:
        gain = Real("sqrt(dv) sum_i |dy_i| at the witness", lambda: column()[0])
    text = (
        f"{description}; token 0 starts {row_m.tolist()}{others}; nu = {float(nu):g}, "
        f"tau = {float(tau):g}"
    )
    options = {"nu": float(nu), "tau": float(tau), "eps": float(eps)}
    too_large = unbuilt(_attention_entries(n, dim, dv, 2), _attention_sizes(n, dim, dv))
    if too_large:
        return Point(None, None, (0, 0), gain, text, options, too_large)
    X = np.zeros((n, dim))
    X[0, :head] = row_m
    X[1:, :head] = row_o

    def weights(rows: int, prefix: np.ndarray) -> np.ndarray:
        return float(w) * np.outer(np.ones(rows), np.concatenate([prefix, np.ones(dim - head)]))

    signs = np.full((n, dv), sign_o)
    signs[0] = sign_m
    arrays = {"X": X, "Wq": weights(d, a_q), "Wk": weights(d, a_k), "Wv": weights(dv, a_v)}
    return Point(arrays, signs, (0, 0), gain, text, options)


#: The models of this file, by ``liptable envelope`` name (imported by ``derive.envelope.modules``).
MORE_MODELS: dict[str, Callable[[Config], Model]] = {
    "conv2d": _conv2d,
    "dp_attention": _dp_attention,
    "l2_attention": _l2_attention,
    "scs_attention": _scs_attention,
}
