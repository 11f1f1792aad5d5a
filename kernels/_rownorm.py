"""Dispatch of the generated row-normalization loops (LayerNorm, RMSNorm, CenterNorm).

Checks the arguments (SPEC, "Bad input"), flattens ``x`` of shape (..., D) to rows, picks
the loop for the dtype and float16 mode, and restores the shape. The loops live in
``kernels/_generated/<key>.py``:

- float64 arrays run the ``_f64`` loops (compensated row sums, in :data:`SUM_LANES` lanes
  by :func:`add_to_lane` and :func:`lanes_total`, so that they vectorize);
- float32 arrays run the ``_wide`` loops (float64 arithmetic) and store into float32, a
  single rounding;
- float16 arrays ("mixed" mode, the default) run the same ``_wide`` loops, x and g as
  their bit patterns (``uint16``): :func:`widen` takes each entry exactly to float64 as it
  is read, and :func:`narrow` rounds each result once, from float64 to half, as it is
  stored (no widened copies of x and g, no float64 result buffers); a half result is inf
  only when the exact result rounds to inf. The widening takes the processor's half
  instructions where it has them (``kernels.cast.half_to_float64``). The Jacobian widens
  to float32 and rounds its float64 result once. The ``wide`` loops get gamma and beta (D
  values each) widened exactly to float64 in advance, so no row converts them again;
- float16 with ``strict_fp16=True`` run the ``_f16s`` loops, every operation rounded to
  half (eps too, before use), serially; bfloat16 with ``strict_fp16=True`` the ``_bf16s``
  loops, the same operations rounded to bfloat16, on the values widened exactly to float64
  (bfloat16 in mixed mode reaches the ``_f64`` loops widened, through
  ``kernels._strict.bfloat16_kernel``).

It also holds the branch-free twins of ``kernels._dd``'s TwoSum and pair arithmetic
(:func:`two_sum_select`, :func:`dd_add_select`, :func:`dd_mul_select`,
:func:`dd_div_select`): the same operations where ``_dd``'s branches take no other path,
so that the loops calling them vectorize (the row norms, average pooling, BatchNorm's and
Softmax's float64 loops).
"""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
from numba import njit, types
from numba.extending import overload
from numpy.typing import ArrayLike

from kernels._dd import two_sum
from kernels._f16 import float64_to_half_bits, half_bits_to_float64
from kernels._grain import loop_for
from kernels._strict import is_bfloat16
from kernels._strict import narrow as narrow_strict
from kernels._validate import eps_value, float_array, strict_mode
from kernels.cast import half_to_float32, half_to_float64
from kernels.cast import widen as widen_array

#: Lanes of the float64 path's compensated row sums (``add_to_lane``): lane k adds the
#: entries k, k + 64, ..., so the running sums are independent and LLVM vectorizes them
#: (as Softmax's lanes; with 8 lanes, or one running sum, it did not).
SUM_LANES = 64


@njit(cache=True, inline="always", error_model="numpy")
def two_sum_select(a, b):
    """``kernels._dd.two_sum`` without its branch: ``(s, e)`` with ``s = fl(a + b)`` and
    ``e`` its exact error (Knuth), or 0 where ``s`` is not finite, as there; the same
    values, by a select, so that loops calling it vectorize."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e if abs(s) < math.inf else 0.0


#: Veltkamp's splitting constant 2^27 + 1 (``kernels._dd``'s, for :func:`dd_mul_select`).
_SPLITTER = 134217729.0


@njit(cache=True, inline="always", error_model="numpy")
def dd_add_select(ah, al, bh, bl):
    """``kernels._dd.dd_add`` for finite pairs whose sum is finite: the same operations
    (two TwoSums, two of Dekker's quick ones), without its branches, which take no other
    path there; so loops calling it vectorize."""
    s, e = two_sum_select(ah, bh)
    t, f = two_sum_select(al, bl)
    e += t
    h = s + e
    e = e - (h - s)
    e += f
    s = h + e
    return s, e - (s - h)


@njit(cache=True, inline="always", error_model="numpy")
def dd_mul_select(ah, al, bh, bl):
    """``kernels._dd.dd_mul`` for pairs whose leading parts are below 2^996 in magnitude
    and whose product is finite: the same operations (Dekker's product, Veltkamp's split),
    without its branches, which take no other path there."""
    p = ah * bh
    t = _SPLITTER * ah
    a1 = t - (t - ah)
    a2 = ah - a1
    t = _SPLITTER * bh
    b1 = t - (t - bh)
    b2 = bh - b1
    e = ((a1 * b1 - p) + a1 * b2 + a2 * b1) + a2 * b2
    e += ah * bl + al * bh
    s = p + e
    return s, e - (s - p)


@njit(cache=True, inline="always", error_model="numpy")
def dd_div_select(ah, al, bh, bl):
    """``kernels._dd.dd_div`` for ``ah >= 0`` and ``bh >= 1``, finite pairs below 2^996 in
    magnitude (the weights ``e_j / s`` of a softmax row): the same operations (three
    quotients, each remainder by :func:`dd_mul_select` and :func:`dd_add_select`), without
    the branch for a zero quotient, which gives +0 (and a zero low part) here too."""
    q1 = ah / bh
    ph, pl = dd_mul_select(q1, 0.0, bh, bl)
    rh, rl = dd_add_select(ah, al, -ph, -pl)
    q2 = rh / bh
    ph, pl = dd_mul_select(q2, 0.0, bh, bl)
    rh, rl = dd_add_select(rh, rl, -ph, -pl)
    q3 = rh / bh
    s = q1 + q2
    return dd_add_select(s, q2 - (s - q1), q3, 0.0)


@njit(cache=True, inline="always", error_model="numpy")
def add_to_lane(lanes, k, v):
    """Lane k of ``lanes`` (shape (2, SUM_LANES): the sums, and their errors) plus ``v``:
    the sum by :func:`two_sum_select`, its error added to ``lanes[1, k]``."""
    s, e = two_sum_select(lanes[0, k], v)
    lanes[0, k] = s
    lanes[1, k] += e


@njit(cache=True, error_model="numpy")
def lanes_total(lanes):
    """``(hi, lo)``: the lanes' sums added in lane order by TwoSum, ``lo`` every error, the
    lanes' own included; ``hi + lo`` is the sum of every value added, compensated."""
    hi, lo = 0.0, 0.0
    for k in range(SUM_LANES):
        hi, e = two_sum(hi, lanes[0, k])
        lo += e + lanes[1, k]
    return hi, lo


def widen(value):
    """The float64 value of an array entry: a float, or the bits of a half (``uint16``).

    Exact either way; the generated loops read every entry through it, so one loop serves
    float arrays and the bit patterns of float16 arrays (``x.view(np.uint16)``).
    """
    if isinstance(value, np.uint16):
        return float(half_bits_to_float64(int(value)))
    return float(value)


def narrow(value, out):
    """``value`` (a float64) as stored into ``out``: unchanged for a float array (the
    store rounds it once), its half bits, rounded to nearest even, for a ``uint16`` array.
    """
    if out.dtype == np.uint16:
        return float64_to_half_bits(value)
    return value


@overload(widen)
def _widen(value):
    if isinstance(value, types.Float):
        return lambda value: np.float64(value)
    if value == types.uint16:
        return lambda value: half_to_float64(value)
    return None


@overload(narrow)
def _narrow(value, out):
    if isinstance(out, types.Array) and out.dtype == types.uint16:
        return lambda value, out: float64_to_half_bits(value)
    if isinstance(out, types.Array) and isinstance(out.dtype, types.Float):
        return lambda value, out: value
    return None


def row_buffer(rows):
    """Scratch for :func:`read_row` (one per parallel iteration): a float32 row for the bits
    of halves; float rows need none (the first row stands in, never written)."""
    if rows.dtype == np.uint16:
        return np.empty(rows.shape[1], np.float32)
    return rows[0]


def read_row(row, buffer):
    """A row the loops can read repeatedly at float speed: a float row itself; the bits of
    halves widened exactly into ``buffer`` (float32), once, where every later pass over the
    row would otherwise convert each half again."""
    if row.dtype == np.uint16:
        for j in range(row.size):
            buffer[j] = half_to_float32(row[j])
        return buffer
    return row


@overload(row_buffer)
def _row_buffer(rows):
    if rows.dtype == types.uint16:
        return lambda rows: np.empty(rows.shape[1], np.float32)
    return lambda rows: rows[0]


@overload(read_row)
def _read_row(row, buffer):
    if row.dtype == types.uint16:

        def widened(row, buffer):
            for j in range(row.size):
                buffer[j] = half_to_float32(row[j])
            return buffer

        return widened
    return lambda row, buffer: row


def parameter(value: ArrayLike, name: str, x: np.ndarray, size: int) -> np.ndarray:
    """A per-feature parameter: shape (size,), x's dtype, C-contiguous."""
    array = float_array(value, name, bfloat16=True)
    if array.shape != (size,):
        raise ValueError(
            f"{name}: expected shape ({size},) (the last axis of x), got {array.shape}"
        )
    if array.dtype != x.dtype:
        raise TypeError(f"{name}: expected dtype {x.dtype} (the dtype of x), got {array.dtype}")
    return np.ascontiguousarray(array)


class Prepared:
    """Checked arguments of one call: rows of x, parameters, eps and the path to run."""

    def __init__(
        self,
        x: ArrayLike,
        gamma: ArrayLike,
        beta: ArrayLike | None,
        eps: object,
        min_size: int,
        strict_fp16: object,
        title: str,
    ):
        x = float_array(x, "x", bfloat16=True)
        if x.ndim == 0:
            raise ValueError("x: expected shape (..., D), got a 0-d array")
        size = x.shape[-1]
        if size < min_size:
            raise ValueError(f"x: {title} needs D >= {min_size} on the last axis, got D = {size}")
        self.x = x
        self.size = size
        self.strict = strict_mode(strict_fp16, x.dtype)
        self.bf = is_bfloat16(x)
        if self.bf and not self.strict:
            raise TypeError("x: bfloat16 reaches this path in strict mode only (bfloat16_kernel)")
        self.gamma = parameter(gamma, "gamma", x, size)
        self.has_beta = beta is not None
        self.beta = (
            parameter(beta, "beta", x, size) if beta is not None else np.zeros(size, x.dtype)
        )
        self.eps = eps_value(eps)
        self.rows = np.ascontiguousarray(x).reshape(-1, size)

    @property
    def path(self) -> str:
        if self.x.dtype == np.float64:
            return "f64"
        if self.strict:
            return "bf16s" if self.bf else "f16s"
        return "wide"

    def compute_dtype(self) -> np.dtype:
        """What the loops read: float64, float32 (also for mixed half) or float64 holding
        the 16-bit values (strict)."""
        if self.strict:
            return np.dtype(np.float64)
        if self.x.dtype == np.float16:
            return np.dtype(np.float32)
        return self.x.dtype

    def loop_eps(self) -> float:
        """eps as the loops use it: rounded to the 16-bit format in strict mode (float16:
        inf from 65520 on, as half arithmetic gives, without NumPy's overflow warning)."""
        return narrow_strict(self.eps, self.bf) if self.strict else self.eps

    def widen(self, array: np.ndarray) -> np.ndarray:
        return widen_array(array, self.compute_dtype())

    def result_buffer(self, shape: tuple[int, ...]) -> np.ndarray:
        """16-bit results are computed into float64 and rounded once afterwards (exactly, in
        strict mode)."""
        wide = self.x.dtype == np.float16 or self.bf
        return np.empty(shape, np.float64 if wide else self.x.dtype)

    @property
    def mixed_half(self) -> bool:
        return self.x.dtype == np.float16 and not self.strict

    def loop_input(self, array: np.ndarray) -> np.ndarray:
        """What the row loops read of x and g: the bits of a mixed-mode half array (read
        through ``widen``), otherwise :meth:`widen`."""
        if self.mixed_half:
            return np.ascontiguousarray(array).view(np.uint16)
        return self.widen(array)

    def loop_parameter(self, array: np.ndarray) -> np.ndarray:
        """A parameter as the row loops read it: in float64 (exact) for the float64
        arithmetic of the ``wide`` path, so no row converts it again; else :meth:`widen`."""
        if self.path == "wide":
            return np.ascontiguousarray(array, dtype=np.float64)
        return self.widen(array)

    def loop_output(self, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """``(result, what the row loops store into)``: a mixed-mode half result takes the
        halves' bits (``narrow`` rounds each value once), otherwise :meth:`result_buffer`."""
        if self.mixed_half:
            result = np.empty(shape, np.float16)
            return result, result.view(np.uint16)
        result = self.result_buffer(shape)
        return result, result

    def finish(self, values: np.ndarray) -> np.ndarray:
        """Round once to x's dtype; an overflow to inf is a result, not a warning."""
        with np.errstate(over="ignore"):
            return values.astype(self.x.dtype, copy=False)


def forward(generated: ModuleType, prepared: Prepared) -> np.ndarray:
    """y for every row, in x's shape and dtype."""
    p = prepared
    out, stored = p.loop_output(p.rows.shape)
    loop = loop_for(getattr(generated, f"forward_{p.path}"), p.rows.size)
    gamma, beta = p.loop_parameter(p.gamma), p.loop_parameter(p.beta)
    loop(p.loop_input(p.rows), gamma, beta, p.loop_eps(), stored)
    return p.finish(out).reshape(p.x.shape)


def vjp(
    generated: ModuleType, prepared: Prepared, g: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(dx, dgamma, dbeta) for the upstream gradient g (dbeta None without beta)."""
    p = prepared
    g = float_array(g, "g", bfloat16=True)
    if g.shape != p.x.shape:
        raise ValueError(f"g: expected shape {p.x.shape} (the shape of x), got {g.shape}")
    if g.dtype != p.x.dtype:
        raise TypeError(f"g: expected dtype {p.x.dtype} (the dtype of x), got {g.dtype}")
    rows = p.rows.shape[0]
    blocks = -(-rows // generated.BLOCK_ROWS)
    # per block: the partial sums, and their compensations (read by the f64 path only)
    parts = 2 if p.path == "f64" else 1
    dgamma_blocks = np.zeros((blocks, parts, p.size))
    dbeta_blocks = np.zeros((blocks, parts, p.size))
    dx, stored = p.loop_output(p.rows.shape)
    loop = loop_for(getattr(generated, f"vjp_{p.path}"), p.rows.size)
    grows = np.ascontiguousarray(g).reshape(-1, p.size)
    loop(
        p.loop_input(p.rows),
        p.loop_input(grows),
        p.loop_parameter(p.gamma),
        p.loop_eps(),
        stored,
        dgamma_blocks,
        dbeta_blocks,
    )
    combine = getattr(generated, f"combine_blocks_{p.path}")
    dgamma = p.finish(combine(dgamma_blocks).astype(np.float64))
    dbeta = p.finish(combine(dbeta_blocks)) if p.has_beta else None
    return p.finish(dx).reshape(p.x.shape), dgamma, dbeta


def jacobian(generated: ModuleType, prepared: Prepared) -> np.ndarray:
    """The dense (D, D) Jacobian of one sample, numerator layout."""
    p = prepared
    if p.x.ndim != 1:
        raise ValueError(f"x: expected one sample of shape (D,), got shape {p.x.shape}")
    out = p.result_buffer((p.size, p.size))
    loop = getattr(generated, f"jacobian_{p.path}")
    loop(p.widen(p.x), p.widen(p.gamma), p.loop_eps(), out)
    return p.finish(out)
